/// Keys in the order they finished, oldest first, to forget them later. Taking the oldest moves a head
/// index; the array is compacted only now and then, so it never shifts on every removal.
struct FinishOrder<Key: Sendable>: Sendable {
    private var items: [(key: Key, at: UInt64)] = []
    private var head = 0

    var count: Int { items.count - head }
    var oldest: (key: Key, at: UInt64)? { head < items.count ? items[head] : nil }

    mutating func append(_ key: Key, at time: UInt64) { items.append((key, time)) }

    mutating func removeOldest() {
        head += 1
        if head > 1024 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }
}
