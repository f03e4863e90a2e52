import Foundation
import Testing

@testable import Skillbus
@testable import SkillbusCommands

@Suite("skillbus top: aggregation, keys and layout")
struct TopViewTests {
    typealias Completion = ActivityWindow.Completion

    @Test("nearest-rank percentiles")
    func percentiles() {
        let values = (1...100).map(Double.init)
        #expect(ActivityWindow.percentile(50, of: values) == 50)
        #expect(ActivityWindow.percentile(99, of: values) == 99)
        #expect(ActivityWindow.percentile(99, of: [7]) == 7)
        #expect(ActivityWindow.percentile(50, of: [1, 2, 3]) == 2)
        #expect(ActivityWindow.percentile(50, of: []) == nil)
    }

    @Test("the window's rate covers the time watched, then only its span; old completions go")
    func rates() {
        var window = ActivityWindow(span: 10, started: 100)
        for index in 0..<20 {
            window.record(Completion(at: 100 + Double(index) * 0.1, agent: "a", skill: "echo", durationMs: 1, ok: true))
        }
        // 20 completions in the 2 s watched so far.
        #expect(window.summary(now: 102).perSecond == 10)
        window.record(Completion(at: 115, agent: "b", skill: "echo", durationMs: 5, ok: false))
        window.trim(now: 115)
        let later = window.summary(now: 115)
        #expect(later.count == 1)
        #expect(later.errors == 1)
        #expect(later.perSecond == 0.1)
        #expect(later.p50Ms == 5)
        #expect(window.kept == 1)
    }

    @Test("the window keeps at most its limit, and rates over what it kept")
    func limit() {
        var window = ActivityWindow(span: 100, limit: 10, started: 0)
        for index in 0..<50 {
            window.record(Completion(at: Double(index), agent: "a", skill: "s", durationMs: Double(index), ok: true))
        }
        #expect(window.kept == 10)
        let summary = window.summary(now: 50)
        #expect(summary.count == 10)
        #expect(summary.perSecond == 10.0 / 10.0)
        #expect(summary.p50Ms == 44)
    }

    static let listing: JSONValue = [
        "agents": [
            [
                "agent": "alpha", "capacity": 4, "inFlight": 1, "state": ["state": "executingSkill", "skill": "echo"],
                "skills": ["echo", "text.stats"], "results": ["ok": 7, "error": 2], "sessions": 3,
            ],
            [
                "agent": "beta", "capacity": 2, "inFlight": 0, "state": ["state": "idle"], "skills": ["echo"],
                "results": ["ok": 1, "error": 0],
            ],
        ],
        "registry": ["seq": 4, "epoch": "e", "digest": "d"], "waiting": 3,
        "bySkill": ["echo": ["ok": 8, "error": 2, "waiting": 3], "text.stats": ["ok": 0, "error": 0, "waiting": 0]],
    ]

    @Test("a frame joins the listing's counts with the feed's completions and states")
    func frame() throws {
        var model = TopModel(started: 0)
        model.apply(listing: Self.listing)
        for (index, agent) in ["alpha", "alpha", "beta", ""].enumerated() {
            model.apply(
                topic: "request.done",
                event: ["agent": .string(agent), "skill": "echo", "status": index == 3 ? "error" : "ok",
                    "durationMs": .number(Double(index + 1))],
                at: 1)
        }
        // Joined and skipped invocations ran nowhere.
        model.apply(
            topic: "invocation.done",
            event: ["agent": "alpha", "skill": "echo", "status": "ok", "durationMs": 9, "deduplicated": true], at: 1)
        model.apply(topic: "invocation.done", event: ["agent": "", "skill": "echo", "status": "skipped"], at: 1)
        model.apply(topic: "agent.state", event: ["agent": "beta", "state": "failed", "reason": "cancelled"], at: 1)
        model.apply(topic: "registry.heartbeat", event: ["seq": 6], at: 1)
        let frame = model.frame(now: 2)
        #expect(frame.registrySeq == 6)
        #expect(frame.waiting == 3)
        #expect(frame.bus.count == 4)
        #expect(frame.bus.errors == 1)
        let alpha = try #require(frame.agents.first { $0.name == "alpha" })
        #expect(alpha.state == "executingSkill(echo)")
        #expect(alpha.activity.count == 2)
        #expect(alpha.activity.p50Ms == 1)
        #expect(alpha.activity.p99Ms == 2)
        #expect((alpha.ok, alpha.errors, alpha.sessions) == (7, 2, 3))
        let beta = try #require(frame.agents.first { $0.name == "beta" })
        #expect(beta.state == "failed(cancelled)")
        let echo = try #require(frame.skills.first { $0.name == "echo" })
        #expect((echo.providers, echo.ok, echo.errors, echo.waiting) == (2, 8, 2, 3))
        #expect(echo.activity.count == 4)
        // A new listing holds the bus's states again.
        model.apply(listing: Self.listing)
        #expect(model.frame(now: 2).agents.first { $0.name == "beta" }?.state == "idle")
    }

    @Test("keys: s cycles the sort, / types a filter, Enter keeps it, Esc clears it, q quits")
    func keys() {
        var view = TopView()
        var quits = view.handle(key: UInt8(ascii: "s"))
        #expect(!quits)
        #expect(view.sort == .rate)
        _ = view.handle(key: UInt8(ascii: "S"))
        #expect(view.sort == .name)
        _ = view.handle(key: UInt8(ascii: "S"))
        #expect(view.sort == .load)
        _ = view.handle(key: UInt8(ascii: "/"))
        #expect(view.editingFilter)
        // While typing, q is a letter of the filter.
        for key in "alqx".utf8 {
            quits = view.handle(key: key)
            #expect(!quits)
        }
        _ = view.handle(key: 0x7F)
        #expect(view.filter == "alq")
        _ = view.handle(key: 0x0D)
        #expect(!view.editingFilter)
        #expect(view.shows("ALQ-1"))
        #expect(!view.shows("beta"))
        _ = view.handle(key: 0x1B)
        #expect(view.filter.isEmpty)
        quits = view.handle(key: UInt8(ascii: "q"))
        #expect(quits)
        quits = view.handle(key: 0x03)
        #expect(quits)
    }

    func frame(sortedBy sort: TopView.Sort, filter: String = "", width: Int = 120, height: Int? = nil) -> [String] {
        var model = TopModel(started: 0)
        model.apply(listing: Self.listing)
        for _ in 0..<5 {
            let done: JSONValue = ["agent": "beta", "skill": "echo", "status": "ok", "durationMs": 2]
            model.apply(topic: "request.done", event: done, at: 1)
        }
        var view = TopView()
        view.sort = sort
        view.filter = filter
        return TopLayout.lines(model.frame(now: 2), view: view, width: width, height: height, title: "title")
    }

    @Test("the layout names agents and skills, sorts them, filters them and fits the width")
    func layout() throws {
        let byName = frame(sortedBy: .name)
        let alphaLine = try #require(byName.firstIndex { $0.hasPrefix("alpha") })
        let betaLine = try #require(byName.firstIndex { $0.hasPrefix("beta") })
        #expect(alphaLine < betaLine)
        #expect(byName[alphaLine].contains("executingSkill(echo)"))
        #expect(byName[alphaLine].contains("1/4"))
        #expect(byName.contains { $0.hasPrefix("bus: 2.5 req/s") && $0.contains("3 waiting, registry seq 4") })
        #expect(byName.last?.hasPrefix("sort: name (s)") == true)
        let byRate = frame(sortedBy: .rate)
        let betaFirst = try #require(byRate.firstIndex { $0.hasPrefix("beta") })
        #expect(try betaFirst < #require(byRate.firstIndex { $0.hasPrefix("alpha") }))
        let filtered = frame(sortedBy: .name, filter: "BET")
        #expect(!filtered.contains { $0.hasPrefix("alpha") })
        #expect(filtered.contains { $0.hasPrefix("beta") })
        #expect(filtered.contains("(no skill matches)"))
        for width in [20, 45, 80] { #expect(frame(sortedBy: .name, width: width).allSatisfy { $0.count <= width }) }
        // A short window keeps the keys on its last line.
        let short = frame(sortedBy: .name, height: 6)
        #expect(short.count == 6)
        #expect(short.last?.hasPrefix("sort:") == true)
        let tall = frame(sortedBy: .name, height: 40)
        #expect(tall.count == 40)
    }
}
