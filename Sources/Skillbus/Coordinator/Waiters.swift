/// The waiters of the request table's executions besides each entry's own origin: clients whose REQUEST joined an
/// identical execution (single-flight), until they are answered; and waiters that gave up on an execution that goes
/// on for others (CoordinatorState+Cancel), until its outcome passes them by. A withdrawn waiter is told `cancelled`
/// when it gives up, so its outcome must never reach it a second time.
struct Waiters: Sendable {
    /// A client that joined an execution, with the round it waits in.
    struct Joined: Sendable {
        let execution: SingleFlight.ExecutionID
        let round: [UInt8]
    }

    private var joined: [Waiter: Joined] = [:]
    private var withdrawn: Set<Waiter> = []

    /// Nobody joined and nobody withdrew: nothing to look up on a request's way.
    var isEmpty: Bool { joined.isEmpty && withdrawn.isEmpty }

    /// A client's REQUEST joined `execution`, in `round`.
    mutating func join(_ waiter: Waiter, _ execution: SingleFlight.ExecutionID, round: [UInt8]) {
        joined[waiter] = Joined(execution: execution, round: round)
    }

    /// What a joined client waits for.
    func joined(_ waiter: Waiter) -> Joined? { joined.isEmpty ? nil : joined[waiter] }

    /// The clients joined in `round`.
    func joined(round: [UInt8]) -> [Waiter] { joined.filter { $0.value.round == round }.map(\.key) }

    /// A client was answered: it waits for nothing any more.
    mutating func answered(_ waiter: Waiter) {
        if !joined.isEmpty { joined[waiter] = nil }
    }

    /// `waiter` gave up and was answered: the outcome it waited for passes it by.
    mutating func withdraw(_ waiter: Waiter) { withdrawn.insert(waiter) }

    func hasWithdrawn(_ waiter: Waiter) -> Bool { !withdrawn.isEmpty && withdrawn.contains(waiter) }

    /// A withdrawn waiter whose execution stops without an outcome: nothing will pass it by.
    mutating func forget(_ waiter: Waiter) { withdrawn.remove(waiter) }

    /// The outcome reaches `waiter`: true when it withdrew (it is forgotten now, and must not be answered again).
    mutating func passBy(_ waiter: Waiter) -> Bool { !withdrawn.isEmpty && withdrawn.remove(waiter) != nil }
}
