import CZeroMQ
import Foundation
import SkillbusCommands

skillbus_line_buffer_stdout()
exit(await SkillbusCLI.main(Array(CommandLine.arguments.dropFirst())))
