import Dispatch
import Foundation
import Skillbus
import SkillbusZMQ
import Synchronization

/// `skillbus top`
public enum TopCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "top",
        abstract: "Watch agents, skills and the bus live, full-screen (--once: one frame as text).",
        discussion: """
            Shows every agent with its state, load against capacity, requests per second, p50/p99 latency,
            results and sessions; every skill with its providers, rate, latency, results and queue; and the
            bus's rate, wait queue and registry sequence. Rates and latencies come from the feed
            (request.done, invocation.done) over the last 10 s; loads, states, result counts and queues from the
            bus's AGENTS listing, asked twice a second. Below them, the sessions that turns ran in lately: each with
            its agents and their states (a nested turn names the agent it works for), its calls, its age and how
            long it has been quiet; one drops off after a minute quiet with no turn running. Keys: s (S) cycles
            the sort column, / types a name filter (Enter keeps it, Esc clears it), v shows the sessions alone
            (and again everything), q or Ctrl-C quits.

            With --once it watches the feed for --window seconds, then prints one frame as plain text and exits
            (3 when the bus does not answer).

            EXAMPLE: skillbus top
                     skillbus top --once --window 2 --width 120
            """,
        options: [
            OptionSpec("--once", help: "Print one frame as plain text and exit."),
            OptionSpec(
                "--window", value: "SECONDS", help: "With --once: how long to watch the feed first (default 1)."),
            OptionSpec(
                "--width", value: "COLUMNS", help: "With --once: the frame's width (default: the terminal's, or 120)."),
            OptionSpec("--interval", value: "SECONDS", help: "How often the view is redrawn (default 0.5)."),
            coordinatorOption, feedOption, serverKeyOption, keyOption,
            OptionSpec("--timeout", value: "SECONDS", help: "How long to wait for the bus's first answer (default 5)."),
        ])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        let bus = try Defaults.bus(arguments, spec)
        let feed = try Defaults.feed(arguments, spec)
        let timeout = try arguments.double("--timeout", minimum: 0.001, maximum: 86_400, in: spec) ?? 5
        let window = try arguments.double("--window", minimum: 0, maximum: 3600, in: spec) ?? 1
        let interval = try arguments.double("--interval", minimum: 0.05, maximum: 60, in: spec) ?? 0.5
        let width = try arguments.int("--width", minimum: 20, maximum: 1000, in: spec)
        let once = arguments.flag("--once")
        if !once, arguments.value("--window") != nil || width != nil {
            throw UsageError(spec, "options '--window' and '--width' go with '--once'")
        }
        if !once, isatty(STDIN_FILENO) != 1 || isatty(STDOUT_FILENO) != 1 {
            throw UsageError(spec, "the live view needs a terminal on standard input and output; use --once")
        }
        let credentials = try Defaults.credentials(arguments, spec)
        let context = try ZMQContext()
        let client = try await SkillbusClient.connect(endpoint: bus, context: context, credentials: credentials)
        let subscriber = try await FeedSubscriber.connect(
            endpoint: feed, topics: [
                "agent.state", "agent.left", "turn.call", "turn.delegated", "turn.handoff", "request.done",
                "invocation.done", "registry.",
            ], context: context,
            credentials: credentials)
        defer {
            subscriber.close()
            client.close()
        }
        if once {
            let screen = TopScreen(bus: bus, terminal: nil)
            return try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await readFeed(subscriber, into: screen).run() }
                defer { group.cancelAll() }
                return try await printOnce(
                    screen, client: client, feed: feed, window: window, timeout: timeout,
                    width: width ?? (isatty(STDOUT_FILENO) == 1 ? FullScreenTerminal.size().columns : 120))
            }
        }
        // From here on Ctrl-C and SIGTERM end the view through the group, and the terminal is put back.
        let signals = SignalWatcher()
        guard let first = await agents(client, timeout: timeout) else { return 3 }
        guard let terminal = FullScreenTerminal() else {
            throw UsageError(spec, "cannot take over the terminal (tcgetattr failed); use --once")
        }
        defer { terminal.restore() }
        let screen = TopScreen(bus: bus, terminal: terminal)
        screen.apply(listing: first)
        let refresher = FunctionService {
            while !Task.isCancelled {
                if let listing = try? await client.agents(timeout: .seconds(max(interval * 4, 2))) {
                    screen.apply(listing: listing)
                } else {
                    screen.noAnswer()
                }
                screen.draw()
                try await Task.sleep(for: .seconds(interval))
            }
        }
        let keys = FunctionService {
            for await input in terminal.input {
                if case .key(let key) = input, screen.handle(key: key) { return }
                screen.draw()
            }
        }
        try await runUntilStopped(
            [readFeed(subscriber, into: screen), refresher, keys], signals: signals, grace: .seconds(1))
        return 0
    }

    /// The bus's AGENTS listing; nil, having said why on standard error, when it does not answer.
    private static func agents(_ client: SkillbusClient, timeout: Double) async -> JSONValue? {
        do {
            return try await client.agents(timeout: .seconds(timeout))
        } catch {
            printError("error: \(error.code): \(error.message)")
            return nil
        }
    }

    /// Every feed event into the screen's model, until cancelled.
    private static func readFeed(_ subscriber: FeedSubscriber, into screen: TopScreen) -> FunctionService {
        FunctionService { for await (topic, event) in subscriber.events { screen.apply(topic: topic, event: event) } }
    }

    /// Asks the bus, waits until the feed's subscription is in place (its first registry heartbeat), watches
    /// for `window`, asks the bus again, and prints the frame.
    private static func printOnce(
        _ screen: TopScreen, client: SkillbusClient, feed: String, window: Double, timeout: Double, width: Int
    ) async throws -> Int32 {
        guard let first = await agents(client, timeout: timeout) else { return 3 }
        screen.apply(listing: first)
        let deadline = ContinuousClock.now + .seconds(max(timeout, 2))
        while !screen.subscribed, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        guard screen.subscribed else {
            printError("error: unreachable: no registry heartbeat from the feed at \(feed) within \(timeout) s")
            return 3
        }
        printError("watching \(feed) for \(window) s")
        try await Task.sleep(for: .seconds(window))
        guard let last = await agents(client, timeout: timeout) else { return 3 }
        screen.apply(listing: last)
        print(screen.lines(width: width, height: nil).joined(separator: "\n"))
        return 0
    }
}

/// The model and the view behind one lock, shared by the feed reader, the refresher and the key handler.
final class TopScreen: Sendable {
    private struct State {
        var model: TopModel
        var view = TopView()
        var answering = true
        var subscribed = false
    }

    private let state: Mutex<State>
    private let bus: String
    private let terminal: FullScreenTerminal?
    /// One frame is written whole before the next starts.
    private let drawing = Mutex(())

    init(bus: String, terminal: FullScreenTerminal?) {
        self.bus = bus
        self.terminal = terminal
        state = Mutex(State(model: TopModel(started: Self.now())))
    }

    /// Seconds on the monotonic clock.
    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    var subscribed: Bool { state.withLock { $0.subscribed } }

    func apply(topic: String, event: JSONValue) {
        state.withLock { state in
            if topic == "registry.heartbeat" { state.subscribed = true }
            state.model.apply(topic: topic, event: event, at: Self.now())
        }
    }

    func apply(listing: JSONValue) {
        state.withLock { state in
            state.model.apply(listing: listing)
            state.answering = true
        }
    }

    func noAnswer() { state.withLock { $0.answering = false } }

    /// True when the key asks to quit.
    func handle(key: UInt8) -> Bool { state.withLock { $0.view.handle(key: key) } }

    func lines(width: Int, height: Int?) -> [String] {
        state.withLock { state in
            let time = ISO8601DateFormatter.string(
                from: Date(), timeZone: .current, formatOptions: [.withTime, .withColonSeparatorInTime])
            let title =
                "skillbus top — \(bus) — \(time)"
                + (state.answering ? "" : " — the bus does not answer, figures are old")
            return TopLayout.lines(
                state.model.frame(now: Self.now()), view: state.view, width: width, height: height, title: title,
                keysLine: terminal != nil)
        }
    }

    /// Redraws the whole screen at the window's current size (so a resize shows at the next draw).
    func draw() {
        guard let terminal else { return }
        drawing.withLock { _ in
            let size = FullScreenTerminal.size()
            terminal.draw(lines(width: size.columns, height: size.rows))
        }
    }
}
