/// Writes one JSON object's members straight to bytes, as `JSONValue.serialized()` would (compact), without a
/// dictionary to build and sort: the caller writes them in key order. For what the bus and agents write on
/// every round and turn. Each member goes after a comma but the first.
struct JSONMemberWriter {
    private var first = true

    /// `,"name":` (no comma before the first) in one append: each append to an array checks its uniqueness
    /// and capacity, which cost more than the copying for pieces this small.
    mutating func key(_ name: StaticString, to out: inout [UInt8]) {
        let comma = first ? 0 : 1
        first = false
        let count = name.utf8CodeUnitCount
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count + 4) { piece in
            piece[0] = UInt8(ascii: ",")
            piece[1] = UInt8(ascii: "\"")
            for index in 0..<count { piece[2 + index] = name.utf8Start[index] }
            piece[count + 2] = UInt8(ascii: "\"")
            piece[count + 3] = UInt8(ascii: ":")
            out.append(contentsOf: UnsafeBufferPointer(rebasing: piece[(1 - comma)...]))
        }
    }

    mutating func string(_ name: StaticString, _ value: String?, to out: inout [UInt8]) {
        key(name, to: &out)
        if let value { JSONValue.writeString(value, to: &out) } else { out.append(contentsOf: "null".utf8) }
    }

    mutating func number(_ name: StaticString, _ value: Double, to out: inout [UInt8]) {
        key(name, to: &out)
        JSONValue.writeNumber(value, to: &out)
    }

    mutating func value(_ name: StaticString, _ value: JSONValue?, to out: inout [UInt8]) {
        key(name, to: &out)
        (value ?? .null).write(to: &out)
    }
}
