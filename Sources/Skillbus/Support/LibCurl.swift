import CCurlRuntime

/// libcurl, which the openai planner's HTTP client (`HTTPStreamingCall`) loads when it is first needed
/// instead of linking it: the binary starts on a host without libcurl, and only an openai planner needs it.
enum LibCurl {
    /// The name Debian's libcurl4 (libcurl4t64 from Debian 13 on) installs it under.
    static let soname = "libcurl.so.4"
    /// What to install where it is missing.
    static let packageAdvice = "`apt-get install libcurl4` (`libcurl4t64` on Debian 13)"

    /// Why libcurl could not be loaded, with what to install.
    struct LoadError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The name given to dlopen.
        let library: String
        /// dlopen's words, or the function the library lacks.
        let reason: String

        var message: String {
            "libcurl (\(library)) could not be loaded (\(reason)); the openai planner's HTTP client needs it: "
                + "install it with \(LibCurl.packageAdvice)"
        }

        var description: String { message }
    }

    /// Loads `library` and resolves the functions the HTTP client calls. Once one library is loaded it stays in
    /// use; loading again only checks that `library` opens and has them.
    static func load(_ library: String = soname) -> Result<Void, LoadError> {
        var error = [CChar](repeating: 0, count: 512)
        let code = ccurl_load(library, &error, error.count)
        guard code != 0 else { return .success(()) }
        let reason = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return .failure(LoadError(library: library, reason: reason))
    }

    /// The process's libcurl, loaded on first use (a global's lazy initialisation, so once).
    static let standard: Result<Void, LoadError> = load()
}
