/// The coordinator thread's half of the operator HTTP endpoint: it counts every event into `BusMetrics`,
/// posts the events the dashboard shows to the `OperatorBoard`, and leaves a `BusSnapshot` there at every
/// tick. The other half, `HTTPServer`, runs on a thread of its own.
final class OperatorEndpoint {
    private(set) var metrics = BusMetrics()
    private let board: OperatorBoard
    private let server: HTTPServer

    var address: HTTPAddress { server.address }

    init(address: HTTPAddress) throws {
        board = try OperatorBoard()
        do {
            server = try HTTPServer(address: address, board: board)
        } catch {
            board.wakePipe.close()
            throw error
        }
    }

    func record(_ event: FeedEvent) {
        metrics.record(event)
        switch event {
        // The dashboard shows neither; heartbeats come ten times a second under load, output batches as fast.
        case .registryHeartbeat, .invocationOutput: break
        default: board.post(event)
        }
    }

    func refused(_ error: SkillbusError) {
        metrics.refused(error.code.rawValue)
    }

    /// At every tick: what the HTTP side serves until the next one.
    func publish(_ state: CoordinatorState) {
        var snapshot = BusSnapshot()
        snapshot.metrics = metrics
        snapshot.agents = state.workers.all.map { worker in
            BusSnapshot.Agent(
                name: worker.name, capacity: worker.capacity, inFlight: worker.inFlight, state: worker.state,
                skills: worker.skills.keys.sorted())
        }.sorted { $0.name < $1.name }
        snapshot.waiting = state.waitingCount
        snapshot.runningRounds = state.rounds.runningCount
        snapshot.registryEpoch = state.ledger.epoch
        snapshot.registrySequence = state.ledger.sequence
        snapshot.registrySkills = Set(snapshot.agents.flatMap(\.skills)).count
        snapshot.group = state.group
        board.publish(snapshot)
    }

    /// Stops the HTTP thread and waits for it (the coordinator's thread may wait).
    func close() {
        server.stop()
        board.wakePipe.close()
    }
}
