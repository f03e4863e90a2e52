import Foundation

extension OpenAIPlanner {
    /// How to reach the endpoint, from a worker's configuration:
    /// `{"openai": {"baseURL", "model", "apiKeyEnv", "timeoutSeconds", "system", "temperature"}}`.
    public struct Settings: Sendable, Equatable {
        /// Where the API lives, up to and including its version: `http://127.0.0.1:8080/v1`. Requests go to
        /// `<baseURL>/chat/completions`.
        public var baseURL: String
        public var model: String
        /// The environment variable that holds the API key, sent as `Authorization: Bearer …`; nil sends
        /// none (a local server usually wants none).
        public var apiKeyEnv: String?
        /// How long the endpoint may stay silent: before its answer begins, and between two pieces of it.
        public var timeoutSeconds: Double = 60
        /// The system prompt; nil sends none.
        public var system: String?
        /// nil leaves it to the endpoint.
        public var temperature: Double?

        static let keys = ["apiKeyEnv", "baseURL", "model", "system", "temperature", "timeoutSeconds"]

        public init(baseURL: String, model: String) {
            self.baseURL = baseURL
            self.model = model
        }

        /// Reads and checks the object under `openai`; an error names the key (`openai.model: …`).
        public init(json: JSONValue) throws(SkillbusError) {
            func problem(_ key: String, _ message: String) -> SkillbusError {
                SkillbusError(.invalidConfiguration, "openai.\(key): \(message)")
            }
            guard let fields = json.objectValue else {
                throw SkillbusError(.invalidConfiguration, "openai: expected an object, got \(json.typeName)")
            }
            if let unknown = fields.keys.sorted().first(where: { !Self.keys.contains($0) }) {
                throw problem(unknown, "unknown key (allowed: \(Self.keys.joined(separator: ", ")))")
            }
            func string(_ key: String) throws(SkillbusError) -> String? {
                guard let value = fields[key] else { return nil }
                guard let text = value.stringValue else {
                    throw problem(key, "expected a string, got \(value.typeName)")
                }
                return text
            }
            func number(_ key: String, _ range: ClosedRange<Double>) throws(SkillbusError) -> Double? {
                guard let value = fields[key] else { return nil }
                guard let number = value.doubleValue else {
                    throw problem(key, "expected a number, got \(value.typeName)")
                }
                guard range.contains(number) else {
                    throw problem(
                        key, "must be from \(range.lowerBound) to \(range.upperBound), got \(value.jsonString)")
                }
                return number
            }
            guard let baseURL = try string("baseURL") else {
                throw problem("baseURL", "missing (the API's address, e.g. http://127.0.0.1:8080/v1)")
            }
            if let reason = Self.problem(baseURL: baseURL) { throw problem("baseURL", reason) }
            guard let model = try string("model"), !model.isEmpty else {
                throw problem("model", "missing (the model's name as the endpoint knows it)")
            }
            self.init(baseURL: baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL, model: model)
            if let name = try string("apiKeyEnv") {
                guard Self.isVariableName(name) else {
                    throw problem("apiKeyEnv", "'\(name)' is no environment variable name (letters, digits, _)")
                }
                apiKeyEnv = name
            }
            timeoutSeconds = try number("timeoutSeconds", 0.1...3600) ?? timeoutSeconds
            system = try string("system")
            temperature = try number("temperature", 0...2)
        }

        /// The chat-completions address.
        var endpoint: URL {
            guard let url = URL(string: baseURL + "/chat/completions") else {
                preconditionFailure("a checked baseURL always makes a URL")
            }
            return url
        }

        static func problem(baseURL: String) -> String? {
            guard let url = URL(string: baseURL), let scheme = url.scheme?.lowercased() else {
                return "'\(baseURL)' is not a URL (e.g. http://127.0.0.1:8080/v1)"
            }
            guard scheme == "http" || scheme == "https" else {
                return "'\(baseURL)' is not an http or https URL"
            }
            guard let host = url.host, !host.isEmpty else { return "'\(baseURL)' has no host" }
            guard url.query == nil, url.fragment == nil else {
                return "'\(baseURL)' has a query or fragment; give the address up to the API's version, e.g. …/v1"
            }
            return nil
        }

        static func isVariableName(_ name: String) -> Bool {
            guard let first = name.unicodeScalars.first, !("0"..."9").contains(first) else { return false }
            return name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0))
            }
        }
    }
}
