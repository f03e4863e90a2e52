"""What Python peers get from the bus under load, against pyzmq baselines in the same run (`make python-bench`).

Starts on 127.0.0.1, with ephemeral ports:
  - the Skillbus coordinator (`$SKILLBUS_BINARY`, the release build) and WORKERS Python
    `skillbus.Worker` processes, each offering `py.echo` (a quick skill: it runs on the worker's
    socket thread) and `py.echo.pooled` (the same echo on the worker's thread pool);
  - the raw baseline: a pyzmq `zmq.proxy` (ROUTER <-> DEALER) in front of WORKERS pyzmq REP workers
    doing the same echo (Tests/perf/pyzmq_proxy.py);
  - the fan-out baseline: a Majordomo (RFC 7) broker in Python with WORKERS MDP workers doing the same
    echo (Tests/perf/mdp.py).

Then, in alternating rounds so that the machine's drift hits every kind alike, it measures:
  raw       requests a second through the raw proxy, IN_FLIGHT outstanding from one pyzmq DEALER
  client    requests a second of `Client.submit("py.echo")`, IN_FLIGHT outstanding from one thread
  pooled    the same with `py.echo.pooled` (skills on the workers' thread pools: not a target)
  mdp       scatters a second of a Majordomo client sending one request per worker, one scatter at a time
  fanout    fan-out rounds a second of `Client.fanout("py.echo")` to the WORKERS workers, one at a time
  mdp16     scatters a second with SCATTERS_IN_FLIGHT scatters outstanding from one DEALER
  fanout16  fan-out rounds a second of `Client.submit_round`, SCATTERS_IN_FLIGHT outstanding

and prints the median of each and the ratios against their targets: client/raw >= 0.7, and
fanout/mdp >= 1.2 both one at a time and SCATTERS_IN_FLIGHT at a time. A ratio is the median of the
rounds' ratios (subject and baseline measured back to back, so a busy moment of the machine hits both);
the ratio of the medians follows in brackets. Bounded: ROUNDS rounds of
LOAD_COUNT requests and SCATTER_COUNT scatters each (twice that in flight), stopped after LIMIT_S
seconds whatever is left.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import zmq

from skillbus import Client

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.path.join(HERE, "../../Tests/perf")
sys.path.insert(0, PERF)
import mdp  # noqa: E402  (Tests/perf)
import pyzmq_proxy  # noqa: E402

BINARY = os.environ.get("SKILLBUS_BINARY") or os.path.join(HERE, "../../.build/release/skillbus")
WORKERS, IN_FLIGHT, SCATTERS_IN_FLIGHT, CAPACITY = 4, 64, 16, 32
ROUNDS, LOAD_COUNT, SCATTER_COUNT, LIMIT_S = 7, 6000, 500, 150.0
PYTHON_WORKER = """
import sys
from skillbus import Param, Worker
worker = Worker(sys.argv[2], coordinator=sys.argv[1], capacity=int(sys.argv[3]), replica=False)
echo = lambda text: text
worker.skill("py.echo", params=[Param("text", "string")], quick=True)(echo)
worker.skill("py.echo.pooled", params=[Param("text", "string")])(echo)
worker.start(); worker.wait_registered(); print("ready", flush=True)
sys.stdin.read(); worker.stop()
"""


class Processes:
    """Child processes, each stopped at the end with SIGTERM (by its own pid)."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, arguments: list[str], ready: str, stdin: bool = False) -> str:
        process = subprocess.Popen(arguments, stdout=subprocess.PIPE, text=True,
                                   stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.started.append(process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if re.search(ready, line):
                return line
            if not line and process.poll() is not None:
                break
        raise SystemExit(f"bench: {arguments[:3]} printed no line matching {ready!r}")

    def stop(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()


def submitted_load(submit, count: int, in_flight: int) -> float:
    """Calls a second of `count` calls of `submit()` (a `Client.submit...` returning a `SubmittedCall`)
    with `in_flight` outstanding: each answer's callback, on the client's socket thread, submits the next."""
    finished = threading.Event()
    state = {"sent": 0, "done": 0, "failure": None}

    def on_done(call) -> None:
        state["done"] += 1
        if call.exception() is not None and state["failure"] is None:
            state["failure"] = call.exception()
        if state["sent"] < count:
            state["sent"] += 1
            submit().add_done_callback(on_done)
        elif state["done"] == count:
            finished.set()

    started = time.perf_counter()
    first = min(in_flight, count)
    state["sent"] = first
    for _ in range(first):
        submit().add_done_callback(on_done)
    if not finished.wait(60):
        raise SystemExit(f"bench: {state['done']} of {count} calls answered within 60 s")
    elapsed = time.perf_counter() - started
    if state["failure"] is not None:
        raise SystemExit(f"bench: a call failed: {state['failure']}")
    return count / elapsed


def rounds_per_second(call, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        call()
    return count / (time.perf_counter() - started)


def main() -> int:
    processes = Processes()
    state = tempfile.TemporaryDirectory(prefix="skillbus-python-bench-")
    os.environ["XDG_STATE_HOME"] = state.name
    python = sys.executable
    try:
        line = processes.start([BINARY, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*",
                                "--log-level", "warning"], r"coordinator ready")
        bus = re.search(r"bus=(\S+)", line).group(1)
        for number in range(WORKERS):
            processes.start([python, "-c", PYTHON_WORKER, bus, f"py{number}", str(CAPACITY)], "ready", stdin=True)
        line = processes.start([python, os.path.join(PERF, "pyzmq_proxy.py"), "proxy"], "ready")
        front, back = re.search(r"front=(\S+) back=(\S+)", line).groups()
        for _ in range(WORKERS):
            processes.start([python, os.path.join(PERF, "pyzmq_proxy.py"), "rep", back], "ready")
        broker = re.search(r"bus=(\S+)", processes.start([python, os.path.join(PERF, "mdp.py"), "broker"], "ready")).group(1)
        for _ in range(WORKERS):
            processes.start([python, os.path.join(PERF, "mdp.py"), "worker", broker, "echo"], "ready")

        raw_sock, scatter_sock = zmq.Context.instance().socket(zmq.DEALER), zmq.Context.instance().socket(zmq.DEALER)
        for sock, endpoint in ((raw_sock, front), (scatter_sock, broker)):  # one each, as the client is one
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
        with Client(bus) as client:
            deadline = time.monotonic() + 20
            while not any(s["identifier"] == "py.echo" and len(s["providers"]) == WORKERS for s in client.skills()):
                if time.monotonic() > deadline:
                    raise SystemExit("bench: the Python workers did not register")
                time.sleep(0.05)
            fanout_body = {"fanout": {"skill": "py.echo", "params": {"text": "hi"}, "agents": "all"}}
            kinds = {
                "raw": lambda: pyzmq_proxy.drive(raw_sock, LOAD_COUNT, IN_FLIGHT),
                "client": lambda: submitted_load(lambda: client.submit("py.echo", {"text": "hi"}), LOAD_COUNT, IN_FLIGHT),
                "pooled": lambda: submitted_load(lambda: client.submit("py.echo.pooled", {"text": "hi"}),
                                                 LOAD_COUNT, IN_FLIGHT),
                "mdp": lambda: rounds_per_second(
                    lambda: mdp.scatter(scatter_sock, b"echo", pyzmq_proxy.REQUEST_BODY, WORKERS), SCATTER_COUNT),
                "fanout": lambda: rounds_per_second(lambda: client.fanout("py.echo", {"text": "hi"}), SCATTER_COUNT),
                "mdp16": lambda: mdp.scatter_load(scatter_sock, b"echo", SCATTER_COUNT * 2, SCATTERS_IN_FLIGHT, WORKERS),
                "fanout16": lambda: submitted_load(lambda: client.submit_round(fanout_body), SCATTER_COUNT * 2,
                                                   SCATTERS_IN_FLIGHT),
            }
            for call in kinds.values():  # a short warm-up of every path
                call()
            figures = {kind: [] for kind in kinds}
            started = time.monotonic()
            for _ in range(ROUNDS):
                if time.monotonic() - started > LIMIT_S:
                    break
                for kind, call in kinds.items():  # alternating, so the machine's drift hits every kind alike
                    figures[kind].append(call())
        raw_sock.close()
        scatter_sock.close()
        rate = {kind: statistics.median(values) for kind, values in figures.items()}
        print(f"rounds: {len(figures['raw'])} of {ROUNDS}; {WORKERS} workers of each kind; {LOAD_COUNT} echo requests "
              f"at {IN_FLIGHT} in flight; {SCATTER_COUNT} scatters one at a time, {SCATTER_COUNT * 2} at "
              f"{SCATTERS_IN_FLIGHT} in flight")
        for kind, unit in (("raw", "requests/s"), ("client", "requests/s"), ("pooled", "requests/s"),
                           ("mdp", "scatters/s"), ("fanout", "rounds/s"), ("mdp16", "scatters/s"),
                           ("fanout16", "rounds/s")):
            spread = ", ".join(f"{value:.0f}" for value in figures[kind])
            print(f"  {kind:8} {rate[kind]:8.0f} {unit:10} (median of {spread})")
        checks = [
            ("client", "raw", 0.7,
             f"Client.submit + quick Python workers against a pyzmq proxy + REP workers, {IN_FLIGHT} in flight"),
            ("pooled", "raw", None, "the same with skills on the workers' thread pools"),
            ("fanout", "mdp", 1.2,
             f"a fan-out round to {WORKERS} Python workers against a Majordomo scatter in Python, one at a time"),
            ("fanout16", "mdp16", 1.2, f"the same, {SCATTERS_IN_FLIGHT} in flight"),
        ]
        print("  ratios: the median of each round's ratio (the two measured one after the other), "
              "then the ratio of the medians")
        for subject, baseline, target, what in checks:
            ratio = statistics.median(s / b for s, b in zip(figures[subject], figures[baseline]))
            of_medians = rate[subject] / rate[baseline]
            verdict = "(no target)" if target is None else f"target >= {target:.2f}  {'met' if ratio >= target else 'MISSED'}"
            print(f"  {subject + '/' + baseline:15} {ratio:5.2f}x ({of_medians:4.2f}x)  {verdict:24} {what}")
        return 0
    finally:
        processes.stop()
        state.cleanup()


if __name__ == "__main__":
    sys.exit(main())
