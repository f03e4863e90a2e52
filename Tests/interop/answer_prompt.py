#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal, as a person would at a terminal: waits until the command asks
(its output contains PROMPT), types ANSWER and a newline, then passes the rest of its output through and
exits with its exit code. Usage: answer_prompt.py PROMPT ANSWER COMMAND [ARG ...]"""
import os
import pty
import select
import sys
import time

prompt, answer, command = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(command[0], command)

seen, answered, deadline = b"", False, time.monotonic() + 30
while time.monotonic() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.2)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the command closed its terminal: it is done
            break
        if not chunk:
            break
        seen += chunk
    if not answered and prompt in seen:
        os.write(fd, answer + b"\n")
        answered = True
sys.stdout.write(seen.decode(errors="replace"))
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
