import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands

/// The descriptor's `retry`, `idempotent` and `concurrency` (PROTOCOL §5.2.1), and a worker's overrides.
@Suite("Skill policies: retry, idempotent, concurrency")
struct SkillPolicyTests {
    @Test("a descriptor's policies read back as written; defaults fill a policy given as {}")
    func roundTrip() throws {
        let json: JSONValue = [
            "identifier": "fetch", "idempotent": true, "concurrency": 2,
            "retry": ["attempts": 3, "backoffMs": 250, "on": ["busy", "busy", "upstream_down"], "attemptTimeoutMs": 900],
        ]
        let descriptor = try SkillDescriptor(json: json)
        #expect(descriptor.idempotent && descriptor.concurrency == 2)
        #expect(descriptor.retry == RetryPolicy(attempts: 3, backoffMs: 250, on: ["busy", "upstream_down"], attemptTimeoutMs: 900))
        #expect(try SkillDescriptor(json: descriptor.json) == descriptor)
        let minimal = try SkillDescriptor(json: ["identifier": "x", "retry": [:]])
        #expect(minimal.retry == RetryPolicy() && !minimal.idempotent && minimal.concurrency == nil)
        #expect(
            minimal.json["retry"]
                == ["attempts": 4, "backoffMs": 100, "multiplier": 2, "maxBackoffMs": 10_000, "jitter": 0.2, "on": []])
        // Absent or null: nothing declared, and nothing written back.
        let plain = try SkillDescriptor(json: ["identifier": "x", "retry": nil, "idempotent": nil, "concurrency": nil])
        #expect(plain.json["retry"] == nil && plain.json["idempotent"] == nil && plain.json["concurrency"] == nil)
    }

    @Test(
        "bad policies refuse the descriptor, naming the key",
        arguments: [
            (["identifier": "x", "idempotent": "yes"] as JSONValue, "'idempotent' must be true or false"),
            (["identifier": "x", "concurrency": 0] as JSONValue, "'concurrency' must be an integer from 1"),
            (["identifier": "x", "concurrency": 1.5] as JSONValue, "'concurrency'"),
            (["identifier": "x", "retry": 3] as JSONValue, "'retry' must be an object"),
            (["identifier": "x", "retry": ["attempts": 0]] as JSONValue, "'attempts' must be an integer from 1 to 11"),
            (["identifier": "x", "retry": ["multiplier": 0.5]] as JSONValue, "'multiplier'"),
            (["identifier": "x", "retry": ["jitter": 2]] as JSONValue, "'jitter'"),
            (["identifier": "x", "retry": ["on": "busy"]] as JSONValue, "'on' must be an array"),
            (["identifier": "x", "retry": ["on": ["cancelled"]]] as JSONValue, "never retried"),
            (["identifier": "x", "retry": ["on": ["agent_lost"]]] as JSONValue, "only for an idempotent skill"),
        ] as [(JSONValue, String)])
    func refusals(json: JSONValue, problem: String) {
        do {
            _ = try SkillDescriptor(json: json)
            Issue.record("accepted \(json.jsonString)")
        } catch {
            #expect(error.code == .invalidRegistration && error.message.contains(problem), "\(error)")
        }
    }

    @Test("what may be retried: agent_lost and timeout only when idempotent, the policy's codes, never a cancellation")
    func retryable() throws {
        let idempotent = try SkillDescriptor(json: ["identifier": "x", "idempotent": true, "retry": ["on": ["busy"]]])
        #expect(idempotent.isRetryable("agent_lost") && idempotent.isRetryable("timeout") && idempotent.isRetryable("busy"))
        #expect(!idempotent.isRetryable("skill_failed") && !idempotent.isRetryable("cancelled"))
        let other = try SkillDescriptor(json: ["identifier": "x", "retry": ["on": ["busy"]]])
        #expect(!other.isRetryable("agent_lost") && !other.isRetryable("timeout") && other.isRetryable("busy"))
        // Idempotent without a policy: not retried by the bus, but neither kept as the answer.
        #expect(try SkillDescriptor(json: ["identifier": "x", "idempotent": true]).isRetryable("agent_lost"))
    }

    @Test("backoff grows by the multiplier up to its cap, and jitter stays within its share")
    func backoff() {
        let policy = RetryPolicy(backoffMs: 100, multiplier: 3, maxBackoffMs: 500, jitter: 0)
        #expect([1, 2, 3, 4].map { policy.backoffNanos(retry: $0, random: 0.5) / 1_000_000 } == [100, 300, 500, 500])
        let jittered = RetryPolicy(backoffMs: 1000, jitter: 0.1)
        #expect(jittered.backoffNanos(retry: 1, random: 0) == 900_000_000)
        #expect(jittered.backoffNanos(retry: 1, random: 1) == 1_100_000_000)
    }

    @Test("a worker's policies replace what a built-in declares, key by key; null removes it")
    func overrides() throws {
        let policies = try SkillPolicies(json: [
            "sleep": ["concurrency": 1], "echo": ["retry": nil], "math.eval": ["retry": ["attempts": 2]],
        ])
        let skills = try policies.apply(to: [SleepSkill(), EchoSkill(), MathEvalSkill(), TextStatsSkill()])
        let byName = Dictionary(uniqueKeysWithValues: skills.map { ($0.identifier, $0.descriptor) })
        #expect(byName["sleep"]?.concurrency == 1 && byName["sleep"]?.retry == RetryPolicy())
        #expect(byName["echo"]?.retry == nil && byName["echo"]?.idempotent == true)
        #expect(byName["math.eval"]?.retry?.attempts == 2)
        #expect(byName["text.stats"] == TextStatsSkill().descriptor)
        #expect(try SkillPolicies(json: policies.json) == policies)
        // Still the skill it wraps.
        #expect(skills.first?.executionStyle == .quick)
    }

    @Test("policies the registry would refuse are refused in the worker's configuration")
    func badOverrides() {
        let cases: [(JSONValue, String)] = [
            (["sleep": ["concurrency": 0]], "'concurrency'"),
            (["sleep": ["limit": 1]], "unknown key 'limit'"),
            (["sleep": 1], "expected an object"),
            (["sleep": ["idempotent": false, "retry": ["on": ["timeout"]]]], "only for an idempotent skill"),
        ]
        for (json, problem) in cases {
            do {
                _ = try SkillPolicies(json: json).apply(to: [SleepSkill()])
                Issue.record("accepted \(json.jsonString)")
            } catch {
                #expect(error.code == .invalidConfiguration && error.message.contains(problem), "\(error)")
            }
        }
    }
}

extension SkillPolicyTests {
    @Test("a worker config's policies and --policy on the command line; the flag wins for its skill")
    func workerConfiguration() throws {
        let path = NSTemporaryDirectory() + "skillbus-policies-\(UUID().uuidString).json"
        try Data(#"{"version":1,"name":"a","policies":{"sleep":{"concurrency":2},"echo":{"retry":null}}}"#.utf8)
            .write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let parsed = try WorkerCommand.spec.parse(["--config", path, "--policy", #"sleep={"concurrency":1}"#])
        let configuration = try WorkerCommand.configuration(parsed)
        #expect(configuration.policies.overrides["sleep"]?.concurrency == .some(1))
        #expect(configuration.policies.overrides["echo"]?.retry == .some(nil))
        // The file form a supervisor writes for its child reads back the same.
        let written = NSTemporaryDirectory() + "skillbus-policies-\(UUID().uuidString).json"
        try Data(configuration.json.serialized()).write(to: URL(fileURLWithPath: written))
        defer { try? FileManager.default.removeItem(atPath: written) }
        #expect(try WorkerConfiguration.load(path: written).policies == configuration.policies)
        for (argument, problem) in [("sleep", "expected SKILL=JSON"), (#"sleep={"concurrency":0}"#, "'concurrency'")] {
            #expect {
                try WorkerCommand.configuration(try WorkerCommand.spec.parse(["--name", "a", "--policy", argument]))
            } throws: { error in
                (error as? UsageError)?.message.contains(problem) == true
            }
        }
        let bad = NSTemporaryDirectory() + "skillbus-policies-\(UUID().uuidString).json"
        try Data(#"{"version":1,"name":"a","policies":{"sleep":{"limit":1}}}"#.utf8).write(to: URL(fileURLWithPath: bad))
        defer { try? FileManager.default.removeItem(atPath: bad) }
        #expect {
            try WorkerConfiguration.load(path: bad)
        } throws: { error in
            (error as? SkillbusError)?.message.contains("policies: policy of 'sleep': unknown key 'limit'") == true
        }
    }
}
