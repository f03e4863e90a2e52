import Foundation
import SkillbusTestSupport
import SkillbusZMQ
import Testing

@testable import Skillbus

/// The dashboard of a coordinator group follows its leader (PROTOCOL §13.7, issue 31): every member knows the
/// leader's dashboard and the others', a standby's page moves to the leader's, and a page whose leader died moves
/// to the next one. Real coordinators on a throwaway PostgreSQL, the page in headless Chromium.
@Suite(
    "Coordinator group: the dashboard follows the leader", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: ThrowawayPostgres.unavailable == nil, Comment(rawValue: ThrowawayPostgres.unavailable ?? "")))
struct DashboardFollowTests {
    let context: ZMQContext

    init() throws { context = try ZMQContext() }

    /// The status and the JSON body of `GET path` on `port`, and whether any page may read it.
    func get(_ port: UInt16, _ path: String) async -> (status: Int, json: JSONValue?, shared: Bool) {
        let answer = await HTTPProbe.get(port, path)
        let parts = answer.components(separatedBy: "\r\n\r\n")
        let json = parts.count > 1 ? try? JSONValue(parsing: Array(parts[1].utf8)) : nil
        return (HTTPProbe.status(answer), json, parts[0].contains("\r\nAccess-Control-Allow-Origin: *"))
    }

    @Test("a standby's /group and /state name the leader's dashboard; a page on it ends on the leader's, then b's")
    func pageFollowsTheLeader() async throws {
        let cluster = try GroupCluster(["a", "b"], context: context)
        defer { cluster.terminate() }
        try await cluster.start("a", leading: true)
        try await cluster.start("b")
        let ports = (a: cluster.httpPort("a"), b: cluster.httpPort("b"))
        let urls = (a: "http://127.0.0.1:\(ports.a)", b: "http://127.0.0.1:\(ports.b)")

        // The standby's /group: who leads and where its dashboard is, readable from any origin, nothing more.
        try await waitUntil("b's /group to name a's dashboard") {
            await get(ports.b, "/group").json?["leader"]?["http"]?.stringValue == urls.a
        }
        let standby = await get(ports.b, "/group")
        #expect(standby.status == 200 && standby.shared)
        #expect(
            standby.json == [
                "group": "g1", "leading": false, "leader": ["name": "a", "epoch": 1, "http": .string(urls.a)],
            ],
            "\(String(describing: standby.json))")
        let leader = await get(ports.a, "/group")
        #expect(leader.json?["leading"] == true && leader.json?["leader"]?["http"] == .string(urls.a) && leader.shared)
        #expect(try cluster.query("SELECT http FROM skillbus_leaders WHERE grp = 'g1'") == [urls.a])

        // /state (and so the page) of either member: the leader's dashboard, and every member's.
        let expected: JSONValue = [
            [
                "name": "a", "http": .string(urls.a), "bus": .string(cluster.members["a"]!.bus),
                "feed": .string(cluster.members["a"]!.feed),
            ],
            [
                "name": "b", "http": .string(urls.b), "bus": .string(cluster.members["b"]!.bus),
                "feed": .string(cluster.members["b"]!.feed),
            ],
        ]
        for port in [ports.a, ports.b] {
            try await waitUntil("the members on \(port)'s /state") {
                await get(port, "/state").json?["group"]?["members"] == expected
            }
        }
        let state = await get(ports.b, "/state")
        #expect(state.json?["group"]?["leader"]?["http"] == .string(urls.a) && !state.shared)

        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else {
            print("SKIPPED the browser half of pageFollowsTheLeader: /usr/bin/chromium is missing")
            return
        }
        let browser = try interopScript(
            "group_follow_check.py",
            [urls.b + "/", urls.a + "@a,b", urls.b + "@a,b", "note:this coordinator does not answer", urls.b + "@b"])
        defer { browser.signal(SIGTERM) }
        // The script's steps, in order: "N followed: URL" (live there, naming the members after @), "N noted: WORDS".
        func step(_ number: Int, _ line: String, timeout: Duration) async throws {
            try await browser.waitForLine("step \(number), \(line)", timeout: timeout) {
                $0.hasPrefix("\(number) ") || $0.hasPrefix("FAILED")
            }
            #expect(browser.output.contains("\(number) \(line)"), "\(browser.output)")
        }
        try await step(1, "followed: \(urls.a)", timeout: .seconds(60))
        #expect(
            browser.output.contains { $0.hasPrefix("note: moving to the leader a at \(urls.a)") }, "\(browser.output)")

        let killed = ContinuousClock.now
        cluster.process("a")?.signal(SIGKILL)
        try await cluster.waitForLead("b", timeout: .seconds(10))
        try await step(2, "followed: \(urls.b)", timeout: .seconds(20))
        let moved = ContinuousClock.now - killed
        print("kill -9 of the leader: the page was live on the new leader's dashboard after \(moved)")
        // The header said where it went before it went.
        #expect(
            browser.output.contains { $0.hasPrefix("note: moving to the leader b at \(urls.b)") }, "\(browser.output)")
        #expect(moved < .seconds(12), "\(moved)")

        // A leader that hangs (its host stopped: the event stream stays open and silent), and no other member leads:
        // the page says so and keeps asking, and is live again once the leader answers, which by then names itself
        // alone (a, dead for more than three leases, is left out of the members).
        let hung = try #require(cluster.process("b"))
        hung.signal(SIGSTOP)
        var resumed = false
        defer { if !resumed { hung.signal(SIGCONT) } }
        try await step(3, "noted: this coordinator does not answer", timeout: .seconds(20))
        #expect(
            browser.output.contains { $0.contains("no dashboard of the 2 member(s) known leads; asking again in") },
            "\(browser.output)")
        hung.signal(SIGCONT)
        resumed = true
        try await step(4, "followed: \(urls.b)", timeout: .seconds(40))
        #expect(try await browser.waitForExit(timeout: .seconds(30)) == 0, "\(browser.output)")
    }
}
