"""What the package costs, as ratios measured in one run (`make python-bench`).

Starts a coordinator, a Swift worker and a Python worker (each offering an `echo` of one schema) on
127.0.0.1 with ephemeral ports, then times sequential echo requests, one in flight, in alternating
rounds of three kinds:

  raw     a bare pyzmq DEALER sending REQUEST and reading REPLY, to the Swift worker (the baseline;
          it uses the package's wire v2 framing functions, not its client)
  client  `skillbus.Client.request`, to the Swift worker: the package's client against the baseline
  worker  `skillbus.Client.request`, to the Python worker: a Python worker against the Swift one

and prints the median of each round's p50 latency and the ratios client/raw and worker/client.
Bounded: ROUNDS × COUNT requests per kind, and it stops after LIMIT_S seconds whatever is left.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import zmq

from skillbus import Client
from skillbus.wire import BUS_TO_CLIENT, CLIENT_TO_BUS

BINARY = os.environ.get("SKILLBUS_BINARY") or os.path.join(os.path.dirname(__file__), "../../.build/debug/skillbus")
ROUNDS, COUNT, LIMIT_S = 7, 300, 90.0
PYTHON_WORKER = """
import sys
from skillbus import Param, Worker
worker = Worker("pyecho", coordinator=sys.argv[1], capacity=1)
worker.skill("py.echo", params=[Param("text", "string")])(lambda text: text)
worker.start(); worker.wait_registered(); print("ready", flush=True)
sys.stdin.read(); worker.stop()
"""


def wait_for(process, pattern: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if re.search(pattern, line):
            return line
        if not line and process.poll() is not None:
            break
    raise SystemExit(f"bench: no line matching {pattern!r}")


def raw_echo(sock, number: int) -> None:
    """One REQUEST for the Swift worker's echo on a bare DEALER, and its REPLY (PROTOCOL §3.1, §3.2)."""
    request_id = f"raw-{number}".encode()
    sock.send_multipart(CLIENT_TO_BUS.pack(b"REQUEST", request_id, b"", b"", b"echo", b"5000", b'{"text":"hi"}'))
    while True:
        if not sock.poll(5000):
            raise SystemExit("bench: no REPLY within 5 s")
        fields = BUS_TO_CLIENT.unpack(sock.recv_multipart())
        if fields[2] == request_id:
            assert fields[1] == b"REPLY" and fields[4] == b"ok", fields
            return


def p50(call, count: int) -> float:
    times = []
    for number in range(count):
        started = time.perf_counter()
        call(number)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> int:
    processes = []
    state = tempfile.TemporaryDirectory(prefix="skillbus-python-bench-")  # the Swift worker's store
    os.environ["XDG_STATE_HOME"] = state.name
    try:
        coordinator = subprocess.Popen([BINARY, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed",
                                        "tcp://127.0.0.1:*", "--log-level", "warning"],
                                       stdout=subprocess.PIPE, text=True)
        processes.append(coordinator)
        bus = re.search(r"bus=(\S+)", wait_for(coordinator, r"coordinator ready")).group(1)
        swift = subprocess.Popen([BINARY, "worker", "--name", "swifty", "--coordinator", bus, "--skills", "echo",
                                  "--capacity", "1", "--log-level", "warning"])
        processes.append(swift)
        python = subprocess.Popen([sys.executable, "-c", PYTHON_WORKER, bus], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        processes.append(python)
        wait_for(python, "ready")

        context = zmq.Context.instance()
        raw = context.socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(bus)
        with Client(bus) as client:
            deadline = time.monotonic() + 20
            while {s["identifier"] for s in client.skills()} != {"echo", "py.echo"}:
                if time.monotonic() > deadline:
                    raise SystemExit("bench: the workers did not register")
                time.sleep(0.05)
            kinds = {
                "raw": lambda n: raw_echo(raw, n),
                "client": lambda n: client.request("echo", {"text": "hi"}),
                "worker": lambda n: client.request("py.echo", {"text": "hi"}),
            }
            figures = {kind: [] for kind in kinds}
            started = time.monotonic()
            for _ in range(ROUNDS):
                if time.monotonic() - started > LIMIT_S:
                    break
                for kind, call in kinds.items():  # alternating, so drift of the machine hits all alike
                    figures[kind].append(p50(call, COUNT))
            raw.close()
        p = {kind: statistics.median(values) for kind, values in figures.items()}
        print(f"rounds: {len(figures['raw'])} of {ROUNDS}, {COUNT} sequential echo requests each, one in flight")
        for kind in kinds:
            print(f"  {kind:7} p50 {p[kind]:8.1f} us (median of the rounds' p50)")
        print(f"  client/raw    {p['client'] / p['raw']:.2f}x  (the package's client against a bare DEALER)")
        print(f"  worker/client {p['worker'] / p['client']:.2f}x  (a Python worker against the Swift worker)")
        return 0
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
                process.wait(10)
        state.cleanup()


if __name__ == "__main__":
    sys.exit(main())
