"""CPU per team round, by process role: where an asks round of three agents spends its time.

    python3 Tests/perf/team_cpu.py [--skillbus PATH] [--seconds S] [--mode asks|asks3|ask|send]

Starts a coordinator, two plain echo workers and three agents whose rules planner answers "say WORD" by
calling echo (the agents of `skillbus bench --only turns`), all on 127.0.0.1 with ephemeral ports. It then
sends, one at a time, for S seconds (at most 100,000): asks rounds of the three agents (`asks`), the three
asks sent at once (`asks3`, the bench's baseline for `asks`), one-call turns of one agent (`ask`), or echo rounds
(`send`), and prints the CPU each role spent per round, read from
/proc/PID/stat before and after, with the rounds' mean wall time. Run it for two builds in alternation
(`--skillbus`) to compare them: the figures are only comparable within one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients/python/src"))
import skillbus  # noqa: E402

AGENTS = ["bench-team-0", "bench-team-1", "bench-team-2"]


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skillbus", default=str(ROOT / ".build/release/skillbus"))
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--mode", choices=["asks", "asks3", "ask", "send"], default="asks")
    options = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="skillbus-team-cpu-")
    processes: list[subprocess.Popen] = []
    try:
        coordinator = subprocess.Popen(
            [options.skillbus, "coordinator", "--bus", "tcp://127.0.0.1:*", "--feed", "tcp://127.0.0.1:*",
             "--log-level", "warning"], stdout=subprocess.PIPE, text=True)
        processes.append(coordinator)
        bus = re.search(r"bus=(\S+)", coordinator.stdout.readline()).group(1)
        roles = {"coordinator": [coordinator.pid], "agents": [], "workers": []}
        for index in range(2):
            worker = subprocess.Popen(
                [options.skillbus, "worker", "--name", f"bench-{index}", "--coordinator", bus, "--log-level",
                 "warning", "--data-dir", f"{directory}/worker-{index}"], stdout=subprocess.DEVNULL)
            processes.append(worker)
            roles["workers"].append(worker.pid)
        say = {"intent": "^say (?<word>\\w+)$", "skill": "echo", "params": {"text": "{word}"}, "reply": "{result}"}
        for name in AGENTS:
            path = f"{directory}/{name}.json"
            config = {"version": 1, "name": name, "skills": ["echo"], "planner": {"rules": [say]},
                      "dataDir": f"{directory}/{name}-data"}
            pathlib.Path(path).write_text(json.dumps(config))
            agent = subprocess.Popen(
                [options.skillbus, "worker", "--config", path, "--coordinator", bus, "--log-level", "warning"],
                stdout=subprocess.DEVNULL)
            processes.append(agent)
            roles["agents"].append(agent.pid)
        client = skillbus.Client(bus)
        asks = {"asks": {"agents": AGENTS, "message": "say hello", "aggregate": "all"}}

        def one() -> None:
            if options.mode == "asks":
                client.round(asks)
            elif options.mode == "asks3":
                for call in [client.start_ask("say hello", agent=agent) for agent in AGENTS]:
                    call.result()
            elif options.mode == "ask":
                client.ask("say hello", agent=AGENTS[1])
            else:
                client.invoke("echo", {"text": "x" * 100})

        deadline = time.monotonic() + 30
        while True:  # until every agent answers
            try:
                client.round(asks)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(200):
            one()
        # PERF=FILE records the samples of one role's processes (PERF_ROLE, default the coordinator; perf record
        # -g) during the measured rounds.
        recorder = None
        if os.environ.get("PERF"):
            pids = ",".join(map(str, roles[os.environ.get("PERF_ROLE", "coordinator")]))
            recorder = subprocess.Popen(
                ["perf", "record", "-g", "-q", "-o", os.environ["PERF"], "-p", pids],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(recorder)
        before = {role: sum(map(cpu_seconds, pids)) for role, pids in roles.items()}
        count, started = 0, time.monotonic()
        while time.monotonic() < started + options.seconds and count < 100_000:
            one()
            count += 1
        elapsed = time.monotonic() - started
        after = {role: sum(map(cpu_seconds, pids)) for role, pids in roles.items()}
        if recorder:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
        per_round = {role: round((after[role] - before[role]) / count * 1e6) for role in roles}
        print(f"{options.mode}: {count} in {elapsed:.1f} s, {elapsed / count * 1e6:.0f} us each; "
              f"CPU us per round: {per_round}, total {sum(per_round.values())}")
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait()


if __name__ == "__main__":
    main()
