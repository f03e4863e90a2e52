"""Fixtures: the real `skillbus` coordinator and Swift workers on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from skillbus import wire
from skillbus.wire import BUS_TO_WORKER, WORKER_TO_BUS

REPO = Path(__file__).resolve().parents[3]
BINARY = os.environ.get("SKILLBUS_BINARY") or str(REPO / ".build" / "debug" / "skillbus")


def wait_until(test, what: str, timeout: float = 10.0) -> None:
    """Checks `test` every 20 ms until it holds; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Process:
    """A child process whose output lines (stdout and stderr together) can be awaited with a deadline."""

    def __init__(self, arguments: list[str], *, name: str, env: dict | None = None, cwd: str | None = None):
        self.name = name
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SKILLBUS_")}
        environment.update(env or {})
        self.popen = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=environment, cwd=cwd)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        threading.Thread(target=self._read, name=f"read-{name}", daemon=True).start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for_line(self, test, what: str, timeout: float = 15.0) -> str:
        """The first line (already seen or still to come) for which `test(line)` holds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if test(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self._ended:
                    tail = "\n".join(self.lines[-30:])
                    raise AssertionError(f"{self.name}: no line with {what} within {timeout} s; output:\n{tail}")
                self._changed.wait(left)

    def wait(self, timeout: float = 15.0) -> int:
        code = self.popen.wait(timeout)
        with self._changed:  # the exit can overtake the last lines in the pipe
            self._changed.wait_for(lambda: self._ended, 5.0)
        return code

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not gone within 10 s."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


class Cluster:
    """A coordinator (heartbeats every 200 ms) and the Swift workers a test starts."""

    def __init__(self, state_directory: Path):
        if not os.access(BINARY, os.X_OK):
            raise AssertionError(f"{BINARY} is missing: run `swift build` first (or set SKILLBUS_BINARY)")
        self.state = state_directory
        self.processes: list[Process] = []
        self.coordinator = self._start([BINARY, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed",
                                        "tcp://127.0.0.1:*", "--heartbeat-ms", "200"], "coordinator")
        ready = self.coordinator.wait_for_line(lambda l: l.startswith("skillbus coordinator ready:"), "the ready line")
        self.bus = re.search(r"bus=(\S+)", ready).group(1)
        self.feed = re.search(r"feed=(\S+)", ready).group(1)

    def restart_coordinator(self) -> None:
        """Stops the coordinator and starts a new one (a new epoch) on the same two endpoints."""
        self.coordinator.stop()
        self.coordinator = self._start([BINARY, "coordinator", "--bus", self.bus, "--feed", self.feed,
                                        "--heartbeat-ms", "200"], "coordinator again")
        self.coordinator.wait_for_line(lambda l: l.startswith("skillbus coordinator ready:"), "the ready line")

    def _start(self, arguments: list[str], name: str, env: dict | None = None) -> Process:
        process = Process(arguments, name=name, env={"XDG_STATE_HOME": str(self.state), **(env or {})})
        self.processes.append(process)
        return process

    def wait_joined(self, name: str) -> None:
        self.coordinator.wait_for_line(lambda l: f"agent '{name}' joined" in l, f"'{name}' joining")

    def wait_left(self, name: str, timeout: float = 15.0) -> str:
        return self.coordinator.wait_for_line(lambda l: f"agent '{name}' left" in l, f"'{name}' leaving", timeout)

    def swift_worker(self, name: str, *arguments: str) -> Process:
        """Starts `skillbus worker` and waits until the coordinator says it joined."""
        worker = self._start([BINARY, "worker", "--name", name, "--coordinator", self.bus, "--heartbeat-ms", "200",
                              *arguments], name)
        self.wait_joined(name)
        return worker

    def python(self, script: str, name: str, *arguments: str) -> Process:
        """Runs a Python program with this cluster's bus as $SKILLBUS_COORDINATOR."""
        return self._start([sys.executable, "-u", script, *arguments], name, env={"SKILLBUS_COORDINATOR": self.bus})

    def skillbus(self, *arguments: str, timeout: float = 30.0) -> tuple[int, list[str]]:
        """Runs a `skillbus` command to its end: (exit code, output lines)."""
        process = self._start([BINARY, *arguments], f"skillbus {arguments[0]}")
        return process.wait(timeout), process.lines

    def send_json(self, *arguments: str) -> tuple[int, dict]:
        """`skillbus send … --json`: the exit code and the round document."""
        code, lines = self.skillbus("send", *arguments, "--json", "--coordinator", self.bus)
        document = next((line for line in lines if line.startswith("{")), None)
        assert document is not None, f"skillbus send printed no document: {lines}"
        return code, json.loads(document)

    def registry(self) -> dict:
        """`skillbus skills --json`: a Swift replica's whole registry with its position (§5.15)."""
        code, lines = self.skillbus("skills", "--json", "--coordinator", self.bus, "--feed", self.feed)
        assert code == 0, lines
        return json.loads(next(line for line in lines if line.startswith("{")))

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def messages(frames: list[bytes]) -> list[list[bytes]]:
    """The messages a received message carries: those of a batch (§2.2: the package batches what it sends at
    once, and its first message on a connection), else itself."""
    if len(frames) == 1 and wire.is_batch(frames[0]):
        return [[message] for message in wire.split_batch(frames[0])]
    return [frames]


class FakeBus:
    """A ROUTER standing in for the coordinator, to send a worker what no real bus would.

    It speaks wire v2 through the package's `wire` module; `send_frames` sends frames as given.
    """

    def __init__(self):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peer = None
        self._waiting: list[list[bytes]] = []  # the rest of a batch

    def _next_fields(self, timeout_ms):
        """The worker's next message as its fields (a message that does not unpack fails the test)."""
        if not self._waiting:
            if not self.sock.poll(timeout_ms):
                return None
            self.peer, *frames = self.sock.recv_multipart()
            self._waiting = messages(frames)
        return WORKER_TO_BUS.unpack(self._waiting.pop(0))

    def receive(self, command, timeout_ms=5000):
        """The fields of the next message from the worker with this command (others are skipped)."""
        while (fields := self._next_fields(timeout_ms)) is not None:
            if fields[1] == command:
                return fields
        raise AssertionError(f"no {command!r} from the worker")

    def next_message(self, timeout_ms=5000):
        """The worker's next message other than a HEARTBEAT, as (command, fields after it)."""
        while (fields := self._next_fields(timeout_ms)) is not None:
            if fields[1] != b"HEARTBEAT":
                return fields[1], fields[2:]
        raise AssertionError("the worker sent nothing")

    def send(self, *fields):
        """Sends fields 1, 2, ... (the command first) in wire v2 framing."""
        self.send_frames(*BUS_TO_WORKER.pack(*fields))

    def send_frames(self, *frames):
        self.sock.send_multipart([self.peer, *frames])

    def invoke(self, invocation, skill, params=b'{"text":"a"}'):
        self.send(b"INVOKE", invocation, b"r", b"", skill, b"5000", params)

    def close(self):
        self.sock.close()


@pytest.fixture
def cluster(tmp_path):
    running = Cluster(tmp_path)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def client(cluster):
    from skillbus import Client

    with Client(cluster.bus, timeout=10) as connected:
        yield connected


@pytest.fixture
def start_worker(cluster):
    """Starts Python workers on the cluster (waiting for their WELCOME) and stops them after the test."""
    started = []

    def start(worker):
        started.append(worker)
        worker.start()
        worker.wait_registered()
        cluster.wait_joined(worker.name)
        return worker

    yield start
    for worker in started:
        worker.stop()
