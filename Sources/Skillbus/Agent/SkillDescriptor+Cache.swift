extension SkillDescriptor {
    /// Longest cache lifetime a skill may declare (one week).
    public static let maxCacheMs = 604_800_000

    /// The keys for the result cache (PROTOCOL §5.2.2): `pure`, and `cacheMs`, which only a pure skill may
    /// declare — a skill whose result depends on anything but its parameters must never be answered from it.
    static func cachePolicy(_ json: JSONValue, _ identifier: String) throws(SkillbusError) -> (
        pure: Bool, cacheMs: Int?
    ) {
        func refuse(_ message: String) -> SkillbusError {
            SkillbusError(.invalidRegistration, "skill '\(identifier)': \(message)")
        }
        var pure = false
        if let value = json["pure"], value != .null {
            guard let flag = value.boolValue else { throw refuse("'pure' must be true or false") }
            pure = flag
        }
        var cacheMs: Int?
        if let value = json["cacheMs"], value != .null {
            guard let ms = value.intValue, (1...maxCacheMs).contains(ms) else {
                throw refuse("'cacheMs' must be an integer from 1 to \(maxCacheMs)")
            }
            guard pure else { throw refuse("'cacheMs' needs a pure skill ('pure': true)") }
            cacheMs = ms
        }
        return (pure, cacheMs)
    }
}
