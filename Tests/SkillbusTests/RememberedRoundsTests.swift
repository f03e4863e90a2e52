import Testing

@testable import Skillbus

@Suite("Remembered rounds: by id, forgotten oldest first")
struct RememberedRoundsTests {
    func round(_ n: Int, at time: UInt64) -> FinishedRound {
        FinishedRound(body: [UInt8(n % 251)], document: Array("doc \(n)".utf8), finishedAt: time)
    }

    @Test("random traffic against a dictionary and a list in finish order: the same answers")
    func againstModel() {
        var generator = SystemRandomNumberGenerator()
        var table = RememberedRounds()
        var model: [[UInt8]: FinishedRound] = [:]
        var order: [(key: [UInt8], at: UInt64)] = []
        for step in 0..<20_000 {
            let key = Array("r\(Int.random(in: 0..<3_000, using: &generator))".utf8)
            if Int.random(in: 0..<4, using: &generator) == 0, !order.isEmpty {
                // Forget the oldest entry, as the model does: its round unless a newer entry replaced it.
                let (oldest, at) = order.removeFirst()
                #expect(table.oldestFinishedAt == at)
                table.forgetOldest()
                if model[oldest]?.finishedAt == at { model[oldest] = nil }
            } else {
                let finished = round(step, at: UInt64(step))
                table.remember(key, finished)
                model[key] = finished
                order.append((key, UInt64(step)))
            }
            #expect(table.count == model.count)
            #expect(table.entryCount == order.count)
            let probe = Array("r\(Int.random(in: 0..<3_000, using: &generator))".utf8)
            #expect(table[probe]?.document == model[probe]?.document)
            #expect(table[probe]?.body == model[probe]?.body)
        }
        for (key, value) in model { #expect(table[key] == value) }
        while table.oldestFinishedAt != nil { table.forgetOldest() }
        #expect(table.count == 0)
        #expect(table[Array("r1".utf8)] == nil)
        #expect(table.liveChunks == 1)
    }

    @Test("documents larger than a chunk's room start a chunk of their own; chunks go once their entries are forgotten")
    func chunksFreed() {
        var table = RememberedRounds()
        let large = RememberedRounds.chunkBytes / 3
        for n in 0..<12 {
            let document = [UInt8](repeating: UInt8(n), count: n == 5 ? 2 * RememberedRounds.chunkBytes : large)
            let round = FinishedRound(body: [UInt8(n)], document: document, finishedAt: UInt64(n))
            table.remember(Array("r\(n)".utf8), round)
        }
        #expect(table.liveChunks > 4)
        #expect(table[Array("r5".utf8)]?.document.count == 2 * RememberedRounds.chunkBytes)
        #expect(table[Array("r11".utf8)]?.document == [UInt8](repeating: 11, count: large))
        for _ in 0..<6 { table.forgetOldest() }
        #expect(table[Array("r5".utf8)] == nil)
        #expect(table[Array("r6".utf8)]?.body == [6])
        while table.oldestFinishedAt != nil { table.forgetOldest() }
        #expect(table.count == 0 && table.liveChunks == 1)
    }
}
