import Foundation

/// The planners a worker's configuration can name under `planner`: `{"rules": […]}` (`RulesPlanner`) or
/// `{"openai": {…}}` (`OpenAIPlanner`).
public enum ConfiguredPlanner {
    /// Checks the configuration without building anything that depends on the environment (a config file
    /// is checked where it is read, which may not be where the worker runs).
    public static func check(_ json: JSONValue) throws(SkillbusError) {
        switch try kind(json) {
        case .rules: _ = try RulesPlanner(json: json)
        case .openai(let settings): _ = try OpenAIPlanner.Settings(json: settings)
        }
    }

    /// The planner the configuration describes. An `openai` planner whose `apiKeyEnv` is not set in
    /// `environment`, or on a host where libcurl cannot be loaded, is refused here, when the worker starts.
    public static func make(
        _ json: JSONValue, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(SkillbusError) -> any Planner {
        switch try kind(json) {
        case .rules: try RulesPlanner(json: json)
        case .openai(let settings): try OpenAIPlanner(json: settings, environment: environment)
        }
    }

    private enum Kind {
        case rules
        case openai(JSONValue)
    }

    private static func kind(_ json: JSONValue) throws(SkillbusError) -> Kind {
        guard let fields = json.objectValue, fields.count == 1, let (key, value) = fields.first else {
            throw SkillbusError(
                .invalidConfiguration,
                "a planner is {\"rules\": [rule, …]} or {\"openai\": {\"baseURL\", \"model\", …}}")
        }
        switch key {
        case "rules": return .rules
        case "openai": return .openai(value)
        default:
            throw SkillbusError(.invalidConfiguration, "unknown planner '\(key)' (known: openai, rules)")
        }
    }
}
