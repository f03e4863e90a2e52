#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a sandboxed read was refused.
public struct SandboxError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        case escapesSandbox
        case notFound
        case notAFile
        case tooLarge
        case notUTF8
        case unreadable
    }

    public let kind: Kind
    /// The path exactly as the caller passed it.
    public let path: String
    /// Human-readable reason that names the path.
    public let message: String

    public init(kind: Kind, path: String, message: String) {
        self.kind = kind
        self.path = path
        self.message = message
    }

    public var description: String {
        message
    }
}

/// Reads UTF-8 text files, refusing anything that is not a regular file inside `root`.
///
/// Containment is decided on the fully resolved path (realpath(3) of both root and target), so
/// `..` segments and symlinks may be used freely as long as they end up inside the root.
public struct SandboxedFileReader: Sendable {
    public let root: String
    public let maxBytes: Int

    public init(root: String, maxBytes: Int = 1 << 20) {
        self.root = root
        self.maxBytes = max(0, maxBytes)
    }

    /// Reads the file at `relativePath` (relative to `root`, or absolute if it lies inside `root`).
    public func read(_ relativePath: String) throws(SandboxError) -> String {
        func failure(_ kind: SandboxError.Kind, _ reason: String) -> SandboxError {
            SandboxError(kind: kind, path: relativePath, message: "'\(relativePath)' \(reason)")
        }

        // C APIs would silently truncate at a NUL and so read a different file than was named.
        guard !relativePath.utf8.contains(0) else {
            throw failure(.notFound, "contains a NUL character")
        }
        let resolvedRoot: String
        switch resolve(root) {
        case .success(let path):
            resolvedRoot = path
        case .failure(let code):
            throw failure(.notFound, "cannot be read because the sandbox root '\(root)' is unusable: \(describe(code))")
        }

        let candidate = relativePath.hasPrefix("/") ? relativePath : resolvedRoot + "/" + relativePath
        let lexical = normalize(candidate)
        // Reject obvious `..` escapes before touching the file system, so that probing paths outside
        // the root never reveals whether they exist.
        let lexicalRoot = normalize(root)
        guard isInside(lexical, root: resolvedRoot) || (root.hasPrefix("/") && isInside(lexical, root: lexicalRoot))
        else {
            throw failure(.escapesSandbox, "is outside the sandbox")
        }

        let resolved: String
        switch resolve(candidate) {
        case .success(let path):
            resolved = path
        case .failure(let code):
            // A symlink inside the root may point outside; report that instead of the outside state.
            if let ancestor = deepestResolvableAncestor(of: lexical), !isInside(ancestor, root: resolvedRoot) {
                throw failure(.escapesSandbox, "resolves to a location outside the sandbox")
            }
            switch code.code {
            case ENOENT, ENOTDIR:
                throw failure(.notFound, "does not exist")
            default:
                throw failure(.unreadable, "cannot be resolved: \(describe(code))")
            }
        }
        guard isInside(resolved, root: resolvedRoot) else {
            throw failure(.escapesSandbox, "resolves to a location outside the sandbox")
        }

        let bytes: [UInt8]
        switch readRegularFile(atPath: resolved, maxBytes: maxBytes) {
        case .success(let contents):
            bytes = contents
        case .failure(.notRegularFile(isDirectory: true)):
            throw failure(.notAFile, "is a directory, not a file")
        case .failure(.notRegularFile(isDirectory: false)):
            throw failure(.notAFile, "is not a regular file")
        case .failure(.tooLarge(size: let size)):
            throw failure(.tooLarge, "is \(size) bytes, which exceeds the limit of \(maxBytes) bytes")
        case .failure(.grewTooLarge):
            throw failure(.tooLarge, "is larger than the limit of \(maxBytes) bytes")
        case .failure(.system(let code)):
            throw failure(.unreadable, "cannot be read: \(describe(code))")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw failure(.notUTF8, "is not valid UTF-8 text")
        }
        return text
    }
}

extension SandboxedFileReader {
    /// Writes `text` to the file at `relativePath`, creating or replacing it. The file's folder must exist
    /// inside the sandbox; a path that leaves the sandbox, a final symlink, or a directory is refused.
    /// Returns the bytes written.
    public func write(_ text: String, to relativePath: String) throws(SandboxError) -> Int {
        func failure(_ kind: SandboxError.Kind, _ reason: String) -> SandboxError {
            SandboxError(kind: kind, path: relativePath, message: "'\(relativePath)' \(reason)")
        }
        guard !relativePath.utf8.contains(0) else { throw failure(.notFound, "contains a NUL character") }
        let bytes = Array(text.utf8)
        guard bytes.count <= maxBytes else {
            throw failure(.tooLarge, "would be \(bytes.count) bytes, which exceeds the limit of \(maxBytes) bytes")
        }
        guard case .success(let resolvedRoot) = resolve(root) else {
            throw failure(.notFound, "cannot be written because the sandbox root '\(root)' is unusable")
        }
        let lexical = normalize(relativePath.hasPrefix("/") ? relativePath : resolvedRoot + "/" + relativePath)
        let name = lexical.split(separator: "/").last.map(String.init) ?? ""
        guard isInside(lexical, root: resolvedRoot), lexical != resolvedRoot, !name.isEmpty else {
            throw failure(.escapesSandbox, "is outside the sandbox")
        }
        // The folder is resolved (symlinks and all) and must still be inside; the file itself is opened
        // without following a symlink, so it cannot point elsewhere either.
        let folder = String(lexical.dropLast(name.count + 1))
        guard case .success(let resolvedFolder) = resolve(folder.isEmpty ? "/" : folder) else {
            throw failure(.notFound, "cannot be written: its folder does not exist")
        }
        guard isInside(resolvedFolder, root: resolvedRoot) else {
            throw failure(.escapesSandbox, "resolves to a location outside the sandbox")
        }
        let descriptor = open(resolvedFolder + "/" + name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            let code = errno
            if code == ELOOP { throw failure(.escapesSandbox, "is a symlink, which file.write does not follow") }
            if code == EISDIR { throw failure(.notAFile, "is a directory, not a file") }
            throw failure(.unreadable, "cannot be written: \(describe(SystemError(code: code)))")
        }
        defer { close(descriptor) }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { buffer -> Int in
                guard let base = buffer.baseAddress else { return 0 }
                return Glibc.write(descriptor, base + written, bytes.count - written)
            }
            guard count > 0 else {
                throw failure(.unreadable, "cannot be written: \(describe(SystemError(code: errno)))")
            }
            written += count
        }
        return written
    }
}

// MARK: - Path helpers

private struct SystemError: Error {
    let code: Int32
}

private func resolve(_ path: String) -> Result<String, SystemError> {
    guard let pointer = realpath(path, nil) else {
        return .failure(SystemError(code: errno))
    }
    defer { free(pointer) }
    return .success(String(cString: pointer))
}

private func describe(_ error: SystemError) -> String {
    String(cString: strerror(error.code))
}

/// Collapses `.`, `..` and repeated slashes without consulting the file system.
private func normalize(_ path: String) -> String {
    var components: [Substring] = []
    for component in path.split(separator: "/") {
        switch component {
        case ".":
            continue
        case "..":
            // Like the kernel, `..` at the top of an absolute path stays at "/".
            if !components.isEmpty {
                components.removeLast()
            }
        default:
            components.append(component)
        }
    }
    return "/" + components.joined(separator: "/")
}

private func isInside(_ path: String, root: String) -> Bool {
    path == root || path.hasPrefix(root.hasSuffix("/") ? root : root + "/")
}

private func deepestResolvableAncestor(of path: String) -> String? {
    var current = path
    while current != "/" {
        let parent = current.split(separator: "/").dropLast().joined(separator: "/")
        current = "/" + parent
        if case .success(let resolved) = resolve(current) {
            return resolved
        }
    }
    return nil
}

// MARK: - Reading

private enum ReadFailure: Error {
    case notRegularFile(isDirectory: Bool)
    case tooLarge(size: Int)
    case grewTooLarge
    case system(SystemError)
}

/// Opens without following a final symlink and checks the opened descriptor, so a file swapped in
/// after resolution cannot redirect the read.
private func readRegularFile(atPath path: String, maxBytes: Int) -> Result<[UInt8], ReadFailure> {
    // O_NONBLOCK keeps a FIFO from blocking the open; the type check below then rejects it.
    let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
    guard descriptor >= 0 else {
        return .failure(.system(SystemError(code: errno)))
    }
    defer { close(descriptor) }

    var info = stat()
    guard fstat(descriptor, &info) == 0 else {
        return .failure(.system(SystemError(code: errno)))
    }
    let fileType = info.st_mode & S_IFMT
    guard fileType == S_IFREG else {
        return .failure(.notRegularFile(isDirectory: fileType == S_IFDIR))
    }
    let size = Int(info.st_size)
    guard size <= maxBytes else {
        return .failure(.tooLarge(size: size))
    }

    var contents: [UInt8] = []
    contents.reserveCapacity(size)
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let count = chunk.withUnsafeMutableBytes { buffer in
            read(descriptor, buffer.baseAddress, buffer.count)
        }
        if count < 0 {
            if errno == EINTR {
                continue
            }
            return .failure(.system(SystemError(code: errno)))
        }
        if count == 0 {
            return .success(contents)
        }
        contents.append(contentsOf: chunk[..<count])
        // The file may have grown since fstat; the limit must hold for what is actually read.
        if contents.count > maxBytes {
            return .failure(.grewTooLarge)
        }
    }
}
