"""Drives `skillbus top` in a pseudo-terminal, as a person at a terminal would.

Usage: top_pty.py SKILLBUS BUS FEED. It starts the live view at 100x30, waits for a frame, presses `s`
(the sort line must say `rate`), types the filter `/al` + Enter, shrinks the window to 60x12 (SIGWINCH:
the next frame must fit 60 columns and 12 rows), then presses Ctrl-C. The view must exit 0, leave the
alternate screen, show the cursor again and restore the terminal's echo and line mode. Prints `ok`, or
what went wrong (exit 1). Every wait has a deadline.
"""

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time

skillbus, bus, feed = sys.argv[1:4]
DEADLINE = 20.0


def set_size(fd, rows, columns):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


pid, master = pty.fork()
if pid == 0:
    set_size(sys.stdout.fileno(), 30, 100)
    os.execv(skillbus, [skillbus, "top", "--coordinator", bus, "--feed", feed, "--interval", "0.2"])

received = b""


def last_frame():
    """The last whole frame drawn: the text between a cursor-home and the clear-to-end that ends it."""
    frames = re.findall(r"\x1b\[H(.*?)\x1b\[J", received.decode("utf-8", "replace"), re.S)
    return frames[-1] if frames else None


def frame_lines(frame):
    return [line.replace("\x1b[K", "").rstrip("\r") for line in frame.split("\n")]


def read_until(matches, what):
    """Reads the pty until the last whole frame satisfies `matches` (a function of its lines)."""
    global received
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        frame = last_frame()
        if frame is not None and matches(frame_lines(frame)):
            return frame_lines(frame)
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    fail(f"timed out waiting for {what}; last output: {received[-800:]!r}")


def fail(message):
    print(message)
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    sys.exit(1)


def footer(lines, text):
    return bool(lines) and text in lines[-1]


read_until(lambda lines: any(line.startswith("AGENT") for line in lines) and footer(lines, "sort: name"), "a frame")
if "\x1b[?1049h" not in received.decode("utf-8", "replace"):
    fail("top did not switch to the alternate screen")
if termios.tcgetattr(master)[3] & termios.ECHO:
    fail("echo is still on while top runs")

os.write(master, b"s")
read_until(lambda lines: footer(lines, "sort: rate"), "the sort to change to rate")
os.write(master, b"/al\r")
read_until(lambda lines: footer(lines, "filter: al ("), "the filter 'al'")

set_size(master, 12, 60)
read_until(
    lambda lines: len(lines) == 12 and all(len(line) <= 60 for line in lines) and footer(lines, "sort: rate"),
    "a frame of 60x12 after the resize")

os.write(master, b"\x03")
end = time.monotonic() + DEADLINE
status = None
while time.monotonic() < end:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    ready, _, _ = select.select([master], [], [], 0.1)
    if ready:
        try:
            received += os.read(master, 65536)
        except OSError:
            pass
if status is None or not os.WIFEXITED(status):
    fail(f"top did not exit after Ctrl-C (status {status})")
try:
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            break
        chunk = os.read(master, 65536)
        if not chunk:
            break
        received += chunk
except OSError:
    pass
tail = received.decode("utf-8", "replace")
if os.WEXITSTATUS(status) != 0:
    fail(f"top exited {os.WEXITSTATUS(status)} after Ctrl-C: {tail[-500:]!r}")
if not tail.rstrip().endswith("\x1b[?25h\x1b[?1049l"):
    fail(f"top did not leave the alternate screen and show the cursor: {tail[-200:]!r}")
attributes = termios.tcgetattr(master)
if not attributes[3] & termios.ECHO or not attributes[3] & termios.ICANON:
    fail("the terminal's echo and line mode were not restored")
print("ok")
