/// What the journal's thread does between commits, and when: a checkpoint once the write-ahead log is long, and
/// the retention sweep (`JournalRetention`) in small steps, each its own short transaction, so that rounds
/// waiting for their commit wait for one step at most, never a whole sweep. A plain value, so the schedule is
/// tested without a database or a thread.
struct JournalUpkeep: Sendable, Equatable {
    /// How often a sweep starts (`RoundJournal.Limits.sweepMs`), in nanoseconds.
    var sweepEveryNanos: UInt64
    /// Pages of write-ahead log that make a checkpoint due.
    var checkpointFrames: Int
    /// Rows one sweep step deletes at most.
    var rowsPerStep: Int
    /// When the next sweep starts (uptime nanoseconds).
    private(set) var nextSweep: UInt64
    /// A sweep whose last step deleted as much as a step may: the next step runs at the thread's next pass.
    private(set) var sweeping = false

    init(sweepEveryNanos: UInt64, checkpointFrames: Int = 4000, rowsPerStep: Int = 64, now: UInt64) {
        self.sweepEveryNanos = sweepEveryNanos
        self.checkpointFrames = checkpointFrames
        self.rowsPerStep = rowsPerStep
        nextSweep = now  // the first sweep runs at open
    }

    /// Whether to checkpoint now: the log holds at least `checkpointFrames` pages.
    func checkpointDue(framesInLog: Int) -> Bool { framesInLog >= checkpointFrames }

    /// Whether to take a sweep step now: one is under way, or the next sweep is due.
    func sweepStepDue(now: UInt64) -> Bool { sweeping || now >= nextSweep }

    /// A sweep step deleted `deleted` rows at `now`: a full step means there may be more, taken at the next pass;
    /// fewer, and the sweep is over until `sweepEveryNanos` after it started.
    mutating func stepped(deleted: Int, now: UInt64) {
        if !sweeping { nextSweep = now + sweepEveryNanos }
        sweeping = deleted >= rowsPerStep
    }

    /// Until when the thread may sleep when nothing waits to be committed; nil: not at all (a sweep is under way).
    var sleepUntil: UInt64? { sweeping ? nil : nextSweep }
}
