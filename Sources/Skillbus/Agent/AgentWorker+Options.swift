import SkillbusZMQ

extension AgentWorker {
    /// Who the agent is, where the bus is, and how it runs.
    public struct Options: Sendable {
        public var name: String
        /// The coordinator's bus endpoint, or a group's coordinators as a comma list `a,b`: the worker then talks to
        /// one at a time and moves to the leader (PROTOCOL §4.4). Checked when the worker connects.
        public var coordinator: String
        public var capacity: Int
        public var heartbeatMs: Int
        public var maxMessageBytes: Int
        /// The coordinator's feed, for the registry replica; nil takes the one WELCOME names.
        public var feed: String?
        /// Where the agent keeps its context (sessions, history, memory); nil keeps none.
        public var dataDirectory: String?
        public var store: AgentStore.Options
        /// Decides the agent's turns (ASK); nil: the agent takes none.
        public var planner: (any Planner)?
        /// The role it plays in a team and what it is good at (its registration says them to every agent).
        public var role: String?
        public var description: String?
        /// Skill calls a turn may make before it fails.
        public var turnStepLimit = 8
        /// CURVE keys for every socket the agent opens (bus, its client connection, the feed); nil: none.
        public var credentials: CurveCredentials?
        /// Partial output one invocation may emit (bytes of parts); past it the invocation fails with
        /// `output_too_large`.
        public var maxOutputBytes = 1 << 20

        public init(
            name: String, coordinator: String, capacity: Int = 4, heartbeatMs: Int = 1000,
            maxMessageBytes: Int = 1 << 20, feed: String? = nil, dataDirectory: String? = nil,
            store: AgentStore.Options = AgentStore.Options(), planner: (any Planner)? = nil
        ) {
            self.planner = planner
            self.name = name
            self.coordinator = coordinator
            self.feed = feed
            self.capacity = capacity
            self.heartbeatMs = heartbeatMs
            self.maxMessageBytes = maxMessageBytes
            self.dataDirectory = dataDirectory
            self.store = store
        }

        /// `coordinator` as a list of endpoints (a group's coordinators, in the order they are tried).
        public var coordinators: [String] {
            get { Endpoint.list(coordinator) }
            set { coordinator = newValue.joined(separator: ",") }
        }
    }
}
