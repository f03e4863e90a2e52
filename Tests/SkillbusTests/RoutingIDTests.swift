import Testing

@testable import SkillbusZMQ

@Suite("RoutingID: a peer's id, inline up to 16 bytes")
struct RoutingIDTests {
    @Test("every length from 0 to 40 keeps its bytes, however it was made", arguments: Array(0...40))
    func roundTrip(length: Int) {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 1) }
        let fromArray = RoutingID(bytes)
        let fromBuffer = bytes.withUnsafeBytes { RoutingID($0) }
        #expect(fromArray.bytes == bytes)
        #expect(fromArray == fromBuffer)
        #expect(fromArray.hashValue == fromBuffer.hashValue)
        #expect(fromArray.withUnsafeBytes { Array($0) } == bytes)
    }

    @Test("ids differ when any byte or the length differs, also across the inline limit")
    func distinct() {
        let ids: [[UInt8]] = [
            [], [0], [0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [1, 0, 0, 0, 1],
            Array(repeating: 7, count: 16), Array(repeating: 7, count: 17), Array(repeating: 7, count: 15) + [8],
            Array(repeating: 0, count: 8), Array(repeating: 0, count: 9),
        ]
        let set = Set(ids.map(RoutingID.init))
        #expect(set.count == ids.count)
        for id in ids { #expect(set.contains(RoutingID(id))) }
    }

    @Test("libzmq's own ids (a zero byte and a counter) spread evenly over a table")
    func spread() {
        // 16,384 ids into 4,096 buckets: 4 a bucket on average, and no pile-up in any. A random hash puts
        // 12 or 13 in the fullest, 17 about once in a hundred runs (the seed is new each run), 24 next to
        // never; a hash that ignored the counter's bytes would put hundreds in one.
        var buckets = [Int](repeating: 0, count: 1 << 12)
        for counter in 0..<UInt32(1 << 14) {
            let id = RoutingID([0] + withUnsafeBytes(of: counter.bigEndian) { Array($0) })
            buckets[id.hashValue & (buckets.count - 1)] += 1
        }
        #expect(buckets.max()! <= 24)
        #expect(buckets.filter { $0 == 0 }.count < 150)  // 75 if the hash were random
        // Equal ids hash alike, a long one too.
        let long = RoutingID(Array(repeating: 9, count: 40))
        #expect(long.hashValue == RoutingID(Array(repeating: 9, count: 40)).hashValue)
        #expect(RoutingID([0, 1, 2]).hashValue != RoutingID([0, 1, 2, 0]).hashValue, "the length is hashed")
    }
}
