import Foundation
import Skillbus
import Testing

@testable import SkillbusCommands

/// Settings declared once: the reader, the known keys and the written file all come from one declaration.
@Suite("Settings files")
struct SettingsFileTests {
    func write(_ object: JSONValue, in directory: String) throws -> String {
        let path = directory + "/config.json"
        try Data(object.serialized()).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("a coordinator's file form reads back equal, every declared key in it, with one default per setting")
    func coordinatorRoundTrip() async throws {
        var configuration = CoordinatorConfiguration()
        // The state machine's default and the file's are one value (they were 0 and 5000).
        #expect(configuration.startupGraceMs == CoordinatorState.Settings().startupGraceMs)
        configuration.heartbeatMs = 250
        configuration.startupGraceMs = 0
        configuration.clientQueueShare = 0.5
        configuration.priorityPromotionMs = 100
        configuration.cacheBytesLimit = 0
        configuration.rateLimits = RateLimits(skills: ["echo": RateLimit(perSecond: 2, burst: 3)])
        configuration.http = HTTPAddress(host: "127.0.0.1", port: 0)
        configuration.dataDir = "/tmp/somewhere"
        configuration.ha = CoordinatorGroupSettings(database: "postgresql://db1:5432/skillbus", group: "g")
        // Written files used to leave the rate limits, priorities, cache and http out.
        let keys = Set(configuration.json.objectValue?.keys.map { $0 } ?? [])
        #expect(keys == CoordinatorConfiguration.keys.subtracting(["security"]).union(["version"]))
        try await withTemporaryDirectory { directory in
            let read = try CoordinatorConfiguration.load(path: try write(configuration.json, in: directory))
            #expect(read == configuration)
        }
    }

    @Test("a worker's file form reads back equal; an empty skills list means no built-ins, an absent one all")
    func workerRoundTrip() async throws {
        var worker = WorkerConfiguration()
        worker.name = "w"
        #expect(worker.builtins == BuiltinSkills.identifiers)
        worker.skills = []
        worker.capacity = 7
        try await withTemporaryDirectory { directory in
            let read = try WorkerConfiguration.load(path: try write(worker.json, in: directory))
            #expect(read == worker)
            #expect(read.builtins.isEmpty)
            #expect(try WorkerCommand.skills(of: read).isEmpty, "\"skills\": [] registered every built-in")
            let absent = try WorkerConfiguration.load(path: try write(["version": 1, "name": "w"], in: directory))
            #expect(absent.skills == nil && absent.builtins == BuiltinSkills.identifiers)
        }
    }

    @Test("a file with several mistakes reports every one at once, each naming its key")
    func everyProblemAtOnce() async throws {
        try await withTemporaryDirectory { directory in
            let worker: JSONValue = [
                "version": 1, "name": "w", "capacity": 0, "skills": ["echo", "nope", "zzz"], "colour": "blue",
                "heartbeatMs": "fast",
            ]
            let path = try write(worker, in: directory)
            #expect {
                try WorkerConfiguration.load(path: path)
            } throws: { error in
                let message = (error as? SkillbusError)?.message ?? ""
                // The two unknown skills are two lines of the one list, not a list within it.
                return message.hasPrefix("5 problems:") && message.contains("colour: unknown key")
                    && message.contains("skills[2]: unknown built-in skill 'zzz'")
                    && message.contains("capacity: must be from 1 to 100000, got 0")
                    && message.contains("skills[1]: unknown built-in skill 'nope'")
                    && message.contains("heartbeatMs: expected an integer, got string")
            }
            let coordinator: JSONValue = ["version": 1, "queueLimit": -1, "clientQueueShare": 2, "bus": "nowhere"]
            #expect {
                try CoordinatorConfiguration.load(path: try write(coordinator, in: directory))
            } throws: { error in
                let message = (error as? SkillbusError)?.message ?? ""
                return message.hasPrefix("3 problems:") && message.contains("queueLimit")
                    && message.contains("clientQueueShare") && message.contains("bus")
            }
        }
    }
}
