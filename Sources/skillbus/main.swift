import CZeroMQ
import Foundation
import SkillbusCommands

skillbus_line_buffer_stdout()
// Started by `skillbus up` or `bench`: stop cleanly when the supervisor goes, even if it was killed
// outright. (PR_SET_PDEATHSIG would follow the spawning *thread*, which a thread pool may retire.)
if let supervisor = ProcessInfo.processInfo.environment["SKILLBUS_SUPERVISOR_PID"].flatMap(Int32.init) {
    Thread.detachNewThread {
        while getppid() == supervisor { usleep(250_000) }
        kill(getpid(), SIGTERM)
    }
}
exit(await SkillbusCLI.main(Array(CommandLine.arguments.dropFirst())))
