import CLinux
import Foundation
import SkillbusCommands

skillbus_line_buffer_stdout()
// A parent that spawns us from a thread that blocks signals (libdispatch's workers do) hands that mask
// down; with SIGTERM blocked in every thread, `stop` would never arrive. Unblock what we handle.
var handled = sigset_t()
sigemptyset(&handled)
for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&handled, signal) }
pthread_sigmask(SIG_UNBLOCK, &handled, nil)
// Started by `skillbus up` or `bench`: stop cleanly when the supervisor goes, even if it was killed
// outright. (PR_SET_PDEATHSIG would follow the spawning *thread*, which a thread pool may retire.)
if let supervisor = ProcessInfo.processInfo.environment["SKILLBUS_SUPERVISOR_PID"].flatMap(Int32.init) {
    Thread.detachNewThread {
        while getppid() == supervisor { usleep(250_000) }
        kill(getpid(), SIGTERM)
    }
}
exit(await SkillbusCLI.main(Array(CommandLine.arguments.dropFirst())))
