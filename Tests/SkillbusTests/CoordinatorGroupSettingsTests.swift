import Foundation
import Testing

@testable import Skillbus

/// The `ha` section of a coordinator config: every problem reported at once, each naming its key; the password
/// from the environment or a file, never from the config, and never written back.
@Suite("Coordinator group settings (ha)")
struct CoordinatorGroupSettingsTests {
    func load(_ ha: String, environment: [String: String] = [:], in directory: String) throws
        -> CoordinatorGroupSettings?
    {
        let path = directory + "/coordinator.json"
        try Data(#"{"version": 1, "ha": \#(ha)}"#.utf8).write(to: URL(fileURLWithPath: path))
        let root = try ConfigObject.load(path: path)
        return try root.object("ha", allowed: CoordinatorGroupSettings.fields).map {
            try CoordinatorGroupSettings(reading: $0, environment: environment)
        }
    }

    @Test("a good section, its password from the environment or from a file beside the config")
    func good() async throws {
        try await withTemporaryDirectory { directory in
            let fromEnv = try load(
                #"{"database": "postgresql://sb@db1:5432/skillbus", "group": "prod-1", "passwordEnv": "SB_PW"}"#,
                environment: ["SB_PW": "s3cret"], in: directory)
            #expect(fromEnv?.password == "s3cret" && fromEnv?.group == "prod-1")
            let written = String(decoding: fromEnv.map { $0.json.serialized() } ?? [], as: UTF8.self)
            #expect(!written.contains("s3cret") && written.contains("SB_PW"))
            try Data("from-file\n".utf8).write(to: URL(fileURLWithPath: directory + "/pw"))
            let fromFile = try load(
                #"{"database": "postgres://db1/skillbus", "group": "g", "passwordFile": "pw"}"#, in: directory)
            #expect(fromFile?.password == "from-file")
            #expect(fromFile?.passwordFile == directory + "/pw")
            // Through the coordinator's own reader too, and a journal follows from it.
            let path = directory + "/full.json"
            try Data(#"{"version": 1, "ha": {"database": "postgresql://db1/x", "group": "g"}}"#.utf8)
                .write(to: URL(fileURLWithPath: path))
            let configuration = try CoordinatorConfiguration.load(path: path)
            #expect(configuration.ha?.database == "postgresql://db1/x" && configuration.stateSettings.journaled)
            #expect(configuration.ha?.leaseMs == 2000 && configuration.ha?.name == nil)
            let named = try load(
                #"{"database": "postgresql://db1/x", "group": "g", "name": "coord-a", "leaseMs": 1500, "#
                    + #""advertise": {"bus": "tcp://10.0.0.1:5555"}}"#, in: directory)
            #expect(named?.memberName == "coord-a" && named?.leaseMs == 1500)
            let endpoints = named?.advertised(bus: "tcp://0.0.0.0:5555", feed: "tcp://0.0.0.0:5556")
            #expect(endpoints?.bus == "tcp://10.0.0.1:5555")
            #expect(endpoints?.feed == "tcp://\(ProcessInfo.processInfo.hostName):5556")
            let again = String(decoding: named.map { $0.json.serialized() } ?? [], as: UTF8.self)
            #expect(again.contains(#""advertise":{"bus":"tcp://10.0.0.1:5555"}"#) && again.contains(#""leaseMs":1500"#))
        }
    }

    @Test("advertise.http: a dashboard URL written back as given, else the bound address, none without HTTP")
    func advertisedHTTP() async throws {
        try await withTemporaryDirectory { directory in
            let named = try #require(
                try load(
                    #"{"database": "postgresql://db1/x", "group": "g", "advertise": {"http": "https://ops.example:8443/"}}"#,
                    in: directory))
            #expect(named.advertise.http == "https://ops.example:8443")
            #expect(
                named.advertisedHTTP(bound: HTTPAddress(host: "127.0.0.1", port: 8080)) == "https://ops.example:8443")
            #expect(named.advertisedHTTP(bound: nil) == nil, "a coordinator serving no HTTP advertises no dashboard")
            let written = String(decoding: named.json.serialized(), as: UTF8.self)
            #expect(written.contains(#""advertise":{"http":"https://ops.example:8443"}"#), "\(written)")
            let path = directory + "/again.json"
            try Data(#"{"version": 1, "ha": \#(written)}"#.utf8).write(to: URL(fileURLWithPath: path))
            #expect(try CoordinatorConfiguration.load(path: path).ha == named)

            let plain = CoordinatorGroupSettings(database: "postgresql://db1/x", group: "g")
            #expect(
                plain.advertisedHTTP(bound: HTTPAddress(host: "0.0.0.0", port: 8080), host: "hosta")
                    == "http://hosta:8080")
            #expect(
                plain.advertisedHTTP(bound: HTTPAddress(host: "127.0.0.1", port: 41234)) == "http://127.0.0.1:41234")
            #expect(plain.advertisedHTTP(bound: nil) == nil)
            #expect(!String(decoding: plain.json.serialized(), as: UTF8.self).contains("advertise"))
        }
    }

    @Test(
        "advertise.http must be a dashboard URL others can open",
        arguments: [
            ("tcp://10.0.0.1:8080", "is no http:// URL"), ("http://", "is no URL of a dashboard"),
            ("http://0.0.0.0:8080", "is no URL others can open"), ("http://[::]:8080", "is no URL others can open"),
            ("http://a:port", "names no port"), ("http://a:0", "names no port"),
            ("http://a:8080/dash", "without a path"), ("http://u@a:8080", "without a path, query or user"),
            ("http://a:8080?x=1", "without a path"),
        ])
    func badAdvertisedHTTP(_ url: String, _ words: String) {
        let problem = CoordinatorGroupSettings.problem(http: url)
        #expect(problem?.contains(words) == true, "\(url): \(problem ?? "accepted")")
    }

    @Test(arguments: ["http://10.0.0.1:8080", "http://ops", "https://ops.example/", "http://[::1]:8080"])
    func goodAdvertisedHTTP(_ url: String) {
        #expect(CoordinatorGroupSettings.problem(http: url) == nil)
    }

    @Test("every problem of a broken section is reported at once, each naming its key")
    func broken() async throws {
        try await withTemporaryDirectory { directory in
            let cases: [(String, [String])] = [
                (#"{"group": "g"}"#, ["ha.database: missing"]),
                (#"{"database": "mysql://x/y", "group": "g"}"#, ["ha.database: 'mysql://x/y' is no PostgreSQL"]),
                (#"{"database": "postgresql://u:pw@x/y", "group": "g"}"#, ["ha.database: holds a password"]),
                (#"{"database": "postgresql://x/y", "group": "a b"}"#, ["ha.group: 'a b' is no group name"]),
                (
                    #"{"database": 5, "passwordEnv": "NOPE_NOT_SET"}"#,
                    [
                        "ha.database: expected a string", "ha.group: missing",
                        "ha.passwordEnv: the environment variable NOPE_NOT_SET is not set",
                    ]
                ),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "passwordFile": "none"}"#,
                    ["ha.passwordFile: cannot read"]
                ),
                (#"{"database": "postgresql://x/y", "group": "g", "pasword": "x"}"#, ["ha.pasword: unknown key"]),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "name": "a/b"}"#,
                    ["ha.name: 'a/b' is no coordinator name"]
                ),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "leaseMs": 10}"#,
                    ["ha.leaseMs: must be from 500 to 600000"]
                ),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "advertise": {"bus": "tcp://0.0.0.0:5555", "feed": "x"}}"#,
                    [
                        "ha.advertise.bus: 'tcp://0.0.0.0:5555' is no endpoint others can connect to",
                        "ha.advertise.feed: 'x' is not a ZeroMQ endpoint",
                    ]
                ),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "advertise": {"bus": "tcp://a:1", "dash": "x"}}"#,
                    ["ha.advertise.dash: unknown key"]
                ),
                (
                    #"{"database": "postgresql://x/y", "group": "g", "advertise": {"http": "x", "feed": "y"}}"#,
                    ["ha.advertise.http: 'x' is no http:// URL", "ha.advertise.feed: 'y' is not a ZeroMQ endpoint"]
                ),
            ]
            for (section, expected) in cases {
                do {
                    _ = try load(section, in: directory)
                    Issue.record("accepted \(section)")
                } catch let error as SkillbusError {
                    #expect(error.code == .invalidConfiguration)
                    for words in expected { #expect(error.message.contains(words), "\(section): \(error.message)") }
                    #expect(!error.message.contains("pw@"), "\(error.message)")
                }
            }
        }
    }
}
