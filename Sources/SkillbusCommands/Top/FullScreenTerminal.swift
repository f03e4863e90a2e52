import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The terminal while `skillbus top` owns it: keys arrive one at a time without echo, the alternate screen
/// holds the view and the cursor is hidden; `restore` puts back the settings and screen it found (on `q`,
/// on Ctrl-C and on SIGTERM alike, since the command's `defer` runs it). ANSI escapes only, no curses.
final class FullScreenTerminal: Sendable {
    enum Input: Sendable {
        case key(UInt8)
        /// SIGWINCH: the window changed size.
        case resize
    }

    private let saved: termios
    private let restored = Atomic(false)
    private let stopReading = StopFlag()
    /// Kept alive for the SIGWINCH handler; never touched after init.
    private nonisolated(unsafe) let resizeSource: any DispatchSourceSignal
    let input: AsyncStream<Input>

    /// Nil when standard input or output is no terminal.
    init?() {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else { return nil }
        var settings = termios()
        guard tcgetattr(STDIN_FILENO, &settings) == 0 else { return nil }
        saved = settings
        // No line buffering and no echo; ISIG stays, so Ctrl-C is SIGINT and stops the command as usual.
        settings.c_lflag &= ~tcflag_t(ICANON | ECHO)
        withUnsafeMutableBytes(of: &settings.c_cc) { bytes in
            bytes[Int(VMIN)] = 1
            bytes[Int(VTIME)] = 0
        }
        tcsetattr(STDIN_FILENO, TCSANOW, &settings)
        let (stream, continuation) = AsyncStream.makeStream(of: Input.self)
        input = stream
        signal(SIGWINCH, SIG_IGN)
        resizeSource = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        resizeSource.setEventHandler { continuation.yield(.resize) }
        resizeSource.resume()
        Self.write("\u{1B}[?1049h\u{1B}[?25l\u{1B}[2J")
        Self.readKeys(into: continuation, until: stopReading)
    }

    /// Reads standard input on a thread of its own (never the cooperative pool), polling so that it notices
    /// the stop within 100 ms.
    private static func readKeys(into continuation: AsyncStream<Input>.Continuation, until stop: StopFlag) {
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 64)
            while !stop.raised.load(ordering: .relaxed) {
                var descriptor = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 100) > 0 else { continue }
                let count = read(STDIN_FILENO, &buffer, buffer.count)
                guard count > 0 else { break }
                for byte in buffer.prefix(count) { continuation.yield(.key(byte)) }
            }
            continuation.finish()
        }
        thread.name = "skillbus-top-keys"
        thread.start()
    }

    /// Columns and rows of the window (TIOCGWINSZ); 80×24 when the terminal does not say.
    static func size() -> (columns: Int, rows: Int) {
        var window = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &window) == 0, window.ws_col > 0, window.ws_row > 0 else {
            return (80, 24)
        }
        return (Int(window.ws_col), Int(window.ws_row))
    }

    /// Replaces the screen's contents with `lines`, each already at most as wide as the window.
    func draw(_ lines: [String]) {
        Self.write("\u{1B}[H" + lines.joined(separator: "\u{1B}[K\n") + "\u{1B}[K\u{1B}[J")
    }

    /// Puts back the terminal as it was. Safe to call more than once.
    func restore() {
        guard !restored.exchange(true, ordering: .relaxed) else { return }
        stopReading.raised.store(true, ordering: .relaxed)
        resizeSource.cancel()
        Self.write("\u{1B}[?25h\u{1B}[?1049l")
        var settings = saved
        tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    }

    private static func write(_ text: String) {
        let bytes = Array(text.utf8)
        bytes.withUnsafeBytes { buffer in
            guard let start = buffer.baseAddress else { return }
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(STDOUT_FILENO, start + offset, buffer.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }
}

/// Tells the key reader's thread to stop.
private final class StopFlag: Sendable {
    let raised = Atomic(false)
}
