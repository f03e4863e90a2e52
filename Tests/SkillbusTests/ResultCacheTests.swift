import Foundation
import Testing

@testable import Skillbus

/// The result cache alone (LRU by bytes, expiry) and on the state machine: identical invocations of a pure
/// skill in other rounds are answered from it, `noCache` runs them, only `ok` outcomes are kept.
@Suite("Result cache")
struct ResultCacheTests {
    let alpha: PeerID = [0xA1]
    let client: PeerID = [0xC1]
    let ms: UInt64 = 1_000_000

    func outcome(_ text: String) -> Outcome {
        Outcome(status: .ok, agent: Array("alpha".utf8), payload: Array(text.utf8), durationMicros: 5)
    }

    @Test("least recently used out first when the bytes run out; expired entries are misses")
    func lru() {
        let size = 1 + 100 + 5 + ResultCache.entryOverhead
        var cache = ResultCache(limitBytes: 3 * size)
        let payload = String(repeating: "x", count: 100)
        for name in ["a", "b", "c"] { cache.store(ByteKey(Array(name.utf8)), outcome(payload), lifetimeMs: 1000, now: 0) }
        #expect(cache.count == 3 && cache.bytes == 3 * size)
        #expect(cache.lookup(ByteKey(Array("a".utf8)), now: 1) != nil)  // a is now the most recent
        cache.store(ByteKey(Array("d".utf8)), outcome(payload), lifetimeMs: 1000, now: 2)
        #expect(cache.count == 3)
        #expect(cache.lookup(ByteKey(Array("b".utf8)), now: 3) == nil)  // b was the least recently used
        #expect(cache.lookup(ByteKey(Array("a".utf8)), now: 3) != nil)
        #expect(cache.lookup(ByteKey(Array("c".utf8)), now: 3) != nil)
        #expect(cache.lookup(ByteKey(Array("a".utf8)), now: 1000 * ms) == nil)  // expired
        #expect(cache.count == 2 && cache.bytes == 2 * size)
        // An error is never kept, nor one larger than the whole budget.
        cache.store(ByteKey([1]), Outcome(status: .error, agent: [], payload: [], durationMicros: 0), lifetimeMs: 9, now: 0)
        cache.store(ByteKey([2]), outcome(String(repeating: "y", count: 4 * size)), lifetimeMs: 9, now: 0)
        #expect(cache.count == 2)
    }

    @Test("10,000 random stores and lookups evict exactly what a plain LRU list would")
    func lruAgainstAList() {
        let size = 2 + 10 + 5 + ResultCache.entryOverhead
        var cache = ResultCache(limitBytes: 40 * size)
        var recent: [Int] = []  // least recently used first
        var generator = SplitMix(seed: 7)
        for step in 0..<10_000 {
            let number = Int(generator.next() % 64)
            let key = ByteKey([UInt8(number), 0])
            if generator.next() % 2 == 0 {
                cache.store(key, outcome(String(repeating: "z", count: 10)), lifetimeMs: 1_000_000, now: UInt64(step))
                recent.removeAll { $0 == number }
                recent.append(number)
                if recent.count > 40 { recent.removeFirst() }
            } else {
                let hit = cache.lookup(key, now: UInt64(step)) != nil
                #expect(hit == recent.contains(number), "step \(step), key \(number)")
                if hit {
                    recent.removeAll { $0 == number }
                    recent.append(number)
                }
            }
            #expect(cache.count == recent.count)
        }
        #expect(cache.bytes == recent.count * size)
    }

    @Test("hits on one entry while another is never used do not grow the use order without bound")
    func hitsKeepUseOrderSmall() {
        var cache = ResultCache(limitBytes: 1 << 20)
        let (cold, hot) = (ByteKey([1]), ByteKey([2]))
        cache.store(cold, outcome("c"), lifetimeMs: 1_000_000, now: 0)
        cache.store(hot, outcome("h"), lifetimeMs: 1_000_000, now: 0)
        for step in 1...100_000 { #expect(cache.lookup(hot, now: UInt64(step)) != nil) }
        #expect(cache.useSlots < 2048, "\(cache.useSlots) slots for 2 entries")
        // The cold entry is still the least recently used: it goes first when the budget runs out.
        let big = String(repeating: "b", count: (1 << 20) - 200)
        cache.store(ByteKey([3]), outcome(big), lifetimeMs: 1_000_000, now: 100_001)
        #expect(cache.lookup(cold, now: 100_002) == nil)
    }

    func state(pure: Bool = true) -> CoordinatorState {
        var state = CoordinatorState(epoch: "e1")
        var skill: [String: JSONValue] = ["identifier": "echo", "parameters": [["name": "text", "type": "string"]]]
        if pure {
            skill["pure"] = true
            skill["cacheMs"] = 60_000
        }
        _ = state.handleWorker(
            .ready(["name": "alpha", "capacity": 10, "skills": .array([.object(skill)])]), from: alpha, now: 0)
        return state
    }

    func invokes(_ actions: [CoordinatorAction]) -> [Invocation] {
        actions.compactMap { if case .toWorker(_, .invoke(let invocation)) = $0 { invocation } else { nil } }
    }

    func round(_ id: String, text: String = "hi", noCache: Bool = false) -> RoundRequest {
        let spec = try! RoundSpec(json: ["invoke": ["skill": "echo", "params": ["text": .string(text)]]], stepLimit: 10)
        return RoundRequest(
            requestID: "q" + id, roundID: id, timeoutMs: 60_000, body: spec.body(retries: nil, noCache: noCache).serialized())
    }

    func document(_ actions: [CoordinatorAction]) -> JSONValue? {
        for case .toClient(_, .round(_, _, let document)) in actions { return try? JSONValue(parsing: document) }
        return nil
    }

    let result = JSONValue.object(["type": "text", "text": "hi"]).serialized()

    @Test("a second round of the same pure invocation is answered from the cache: cached, no INVOKE")
    func acrossRounds() {
        var state = state()
        let first = invokes(state.handleRound(round("R1"), from: client, now: 0))
        #expect(first.count == 1)
        let done = state.handleWorker(.result(invocationID: first[0].invocationID, status: .ok, payload: result), from: alpha, now: 1)
        #expect(document(done)?["invocations"]?.arrayValue?.first?["cached"] == nil)
        // Parameters in another spelling are the same canonical invocation.
        let second = state.handleRound(round("R2"), from: client, now: 2 * ms)
        #expect(invokes(second).isEmpty)
        let answer = document(second)
        #expect(answer?["status"] == "ok" && answer?["invocations"]?.arrayValue?.first?["cached"] == true)
        #expect(answer?["invocations"]?.arrayValue?.first?["agent"] == "alpha" && answer?["summary"]?["executions"] == 0)
        #expect(second.contains { if case .publish(.invocationCached(_, _, "echo", "alpha")) = $0 { true } else { false } })
        // A REQUEST is answered from it too.
        let request = InvokeRequest(requestID: "r", roundID: "", skill: "echo", parameters: Array(#"{"text": "hi"}"#.utf8))
        let reply = state.handleInvoke(request, from: client, now: 3 * ms)
        #expect(invokes(reply).isEmpty && reply.contains { if case .toClient(_, .reply(let r)) = $0 { r.status == .ok } else { false } })
        // noCache runs it.
        #expect(invokes(state.handleRound(round("R3", noCache: true), from: client, now: 4 * ms)).count == 1)
        #expect(state.cacheCount.entries == 1)
        // Past the lifetime it runs again.
        #expect(invokes(state.handleRound(round("R4"), from: client, now: 61_000 * ms)).count == 1)
    }

    @Test("a skill that is not pure is never cached; an error is not kept")
    func notCached() {
        var state = state(pure: false)
        let first = invokes(state.handleRound(round("R1"), from: client, now: 0))
        _ = state.handleWorker(.result(invocationID: first[0].invocationID, status: .ok, payload: result), from: alpha, now: 1)
        #expect(invokes(state.handleRound(round("R2"), from: client, now: 2)).count == 1)
        var pure = self.state()
        let failing = invokes(pure.handleRound(round("R1"), from: client, now: 0))
        let error = SkillbusError(.skillFailed, "no").json.serialized()
        _ = pure.handleWorker(.result(invocationID: failing[0].invocationID, status: .error, payload: error), from: alpha, now: 1)
        #expect(invokes(pure.handleRound(round("R2"), from: client, now: 2)).count == 1)
    }

    @Test("cacheMs needs pure; a worker's policy may make a skill pure with a lifetime")
    func descriptor() throws {
        #expect(throws: SkillbusError.self) {
            try SkillDescriptor(json: ["identifier": "x", "cacheMs": 1000])
        }
        #expect(throws: SkillbusError.self) {
            try SkillDescriptor(json: ["identifier": "x", "pure": true, "cacheMs": 0])
        }
        let parsed = try SkillDescriptor(json: ["identifier": "x", "pure": true, "cacheMs": 1000])
        #expect(parsed.pure && parsed.cacheMs == 1000 && parsed.json["cacheMs"] == 1000)
        let policies = try SkillPolicies(json: ["echo": ["pure": true, "cacheMs": 5000]])
        let skills = try policies.apply(to: BuiltinSkills.make(["echo"], sandbox: "/tmp"))
        #expect(skills.first?.descriptor.pure == true && skills.first?.descriptor.cacheMs == 5000)
        #expect(throws: SkillbusError.self) { try SkillPolicies(json: ["echo": ["cacheMs": 5000]]).apply(to: BuiltinSkills.make(["echo"], sandbox: "/tmp")) }
    }
}
