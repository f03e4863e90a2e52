/// A ROUTER's routing id for one peer. libzmq's own ids are 5 bytes; ids of up to 16 bytes are held
/// inline, so the id of every message, and of every record that names a peer, costs no allocation and no
/// reference counting. A longer one (a peer may choose its own, up to 255 bytes) is kept on the heap.
public struct RoutingID: Hashable, Sendable, ExpressibleByArrayLiteral {
    private var head: UInt64 = 0
    private var tail: UInt64 = 0
    /// The length of an inline id; 0 for a long one (`long` holds it) and for the empty one.
    private var count: UInt8 = 0
    private var long: [UInt8]?

    static let inlineCapacity = 16

    public init(_ bytes: [UInt8]) {
        if bytes.count > Self.inlineCapacity {
            long = bytes
        } else {
            bytes.withUnsafeBytes { store(inline: $0) }
        }
    }

    public init(arrayLiteral bytes: UInt8...) { self.init(bytes) }

    /// The id in `raw`, copied out of libzmq's buffer.
    public init(_ raw: UnsafeRawBufferPointer) {
        if raw.count > Self.inlineCapacity {
            long = Array(raw)
        } else {
            store(inline: raw)
        }
    }

    private mutating func store(inline raw: UnsafeRawBufferPointer) {
        count = UInt8(raw.count)
        let (first, rest) = (raw.prefix(8), raw.dropFirst(8))
        withUnsafeMutableBytes(of: &head) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: first)) }
        if !rest.isEmpty {
            withUnsafeMutableBytes(of: &tail) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: rest)) }
        }
    }

    /// Its bytes as libzmq sends them, for as long as `body` runs.
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        if let long { return try long.withUnsafeBytes(body) }
        var pair = (head, tail)
        return try Swift.withUnsafeBytes(of: &pair) {
            try body(UnsafeRawBufferPointer(rebasing: $0.prefix(Int(count))))
        }
    }

    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    public static func == (lhs: RoutingID, rhs: RoutingID) -> Bool {
        lhs.head == rhs.head && lhs.tail == rhs.tail && lhs.count == rhs.count && lhs.long == rhs.long
    }

    /// Two words for an inline id (its length in the top byte of the second, which only a 16-byte id fills),
    /// through the standard Hasher and its per-process seed, so that ids a peer chose cannot be lined up to
    /// collide.
    public func hash(into hasher: inout Hasher) {
        if let long {
            hasher.combine(long)
        } else {
            hasher.combine(head)
            hasher.combine(tail ^ UInt64(count) << 56)
        }
    }
}
