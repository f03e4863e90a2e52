/// How urgently a waiting invocation is served (PROTOCOL §4.14): waiting ones go out by priority, then age.
/// The raw value is its rank; lower is served first.
public enum InvocationPriority: Int, Sendable, Comparable, CaseIterable {
    case high = 0
    case normal = 1
    case low = 2

    public init?(name: String) {
        switch name {
        case "high": self = .high
        case "normal": self = .normal
        case "low": self = .low
        default: return nil
        }
    }

    public var name: String {
        switch self {
        case .high: "high"
        case .normal: "normal"
        case .low: "low"
        }
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The rank a request of this priority has after waiting `waited` nanoseconds: one class better for each
    /// full `promotionNanos` (0: never promoted), so that a low one cannot starve behind a stream of high ones.
    func rank(waited: UInt64, promotionNanos: UInt64) -> Int {
        guard promotionNanos > 0, rawValue > 0 else { return rawValue }
        return rawValue - Int(min(UInt64(rawValue), waited / promotionNanos))
    }
}
