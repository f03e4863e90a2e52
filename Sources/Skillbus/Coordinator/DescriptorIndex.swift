/// The registry's descriptors as a request's path reads them on every request, kept by identifier so
/// that the path needs no registry lookup: the skills whose attempts have a timeout of their own
/// (`attemptTimeoutMs`, PROTOCOL §4.13) and the pure skills with a cache lifetime (`cacheMs`, §4.16). It owns their
/// agreement with the registry: `refresh` runs whenever the registry's entries for some skills may have changed.
/// While a worker is removed it also holds that worker's descriptors, which have left the registry already, so
/// that its lost invocations are judged by their own.
struct DescriptorIndex: Sendable {
    private var attemptTimeouts: [String: Int] = [:]
    private var cacheLifetimes: [String: Int] = [:]
    private var departing: [String: SkillDescriptor] = [:]

    /// Whether any skill has a cache lifetime: else no invocation looks in the cache.
    var hasCacheLifetimes: Bool { !cacheLifetimes.isEmpty }

    /// `skill`'s own attempt timeout; nil when its attempts end only with the request's deadline.
    func attemptTimeoutMs(of skill: String) -> Int? { attemptTimeouts.isEmpty ? nil : attemptTimeouts[skill] }

    /// How long an `ok` outcome of `skill` is kept in the result cache; nil for a skill that is not cached.
    func cacheLifetimeMs(of skill: String) -> Int? { cacheLifetimes.isEmpty ? nil : cacheLifetimes[skill] }

    /// The registry's entries for `identifiers` may have changed: the index follows.
    mutating func refresh(_ identifiers: some Sequence<String>, from registry: Registry) {
        for identifier in identifiers {
            let descriptor = registry.skills[identifier]?.descriptor
            attemptTimeouts[identifier] = descriptor?.retry?.attemptTimeoutMs
            cacheLifetimes[identifier] = descriptor.flatMap { $0.pure ? $0.cacheMs : nil }
        }
    }

    /// The descriptor of `skill` in `registry`, or else the departing worker's.
    func descriptor(of skill: String, in registry: Registry) -> SkillDescriptor? {
        registry.skills[skill]?.descriptor ?? (departing.isEmpty ? nil : departing[skill])
    }

    /// A worker is being removed: its descriptors count until `endDeparture`.
    mutating func beginDeparture(_ skills: [String: SkillDescriptor]) { departing = skills }

    mutating func endDeparture() { departing = [:] }
}
