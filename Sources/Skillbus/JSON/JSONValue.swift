import Foundation

/// A JSON document held as a value. Skillbus parses and writes JSON itself so that the wire format,
/// number spelling and key order are under our control (and fast on Linux).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The JSON type's name as used in schemas and error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number(let value): value.isWholeNumber ? "integer" : "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    public var doubleValue: Double? { if case .number(let value) = self { value } else { nil } }
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
    public var objectValue: [String: JSONValue]? { if case .object(let value) = self { value } else { nil } }
    public var arrayValue: [JSONValue]? { if case .array(let value) = self { value } else { nil } }
    /// The number as an Int when it is whole and fits.
    public var intValue: Int? {
        guard case .number(let value) = self, value.isWholeNumber, abs(value) < 9.0e15 else { return nil }
        return Int(value)
    }
}

extension Double {
    var isWholeNumber: Bool { isFinite && rounded(.towardZero) == self }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

// MARK: - Writing

extension JSONValue {
    /// Compact JSON with object keys sorted, so equal values always give equal bytes.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(to: &out)
        return out
    }

    public var jsonString: String { String(decoding: serialized(), as: UTF8.self) }

    func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .number(let value): JSONValue.writeNumber(value, to: &out)
        case .string(let value): JSONValue.writeString(value, to: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let object) where object.count < 2:
            // Nothing to sort: no array of members to build.
            out.append(UInt8(ascii: "{"))
            if let (key, value) = object.first {
                JSONValue.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            for (index, (key, value)) in object.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Whole numbers print without a fraction; JSON has no NaN or infinity, so those print as null.
    static func writeNumber(_ value: Double, to out: inout [UInt8]) {
        if !value.isFinite {
            out.append(contentsOf: "null".utf8)
            return
        }
        // Whole numbers and thousandths (every duration in milliseconds the bus writes) are spelled digit by
        // digit, with no String made; they read as Swift's shortest spelling would (JSONValueTests hold it).
        let thousandths = (abs(value) * 1000).rounded()
        if thousandths < 1e15, Double(thousandths) / 1000 == abs(value) {
            if value < 0 { out.append(UInt8(ascii: "-")) }
            let whole = UInt64(thousandths) / 1000
            var fraction = UInt64(thousandths) % 1000
            appendDigits(whole, to: &out)
            guard fraction != 0 else { return }
            out.append(UInt8(ascii: "."))
            var width = 3
            while fraction % 10 == 0 { fraction /= 10; width -= 1 }
            var divisor: UInt64 = width == 3 ? 100 : width == 2 ? 10 : 1
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(fraction / divisor % 10))
                divisor /= 10
            }
        } else if value.isWholeNumber && abs(value) < 1e15 {
            out.append(contentsOf: String(Int64(value)).utf8)
        } else {
            out.append(contentsOf: "\(value)".utf8)
        }
    }

    /// The decimal digits of `number`, most significant first.
    static func appendDigits(_ number: UInt64, to out: inout [UInt8]) {
        guard number >= 10 else {
            out.append(UInt8(ascii: "0") + UInt8(number))
            return
        }
        appendDigits(number / 10, to: &out)
        out.append(UInt8(ascii: "0") + UInt8(number % 10))
    }

    static func writeString(_ value: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escaping: copy them in one go, scanning their bytes in place (a native
        // string's UTF-8 is contiguous; iterating the view byte by byte cost more than the copy).
        let copied = value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            for byte in bytes where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if copied == true {
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [92, 34])
            case UInt8(ascii: "\\"): out.append(contentsOf: [92, 92])
            case 0x0A: out.append(contentsOf: [92, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [92, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [92, UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48, hex[Int(byte >> 4)], hex[Int(byte & 15)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Indented JSON for people (sorted keys, two spaces).
    public func prettyString(indent: String = "") -> String {
        let inner = indent + "  "
        switch self {
        case .array(let values) where !values.isEmpty:
            return "[\n" + values.map { inner + $0.prettyString(indent: inner) }.joined(separator: ",\n")
                + "\n\(indent)]"
        case .object(let object) where !object.isEmpty:
            let lines = object.sorted(by: { $0.key < $1.key }).map { key, value in
                inner + JSONValue.string(key).jsonString + ": " + value.prettyString(indent: inner)
            }
            return "{\n" + lines.joined(separator: ",\n") + "\n\(indent)}"
        default:
            return jsonString
        }
    }
}
