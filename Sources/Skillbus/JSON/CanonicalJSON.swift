/// The canonical form of a JSON text read straight from its bytes, without building a `JSONValue`: the
/// same bytes `JSONValue(parsing:).write(to:)` gives (compact, object keys sorted, numbers in one
/// spelling), for the texts clients usually send. It copies what is already canonical (strings without
/// escapes, integers) and reorders an object's members only when they are out of order.
///
/// Anything it does not handle itself — escapes, keys beyond ASCII, `-0`, invalid JSON — makes it give up
/// (nil); the caller then takes the general path, so the two never disagree.
struct CanonicalJSON {
    /// The text being read, borrowed for the length of `object`: reading through a pointer keeps bounds checks
    /// and reference counting out of the per-byte loops.
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    private var out: [UInt8] = []
    /// Checking that the text is canonical already, writing nothing: what would be written is then the text
    /// itself, so positions in it stand for positions in the output.
    private var verifying = false
    /// While verifying: nothing seen so far would be written otherwise (no white space, no number respelled).
    private var unchanged = true
    /// The members of every object open now, innermost last: one array for the whole text, not one per object.
    private var members: [Member] = []
    private static let maxDepth = 128

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Appends the canonical form of `bytes`, a JSON object, to `prefix`, adding each of `defaults` (name,
    /// value) the object has no member for. Nil when the fast path cannot tell.
    static func object(_ bytes: [UInt8], defaults: [(String, JSONValue)], after prefix: [UInt8]) -> [UInt8]? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = CanonicalJSON(buffer)
            reader.out = prefix
            reader.out.reserveCapacity(prefix.count + buffer.count + 8)
            reader.skipWhitespace()
            guard reader.peek == UInt8(ascii: "{"), reader.object(defaults: defaults) else { return nil }
            reader.skipWhitespace()
            guard reader.index == buffer.count else { return nil }
            return reader.out
        }
    }

    /// Whether `bytes`, a JSON object, is in canonical form already (what `object` would give back unchanged),
    /// read without writing anything. False also where the fast path cannot tell (escapes, keys beyond ASCII).
    static func isCanonical(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = CanonicalJSON(buffer)
            reader.verifying = true
            guard reader.peek == UInt8(ascii: "{"), reader.object(defaults: []) else { return false }
            return reader.unchanged && reader.index == buffer.count
        }
    }

    /// Where the value of the top-level member `name` stands in `canonical`, an object as `object` writes it;
    /// nil when it has no such member. Its strings hold no escapes (the fast path gives up on those), so a
    /// quote always ends one, and it holds no white space: a scan finds the member without parsing.
    static func memberRange(_ name: String, in canonical: [UInt8]) -> Range<Int>? {
        let quote = UInt8(ascii: "\"")
        func closingQuote(after start: Int) -> Int? { canonical[(start + 1)...].firstIndex(of: quote) }
        guard canonical.first == UInt8(ascii: "{") else { return nil }
        var index = 1
        while index < canonical.count, canonical[index] == quote {
            guard let keyEnd = closingQuote(after: index), let end = valueEnd(in: canonical, from: keyEnd + 2) else {
                return nil
            }
            if canonical[(index + 1)..<keyEnd].elementsEqual(name.utf8) { return (keyEnd + 2)..<end }
            index = end + 1
        }
        return nil
    }

    /// Where the value that starts at `start` of `canonical` (a text `object` would give back unchanged: no
    /// escapes, no white space) ends: the index past it.
    static func valueEnd(in canonical: [UInt8], from start: Int) -> Int? {
        let quote = UInt8(ascii: "\"")
        var index = start
        var depth = 0
        repeat {
            guard index < canonical.count else { return nil }
            switch canonical[index] {
            case quote:
                guard let close = canonical[(index + 1)...].firstIndex(of: quote) else { return nil }
                index = close + 1
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                index += 1
            default:
                guard depth == 0 else {
                    index += 1
                    continue
                }
                // A number, true, false or null, up to the separator after it.
                while index < canonical.count, canonical[index] != UInt8(ascii: ","),
                    canonical[index] != UInt8(ascii: "}"), canonical[index] != UInt8(ascii: "]")
                {
                    index += 1
                }
                return index
            }
        } while depth > 0
        return index
    }

    private var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let byte = peek, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            index += 1
            unchanged = false
        }
    }

    /// Where the output stands: while verifying, the same place in the text.
    private var written: Int { verifying ? index : out.count }

    private mutating func emit(_ byte: UInt8) {
        if !verifying { out.append(byte) }
    }

    private mutating func value() -> Bool {
        guard let next = peek else { return false }
        switch next {
        case UInt8(ascii: "{"): return object(defaults: [])
        case UInt8(ascii: "["): return array()
        case UInt8(ascii: "\""): return string()
        case UInt8(ascii: "t"): return word("true")
        case UInt8(ascii: "f"): return word("false")
        case UInt8(ascii: "n"): return word("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
        default: return false
        }
    }

    private mutating func word(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
        copy(index..<index + count)
        index += count
        return true
    }

    /// Appends input bytes to the output as they are.
    private mutating func copy(_ range: Range<Int>) {
        guard !verifying else { return }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[range]))
    }

    private mutating func string() -> Bool { copyString() != nil }

    /// A string without escapes or control characters, copied as it is (after checking its UTF-8); whether
    /// it is all ASCII, or nil when the fast path cannot take it.
    private mutating func copyString() -> Bool? {
        let start = index
        var position = index + 1
        var ascii = true
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                index = position + 1
                let inner = UnsafeBufferPointer(rebasing: bytes[start + 1..<position])
                guard ascii || String(validating: inner, as: UTF8.self) != nil else { return nil }
                copy(start..<index)
                return ascii
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            if byte >= 0x80 { ascii = false }
            position += 1
        }
        return nil
    }

    /// An integer of up to 15 digits is its own canonical spelling; any other number is parsed and written
    /// as `JSONValue` writes it.
    private mutating func number() -> Bool {
        let start = index
        if peek == UInt8(ascii: "-") { index += 1 }
        let digitsStart = index
        guard let first = peek, isDigit(first) else { return false }
        if first == UInt8(ascii: "0") {
            index += 1
        } else {
            while let byte = peek, isDigit(byte) { index += 1 }
        }
        var integer = true
        if peek == UInt8(ascii: ".") {
            integer = false
            index += 1
            guard let byte = peek, isDigit(byte) else { return false }
            while let byte = peek, isDigit(byte) { index += 1 }
        }
        if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
            integer = false
            index += 1
            if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
            guard let byte = peek, isDigit(byte) else { return false }
            while let byte = peek, isDigit(byte) { index += 1 }
        }
        if integer && index - digitsStart <= 15 {
            // "-0" is the number 0.
            guard !(start != digitsStart && bytes[digitsStart] == UInt8(ascii: "0")) else { return false }
            copy(start..<index)
            return true
        }
        let spelling = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(spelling), value.isFinite else { return false }
        guard verifying else {
            JSONValue.writeNumber(value, to: &out)
            return true
        }
        var respelled: [UInt8] = []
        JSONValue.writeNumber(value, to: &respelled)
        if !respelled.elementsEqual(UnsafeBufferPointer(rebasing: bytes[start..<index])) { unchanged = false }
        return true
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }

    private mutating func enter() -> Bool {
        depth += 1
        return depth <= Self.maxDepth
    }

    private mutating func array() -> Bool {
        guard enter() else { return false }
        index += 1
        emit(UInt8(ascii: "["))
        skipWhitespace()
        if peek == UInt8(ascii: "]") {
            index += 1
        } else {
            while true {
                skipWhitespace()
                guard value() else { return false }
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                    emit(UInt8(ascii: ","))
                } else if peek == UInt8(ascii: "]") {
                    index += 1
                    break
                } else {
                    return false
                }
            }
        }
        emit(UInt8(ascii: "]"))
        depth -= 1
        return true
    }

    /// Where one member stands in `out`: its key (quotes included) from `start` to `keyEnd`, then `:` and
    /// its value up to `end`.
    private struct Member {
        var start: Int
        var keyEnd: Int
        var end: Int
    }

    private mutating func object(defaults: [(String, JSONValue)]) -> Bool {
        guard enter() else { return false }
        index += 1
        let objectStart = written
        emit(UInt8(ascii: "{"))
        let first = members.count
        // Verifying: the key before, which this one must sort after. Nothing is reordered then, so no list of
        // members is kept (an allocation per text checked).
        var previous: Member?
        skipWhitespace()
        if peek == UInt8(ascii: "}") {
            index += 1
        } else {
            while true {
                skipWhitespace()
                let start = written
                // Keys beyond ASCII sort as Swift strings do (and may be equal under Unicode rules): not here.
                guard peek == UInt8(ascii: "\""), copyString() == true else { return false }
                let keyEnd = written
                skipWhitespace()
                guard peek == UInt8(ascii: ":") else { return false }
                index += 1
                emit(UInt8(ascii: ":"))
                skipWhitespace()
                guard value() else { return false }
                let member = Member(start: start, keyEnd: keyEnd, end: written)
                if verifying {
                    if let previous, !keyLess(previous, member) { return false }
                    previous = member
                } else {
                    members.append(member)
                }
                skipWhitespace()
                if peek == UInt8(ascii: ",") {
                    index += 1
                    emit(UInt8(ascii: ","))
                } else if peek == UInt8(ascii: "}") {
                    index += 1
                    break
                } else {
                    return false
                }
            }
        }
        for (name, value) in defaults
        where !members[first...].contains(where: { keyEquals($0, name) }) {
            guard name.utf8.allSatisfy({ $0 < 0x80 && $0 >= 0x20 && $0 != 34 && $0 != 92 }) else { return false }
            if members.count > first { out.append(UInt8(ascii: ",")) }
            let start = out.count
            JSONValue.writeString(name, to: &out)
            let keyEnd = out.count
            out.append(UInt8(ascii: ":"))
            value.write(to: &out)
            members.append(Member(start: start, keyEnd: keyEnd, end: out.count))
        }
        guard sortMembers(from: first, objectStart: objectStart) else { return false }
        members.removeSubrange(first...)
        emit(UInt8(ascii: "}"))
        depth -= 1
        return true
    }

    private func keyEquals(_ member: Member, _ name: String) -> Bool {
        let key = out[member.start + 1..<member.keyEnd - 1]
        return key.elementsEqual(name.utf8)
    }

    /// What member positions point into: the output, or while verifying the text itself.
    private func withKeys<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        verifying ? body(bytes) : out.withUnsafeBufferPointer(body)
    }

    /// Whether the key of `left` sorts before that of `right`, comparing their (ASCII) bytes.
    private func keyLess(_ left: Member, _ right: Member) -> Bool {
        withKeys { out in
            var (leftIndex, rightIndex) = (left.start + 1, right.start + 1)
            let (leftEnd, rightEnd) = (left.keyEnd - 1, right.keyEnd - 1)
            while leftIndex < leftEnd, rightIndex < rightEnd {
                if out[leftIndex] != out[rightIndex] { return out[leftIndex] < out[rightIndex] }
                leftIndex += 1
                rightIndex += 1
            }
            return leftIndex == leftEnd && rightIndex < rightEnd
        }
    }

    /// Puts the members of the object from `first` on in key order (only when they are not already); false on a
    /// duplicate key, which the parser refuses.
    private mutating func sortMembers(from first: Int, objectStart: Int) -> Bool {
        var sorted = true
        for position in (first + 1)..<max(members.count, first + 1) {
            let previous = members[position - 1]
            let member = members[position]
            if !keyLess(previous, member) {
                guard keyLess(member, previous) else { return false }
                sorted = false
            }
        }
        if sorted { return true }
        guard !verifying else { return false }
        var own = Array(members[first...])
        own.sort(by: keyLess)
        for position in own.indices.dropFirst() where !keyLess(own[position - 1], own[position]) {
            return false
        }
        var rebuilt: [UInt8] = []
        rebuilt.reserveCapacity(out.count - objectStart)
        for (position, member) in own.enumerated() {
            if position > 0 { rebuilt.append(UInt8(ascii: ",")) }
            rebuilt.append(contentsOf: out[member.start..<member.end])
        }
        out.replaceSubrange(objectStart + 1..<out.count, with: rebuilt)
        return true
    }
}
