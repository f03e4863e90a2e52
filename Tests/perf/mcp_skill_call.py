"""What calling an MCP server's tool through Skillbus costs, as a ratio measured in one run.

Starts a coordinator and one Swift worker on 127.0.0.1 (ephemeral ports) that offers the built-in
`echo` and mounts Tests/mcp/fixture_server.py (the official Python SDK's MCPServer) over stdio as
`fx`, then times sequential requests, one in flight, in alternating rounds of two kinds:

  builtin  `echo`, run inside the worker (the baseline)
  mcp      `fx.echo`, the worker relaying the call to the MCP server and its answer back
  sdk      `echo` of a second copy of the server, called directly by the SDK's own client over stdio
           (from an event loop on another thread, as the calls here are synchronous): what the server
           and the SDK cost without Skillbus

and prints the median over rounds of each kind's p50 latency and the ratios mcp/builtin and mcp/sdk.
The mounted server is not trusted, so `fx.echo` is not pure and never answered from the bus's cache.

    python3 Tests/perf/mcp_skill_call.py            # SKILLBUS_BINARY picks the binary (default: debug)
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../clients/python/src"))
from skillbus import Client  # noqa: E402

BINARY = os.environ.get("SKILLBUS_BINARY") or os.path.join(HERE, "../../.build/debug/skillbus")
FIXTURE = os.path.join(HERE, "../mcp/fixture_server.py")
ROUNDS, COUNT, LIMIT_S = 7, 200, 120.0


def wait_for(process, pattern: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if re.search(pattern, line):
            return line
        if not line and process.poll() is not None:
            break
    raise SystemExit(f"mcp bench: no line matching {pattern!r}")


def p50(call, count: int) -> float:
    times = []
    for number in range(count):
        started = time.perf_counter()
        call(number)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


class DirectSDK:
    """The fixture server behind the SDK's own stdio client, on an event loop in a thread of its own."""

    def __init__(self):
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop = None
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.serve(), self.loop)
        if not self.ready.wait(30):
            raise SystemExit("mcp bench: the SDK's client did not connect")

    async def serve(self):
        import asyncio

        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.stop = asyncio.Event()
        async with stdio_client(StdioServerParameters(command=sys.executable, args=[FIXTURE])) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                self.session = session
                self.ready.set()
                await self.stop.wait()

    def echo(self, text: str) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.session.call_tool("echo", {"text": text}), self.loop).result(10)

    def close(self) -> None:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(self.set_stop(), self.loop)
        future.result(5)
        time.sleep(0.5)  # the client's context closes the server's stdin and reaps it
        self.loop.call_soon_threadsafe(self.loop.stop)

    async def set_stop(self):
        self.stop.set()


def main() -> int:
    processes = []
    state = tempfile.TemporaryDirectory(prefix="skillbus-mcp-bench-")
    os.environ["XDG_STATE_HOME"] = state.name
    config = os.path.join(state.name, "worker.json")
    with open(config, "w") as file:
        json.dump({"version": 1, "name": "mounter", "skills": ["echo"], "capacity": 1,
                   "mcpServers": [{"name": "fx", "command": sys.executable, "args": [FIXTURE]}]}, file)
    try:
        coordinator = subprocess.Popen([BINARY, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed",
                                        "tcp://127.0.0.1:*", "--log-level", "warning"],
                                       stdout=subprocess.PIPE, text=True)
        processes.append(coordinator)
        bus = re.search(r"bus=(\S+)", wait_for(coordinator, r"coordinator ready")).group(1)
        worker = subprocess.Popen([BINARY, "worker", "--config", config, "--coordinator", bus,
                                   "--log-level", "warning"])
        processes.append(worker)
        with Client(bus) as client:
            deadline = time.monotonic() + 30
            while not {"echo", "fx.echo"} <= {s["identifier"] for s in client.skills()}:
                if time.monotonic() > deadline:
                    raise SystemExit("mcp bench: the worker did not offer fx.echo")
                time.sleep(0.05)
            direct = DirectSDK()
            kinds = {
                "builtin": lambda n: client.request("echo", {"text": f"hi {n}"}),
                "mcp": lambda n: client.request("fx.echo", {"text": f"hi {n}"}),
                "sdk": lambda n: direct.echo(f"hi {n}"),
            }
            for call in kinds.values():
                call(0)  # warm both paths up
            figures = {kind: [] for kind in kinds}
            started = time.monotonic()
            for index in range(ROUNDS):
                if time.monotonic() - started > LIMIT_S:
                    break
                order = list(kinds) if index % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    figures[kind].append(p50(kinds[kind], COUNT))
            direct.close()
        medians = {kind: statistics.median(values) for kind, values in figures.items()}
        for kind, value in medians.items():
            print(f"{kind:8} p50 {value:8.0f} µs  (median of {len(figures[kind])} rounds of {COUNT})")
        print(f"mcp/builtin {medians['mcp'] / medians['builtin']:.2f}   mcp/sdk {medians['mcp'] / medians['sdk']:.2f}")
        return 0
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
