extension Array {
    /// Appends `other`; into an empty array it moves `other`'s buffer instead of copying each element
    /// (the actions a step returns are usually all its caller returns).
    mutating func absorb(_ other: [Element]) {
        if isEmpty { self = other } else { append(contentsOf: other) }
    }
}
