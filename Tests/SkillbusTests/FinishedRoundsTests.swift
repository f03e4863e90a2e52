import Testing

@testable import Skillbus

/// Finished rounds in their compact form: every round found by its id with the outcomes it was stored
/// with, whatever was forgotten around it, and chunks freed as the oldest rounds go.
@Suite("Finished rounds, kept compactly")
struct FinishedRoundsTests {
    static func outcome(_ index: Int, payloadBytes: Int = 20) -> Outcome {
        Outcome(
            status: index % 3 == 0 ? .error : .ok, agent: Array("agent-\(index % 5)".utf8),
            payload: [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: payloadBytes), durationMicros: index * 7)
    }

    static func executions(_ index: Int, payloadBytes: Int = 20) -> [FinishedRounds.Execution] {
        (0...(index % 3)).map { number in
            FinishedRounds.Execution(
                key: number == 0 && index % 2 == 0
                    ? .raw(skill: "skill", parameters: Array("{\"a\":\(index)}".utf8))
                    : .canonical(Array("skill\(number)\u{0}{\"a\":\(index)}".utf8)),
                outcome: outcome(index &+ number, payloadBytes: payloadBytes))
        }
    }

    static func id(_ index: Int) -> [UInt8] { Array("round-\(index)".utf8) }

    @Test("rounds come back as they were stored, found by id and by key")
    func roundTrip() {
        var store = FinishedRounds()
        for index in 0..<50 { store.append(roundID: Self.id(index), executions: Self.executions(index), finishedAt: UInt64(index)) }
        #expect(store.count == 50)
        for index in 0..<50 {
            guard let entry = store.find(Self.id(index)) else {
                Issue.record("round \(index) was not found")
                continue
            }
            #expect(store.executions(of: entry) == Self.executions(index))
            for execution in Self.executions(index) {
                let (raw, bytes): (Bool, [UInt8]) =
                    switch execution.key {
                    case .canonical(let key): (false, key)
                    case .raw(let skill, let parameters): (true, Array(skill.utf8) + [0] + parameters)
                    }
                #expect(store.outcome(of: entry) { $0.raw == raw && $0.bytes.elementsEqual(bytes) } == execution.outcome)
            }
            #expect(store.outcome(of: entry) { _ in false } == nil)
        }
        #expect(store.find(Array("round-50".utf8)) == nil && store.find([]) == nil)
        #expect(store.oldestFinishedAt == 0)
    }

    @Test("a round that runs again is gone at once; the oldest go in order, with the count of their outcomes")
    func removal() {
        var store = FinishedRounds()
        for index in 0..<3 { store.append(roundID: Self.id(index), executions: Self.executions(index), finishedAt: UInt64(10 + index)) }
        store.remove(store.find(Self.id(0))!)
        #expect(store.find(Self.id(0)) == nil && store.count == 2)
        #expect(store.oldestFinishedAt == 10)  // marked gone, its bytes still there
        #expect(store.removeOldest() == 0)
        #expect(store.oldestFinishedAt == 11)
        #expect(store.removeOldest() == 2)  // round 1 had two executions
        #expect(store.removeOldest() == 3)
        #expect(store.oldestFinishedAt == nil && store.count == 0)
        // The same id may be stored again afterwards.
        store.append(roundID: Self.id(0), executions: Self.executions(4), finishedAt: 20)
        #expect(store.find(Self.id(0)).map { store.executions(of: $0) } == Self.executions(4))
    }

    @Test("rounds that asked the same and got the same keep those bytes once per chunk; a byte of difference is kept")
    func repeatedValuesShared() {
        var store = FinishedRounds()
        let text = Array("{\"text\":\"\(String(repeating: "x", count: 200))\"}".utf8)
        let nearly = text.dropLast() + [UInt8(ascii: "]")]
        func executions(_ index: Int) -> [FinishedRounds.Execution] {
            let payload = index % 10 == 9 ? Array(nearly) : text
            return [
                FinishedRounds.Execution(
                    key: .raw(skill: "echo", parameters: text),
                    outcome: Outcome(status: .ok, agent: Array("worker-\(index % 2)".utf8), payload: payload, durationMicros: index))
            ]
        }
        for index in 0..<1000 {
            store.append(roundID: Self.id(index), executions: executions(index), finishedAt: UInt64(index))
        }
        for index in 0..<1000 { #expect(store.find(Self.id(index)).map { store.executions(of: $0) } == executions(index)) }
        let key = Array("echo".utf8) + [0] + text
        #expect(store.outcome(of: store.find(Self.id(19))!) { $0.raw && $0.bytes.elementsEqual(key) }?.payload == Array(nearly))
        // Each round: its id and fixed fields, and references (8 bytes each) for key, agent and payload.
        #expect(store.liveChunks == 1 && store.storedBytes < 1000 * 90)
    }

    @Test("random traffic against a dictionary, with payloads from none to several chunks: the same answers, chunks freed")
    func againstAModel() {
        var random = SplitMix(seed: 7)
        var store = FinishedRounds()
        var model: [[UInt8]: [FinishedRounds.Execution]] = [:]
        var order: [[UInt8]] = []  // finish order, including rounds removed since
        var next = 0
        for _ in 0..<20_000 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<6:
                let sizes = [0, 10, 200, 5000, FinishedRounds.chunkBytes + 1]
                let payload = sizes[Int.random(in: 0..<(random.next() % 50 == 0 ? 5 : 4), using: &random)]
                let executions = Self.executions(next, payloadBytes: payload)
                store.append(roundID: Self.id(next), executions: executions, finishedAt: UInt64(next))
                model[Self.id(next)] = executions
                order.append(Self.id(next))
                next += 1
            case 6..<8 where !order.isEmpty:
                let id = order[Int.random(in: 0..<order.count, using: &random)]
                guard model.removeValue(forKey: id) != nil else { continue }
                store.remove(store.find(id)!)
            default:
                guard !order.isEmpty else { continue }
                let id = order.removeFirst()
                #expect(store.removeOldest() == (model.removeValue(forKey: id)?.count ?? 0))
            }
            #expect(store.count == model.count)
        }
        for (id, executions) in model { #expect(store.find(id).map { store.executions(of: $0) } == executions) }
        while !order.isEmpty {
            order.removeFirst()
            _ = store.removeOldest()
        }
        #expect(store.count == 0 && store.liveChunks <= 1)
    }
}
