import Foundation

/// Transparent huge pages for the coordinator's heap.
///
/// With deduplication on, the coordinator keeps every finished round for a while (100,000 by default).
/// When they were small allocations spread over the heap, nearly every touch of an old round (to forget
/// it) missed the TLB on 4 KiB pages, and that was most of what deduplication added per request; they are
/// kept in 256 KiB chunks now (`FinishedRounds`), which huge pages still cover with few entries. glibc's malloc
/// asks the kernel for huge pages when its `glibc.malloc.hugetlb` tunable is 1, but only for its main
/// arena (threads get arenas of their own unless `glibc.malloc.arena_max` is 1), and it reads tunables
/// only when a process starts: so the coordinator sets both and starts itself once more, the same process
/// id with the same arguments.
public enum HugePages {
    static let tunables = "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1"
    static let restartedMarker = "SKILLBUS_HUGE_PAGES_RESTARTED"

    /// Re-executes this program with the tunables set, unless the environment already names the huge-page
    /// one (so `GLIBC_TUNABLES=glibc.malloc.hugetlb=0` opts out). Where exec fails it returns, and the
    /// process runs on ordinary pages; where the kernel or glibc lacks huge pages the tunables do nothing.
    public static func restartWithHugePagesIfNeeded() {
        let environment = ProcessInfo.processInfo.environment
        // The marker makes sure of "once", whatever glibc does with the variable it parses.
        guard environment[restartedMarker] == nil else { return }
        let current = environment["GLIBC_TUNABLES"]
        if current?.contains("glibc.malloc.hugetlb") == true { return }
        setenv("GLIBC_TUNABLES", (current.map { $0 + ":" } ?? "") + tunables, 1)
        setenv(restartedMarker, "1", 1)
        execv("/proc/self/exe", CommandLine.unsafeArgv)
        unsetenv(restartedMarker)
    }
}
