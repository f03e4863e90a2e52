/// One key of a configuration file, declared once: its name, how it is read and checked, where its value
/// lives, and a line of help. Its default is the value the owning type's `init()` gives it. The reader, the
/// known keys and the file `up` writes all come from a type's list of these (`SettingsFile`).
public struct Setting<Root>: Sendable {
    public let key: String
    public let help: String
    /// Reads the key from `object` into `root` when present; throws what is wrong with it.
    let read: @Sendable (ConfigObject, inout Root) throws(SkillbusError) -> Void
    /// The key's value in the file form; nil leaves the key out.
    let write: @Sendable (Root) -> JSONValue?

    init(
        _ key: String, help: String, read: @escaping @Sendable (ConfigObject, inout Root) throws(SkillbusError) -> Void,
        write: @escaping @Sendable (Root) -> JSONValue?
    ) {
        self.key = key
        self.help = help
        self.read = read
        self.write = write
    }

    /// The same setting on a type that holds this one's root at `path`.
    func lifted<Outer>(_ path: WritableKeyPath<Outer, Root> & Sendable) -> Setting<Outer> {
        let (read, write) = (self.read, self.write)
        return Setting<Outer>(
            key, help: help, read: { object, outer throws(SkillbusError) in try read(object, &outer[keyPath: path]) },
            write: { write($0[keyPath: path]) })
    }
}

extension Setting {
    /// A value read by `reading` (nil when the key is absent) and stored at `path`.
    static func value<Value>(
        _ key: String, _ path: WritableKeyPath<Root, Value> & Sendable, _ help: String,
        reading: @escaping @Sendable (ConfigObject, String) throws(SkillbusError) -> Value?,
        writing: @escaping @Sendable (Value) -> JSONValue?
    ) -> Setting {
        Setting(
            key, help: help,
            read: { object, root throws(SkillbusError) in
                if let value = try reading(object, key) { root[keyPath: path] = value }
            }, write: { writing($0[keyPath: path]) })
    }

    static func integer(
        _ key: String, _ path: WritableKeyPath<Root, Int> & Sendable, _ range: ClosedRange<Int>, _ help: String
    ) -> Setting {
        value(
            key, path, help, reading: { object, key throws(SkillbusError) in
                try object.int(key, minimum: range.lowerBound, maximum: range.upperBound)
            }, writing: { .number(Double($0)) })
    }

    static func flag(_ key: String, _ path: WritableKeyPath<Root, Bool> & Sendable, _ help: String) -> Setting {
        value(key, path, help, reading: { object, key throws(SkillbusError) in try object.bool(key) }, writing: { .bool($0) })
    }

    /// A number above 0 and at most 1.
    static func fraction(_ key: String, _ path: WritableKeyPath<Root, Double> & Sendable, _ help: String) -> Setting {
        value(
            key, path, help, reading: { object, key throws(SkillbusError) in try object.fraction(key) },
            writing: { .number($0) })
    }

    static func text(_ key: String, _ path: WritableKeyPath<Root, String> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.string(key) }
    }

    /// A string that may be absent (nil: not in the file either).
    static func text(_ key: String, _ path: WritableKeyPath<Root, String?> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.string(key) }
    }

    static func endpoint(_ key: String, _ path: WritableKeyPath<Root, String> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.endpoint(key) }
    }

    static func endpoint(_ key: String, _ path: WritableKeyPath<Root, String?> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.endpoint(key) }
    }

    /// Endpoints of a coordinator group, kept as a comma list: in the file a comma list or an array of strings.
    static func endpoints(_ key: String, _ path: WritableKeyPath<Root, String> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.endpointList(key) }
    }

    static func endpoints(_ key: String, _ path: WritableKeyPath<Root, String?> & Sendable, _ help: String) -> Setting {
        string(key, path, help) { object, key throws(SkillbusError) in try object.endpointList(key) }
    }

    /// A string read by `reading` (a plain one, or an endpoint checked as one).
    private static func string(
        _ key: String, _ path: WritableKeyPath<Root, String> & Sendable, _ help: String,
        reading: @escaping @Sendable (ConfigObject, String) throws(SkillbusError) -> String?
    ) -> Setting {
        value(key, path, help, reading: reading, writing: { .string($0) })
    }

    /// The same for a string that may be absent.
    private static func string(
        _ key: String, _ path: WritableKeyPath<Root, String?> & Sendable, _ help: String,
        reading: @escaping @Sendable (ConfigObject, String) throws(SkillbusError) -> String?
    ) -> Setting {
        value(
            key, path, help, reading: { object, key throws(SkillbusError) in try reading(object, key).map { $0 } },
            writing: { $0.map { .string($0) } })
    }
}

/// A type read from a configuration file through its declared settings.
public protocol SettingsFile {
    init()
    static var settings: [Setting<Self>] { get }
}

extension SettingsFile {
    /// Every key the file form may hold.
    public static var keys: Set<String> { Set(settings.map(\.key)) }

    /// Reads every declared key of `object` over the defaults; unknown keys and every bad value are reported
    /// at once, one line each.
    init(reading object: ConfigObject) throws(SkillbusError) {
        self.init()
        var problems = object.unknownKeys(Self.keys)
        for setting in Self.settings {
            do throws(SkillbusError) {
                try setting.read(object, &self)
            } catch {
                problems += ConfigObject.problems(in: error)
            }
        }
        try ConfigObject.throwing(problems)
    }

    /// The file form: every declared key that has a value, with `version`.
    public var json: JSONValue {
        var object: [String: JSONValue] = ["version": 1]
        for setting in Self.settings { object[setting.key] = setting.write(self) }
        return .object(object)
    }
}
