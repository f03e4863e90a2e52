import CLinux
import Foundation
import SkillbusPerf

skillbus_line_buffer_stdout()
exit(await PerfCommand.main(Array(CommandLine.arguments.dropFirst())))
