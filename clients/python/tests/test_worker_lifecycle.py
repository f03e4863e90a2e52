"""A Python worker's life on the bus: heartbeats, graceful stop, skills changed at run time, its
registry replica (§8), and the README's ten-line worker."""

import os
import re
import signal
import threading
import time

import pytest

from skillbus import Client, Replica, SkillbusError, Worker

from conftest import REPO, wait_until

EXAMPLE = REPO / "clients" / "python" / "examples" / "words_worker.py"


def only_worker(cluster, name="pyonly"):
    worker = Worker(name, coordinator=cluster.bus, heartbeat_ms=200)

    @worker.skill("py.only", params={})
    def only():
        return "here"

    return worker


def test_a_worker_whose_coordinator_nothing_listens_at_says_so():
    nobody = "tcp://127.0.0.1:1"  # nothing listens on port 1
    with Worker("py-alone", coordinator=nobody) as worker:
        with pytest.raises(SkillbusError) as unreachable:
            worker.wait_registered(0.5)
    assert unreachable.value.code == "unreachable"
    assert unreachable.value.message.startswith("worker 'py-alone' got no WELCOME within 0.5 s")
    if os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq":  # pyzmq's DEALER does not say a connect was refused
        assert unreachable.value.message.endswith(
            f": nothing listens at {nobody} (the connection is refused: is the coordinator running?)")


def test_graceful_stop_takes_the_skills_out_of_the_registry_at_once(cluster, client):
    worker = only_worker(cluster).start()
    worker.wait_registered()
    cluster.wait_joined("pyonly")
    watcher = Replica(cluster.feed, coordinator=cluster.bus)
    try:
        assert watcher.wait_for(lambda r: "py.only" in r.skills())
        # Heartbeats keep it registered well past 3 missed intervals (3 × 200 ms).
        assert not watcher.wait_for(lambda r: "py.only" not in r.skills(), timeout=1.0)
        assert client.request("py.only").value == "here"

        started = time.monotonic()
        worker.stop()
        assert "left: disconnected" in cluster.wait_left("pyonly")  # DISCONNECT, not a missed heartbeat
        assert watcher.wait_for(lambda r: "py.only" not in r.skills() and "pyonly" not in r.entries(), timeout=2)
        assert time.monotonic() - started < 0.6 * 3  # sooner than the bus would notice a silent worker
    finally:
        watcher.stop()
    code, document = cluster.send_json("py.only")
    assert code == 2 and document["error"]["code"] == "unknown_skill"


def test_stop_cancels_running_invocations_and_answers_them(cluster, start_worker, client):
    worker = Worker("pyslow", coordinator=cluster.bus, heartbeat_ms=200)
    running = threading.Event()

    @worker.skill("py.slow", params={})
    def slow(context):
        running.set()
        context.sleep(30)
        return "never"

    start_worker(worker)
    call = client.start_request("py.slow")
    assert running.wait(5)
    worker.stop()
    with pytest.raises(SkillbusError) as stopped:
        call.result()
    assert stopped.value.code == "cancelled" and stopped.value.message == "'py.slow' was cancelled"


def test_skills_declared_at_run_time_reach_the_registry(cluster, start_worker, client):
    worker = start_worker(only_worker(cluster))

    @worker.skill("py.later", params={"n": "integer"})
    def later(n):
        return n + 1

    assert worker.replica.wait_for(lambda r: r.skills().get("py.later", {}).get("providers") == ["pyonly"])
    assert client.request("py.later", {"n": 41}).value == 42
    worker.remove_skill("py.later")
    assert worker.replica.wait_for(lambda r: "py.later" not in r.skills())
    with pytest.raises(KeyError, match="offers no skill 'py.later'"):
        worker.remove_skill("py.later")


def test_the_replica_converges_with_the_bus_and_says_so_in_its_heartbeats(cluster, start_worker, client):
    cluster.swift_worker("alpha", "--skills", "echo,math.eval")
    worker = start_worker(only_worker(cluster))
    replica = worker.replica
    assert replica.wait_for(lambda r: set(r.entries()) == {"alpha", "pyonly"})
    # Started after the Python worker: the replica must follow live updates, not only its snapshot.
    cluster.swift_worker("beta", "--skills", "echo,text.stats")
    gamma = cluster.swift_worker("gamma", "--skills", "file.read")
    assert replica.wait_for(lambda r: set(r.entries()) == {"alpha", "beta", "gamma", "pyonly"})
    gamma.stop()
    assert replica.wait_for(lambda r: set(r.entries()) == {"alpha", "beta", "pyonly"})

    swift = cluster.registry()
    position = replica.position()
    assert (position["epoch"], position["seq"], position["digest"]) == (swift["epoch"], swift["seq"], swift["digest"])
    assert [replica.entries()[e["agent"]] for e in swift["agents"]] == swift["agents"]
    assert sorted(replica.skills()) == [s["identifier"] for s in swift["skills"]]
    assert replica.snapshots == 1  # nothing was missed, so no snapshot was taken again

    # Its HEARTBEAT frame 3 carries that position: the bus lists it in sync.
    def listed():
        return next(a for a in client.agents()["agents"] if a["agent"] == "pyonly")

    wait_until(lambda: listed().get("registryInSync"), "the bus to list the Python replica in sync")
    assert listed()["registry"] == position


def test_after_a_coordinator_restart_the_worker_registers_again_and_its_replica_follows(cluster, start_worker, capsys):
    worker = start_worker(only_worker(cluster))
    assert worker.replica.wait_for(lambda r: "pyonly" in r.entries())
    epoch = worker.replica.position()["epoch"]

    cluster.restart_coordinator()
    cluster.wait_joined("pyonly")  # its heartbeats got not_registered, or the bus fell silent: READY again
    assert worker.replica.wait_for(lambda r: r.position()["epoch"] != epoch and "pyonly" in r.entries())
    assert worker.replica.snapshots == 2
    with Client(cluster.bus) as client:
        assert client.request("py.only").value == "here"
    if os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq":  # the own DEALER sees its connection close
        assert "the connection to the bus closed: registering again" in capsys.readouterr().err


def test_the_readme_worker_in_ten_lines_runs_as_written(cluster):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## A worker in Python in ten lines", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert block == EXAMPLE.read_text(), "the README's example and examples/words_worker.py differ"
    assert len(block.strip().splitlines()) <= 12

    worker = cluster.python(str(EXAMPLE), "words worker")
    cluster.wait_joined("py-words")
    # It says what it offers and where as it starts, as `skillbus worker` does (it used to print nothing).
    worker.wait_for_line(lambda line: "worker 'py-words': connecting to " + cluster.bus in line
                         and "py.words" in line, "the start line")
    worker.wait_for_line(lambda line: "worker 'py-words': registered" in line, "the registered line")
    code, lines = cluster.skillbus("send", "py.words", "text=to be or not", "--stream", "--coordinator", cluster.bus)
    assert code == 0
    streamed = [line for line in lines if line.startswith('{"event":"output"')]
    assert streamed and all('"invocation":"py.words"' in line for line in streamed)
    assert '"result":{"json":{"words":4},"type":"json"}' in lines[-1]
    assert '"output":[{"text":"to","type":"text"},{"text":"be","type":"text"}' in lines[-1]

    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert "left: disconnected" in cluster.wait_left("py-words")
    assert any("worker 'py-words': left the bus" in line for line in worker.lines)
