import Foundation

/// Runs `body` with a fresh, empty directory under the system's temporary directory and removes it afterwards.
func withTemporaryDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let path = (NSTemporaryDirectory() as NSString).appendingPathComponent("skillbus-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

/// Waits until `condition` holds, checking every few milliseconds, for at most `limit`; returns whether it held.
/// It looks once more when the limit has passed: a task kept waiting while other tests hold every thread may
/// wake only after it, with the condition long true.
func eventually(within limit: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// The bytes of the file at `path` (empty when it cannot be read).
func fileBytes(_ path: String) -> [UInt8] {
    FileManager.default.contents(atPath: path).map { Array($0) } ?? []
}
