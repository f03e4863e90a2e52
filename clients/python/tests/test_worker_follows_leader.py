"""A worker and a replica of a coordinator group (PROTOCOL §4.4 item 6, §7 "Following the leader of a group"):
refusals followed to the leader, a silent coordinator left for the next, and a leader killed by its PID."""

from __future__ import annotations

import json
import os
import re
import threading

import pytest

from conftest import BINARY, FakeBus, wait_until
from skillbus import Client, Param, Replica, Worker
from test_follow_leader import free_endpoint, start_standby


def echo_worker(name: str, coordinator, **options) -> Worker:
    worker = Worker(name, coordinator=coordinator, heartbeat_ms=200, **options)

    @worker.skill("py.echo", params=[Param("text", "string")])
    def echo(text):
        return text

    return worker


def moves_in(log: str) -> list[str]:
    return [line for line in log.splitlines() if "moving from coordinator" in line or "does not serve" in line]


@pytest.mark.parametrize("given", ["list", "single"])
def test_a_worker_sent_to_a_standby_registers_with_the_leader(cluster, capsys, given):
    standby, standby_bus = start_standby(cluster, "--leader-bus", cluster.bus, "--leader-feed", cluster.feed)
    worker = echo_worker("py-follower", [standby_bus, cluster.bus] if given == "list" else standby_bus)
    with worker:
        worker.wait_registered()
        cluster.wait_joined("py-follower")
        assert worker.coordinator == cluster.bus
        with Client(cluster.bus, timeout=10) as client:
            assert client.request("py.echo", {"text": "led"}).value == "led"
        assert worker.replica.wait_for(lambda replica: "py-follower" in replica.entries())
    assert any(line.startswith("refused SKB2W READY") for line in standby.lines)
    assert moves_in(capsys.readouterr().err) == [
        f"skillbus worker 'py-follower': moving from coordinator {standby_bus} to {cluster.bus}: "
        f"{standby_bus} it is a standby; the leader is at {cluster.bus}"]


def test_a_standby_that_knows_no_leader_sends_the_worker_to_the_next(cluster, capsys):
    _, standby_bus = start_standby(cluster, "--no-leader")
    with echo_worker("py-next", f"{standby_bus},{cluster.bus}") as worker:
        worker.wait_registered()
        assert worker.coordinator == cluster.bus
    assert f"{standby_bus} it is a standby and knows no leader" in capsys.readouterr().err


def test_a_coordinator_that_refuses_the_connection_is_left_at_once(cluster, capsys):
    dead = free_endpoint()
    with echo_worker("py-refused", [dead, cluster.bus]) as worker:
        worker.wait_registered()
        assert worker.coordinator == cluster.bus
    moves = moves_in(capsys.readouterr().err)
    assert len(moves) == 1 and moves[0].startswith(f"skillbus worker 'py-refused': moving from coordinator {dead} to "
                                                    f"{cluster.bus}: {dead} "), moves
    if os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq":  # pyzmq's DEALER never says: the worker waits for silence
        assert moves[0].endswith(f"{dead} no connection could be made"), moves


def test_bad_coordinator_and_feed_lists_are_named():
    with pytest.raises(ValueError, match=re.escape("coordinator: entry 2 of 'tcp://a:1,tcp://b': 'tcp://b' has no port")):
        Worker("w", coordinator="tcp://a:1,tcp://b")
    with pytest.raises(ValueError, match=re.escape("feed: 'tcp://a:1,tcp://a:1' names 'tcp://a:1' twice")):
        Worker("w", coordinator="tcp://a:1", feed="tcp://a:1,tcp://a:1")
    with pytest.raises(ValueError, match=re.escape("feed: entry 1 of ',tcp://a:1' is empty")):
        Replica(",tcp://a:1", coordinator="tcp://a:2")


WELCOME = json.dumps({"accepted": ["py.wait", "py.echo"], "epoch": "e1", "feed": "", "heartbeatMs": 100,
                      "refused": []}).encode()


def test_a_silent_coordinator_is_left_and_what_it_dispatched_is_answered_nowhere(capsys):
    first, second = FakeBus(), FakeBus()
    worker = Worker("py-mover", coordinator=[first.endpoint, second.endpoint], heartbeat_ms=100, replica=False)
    started, ended = threading.Event(), threading.Event()

    @worker.skill("py.wait", params=[Param("text", "string")])
    def wait(text, context):
        started.set()
        try:
            context.sleep(10)  # until cancelled
        finally:
            ended.set()
        return text

    @worker.skill("py.echo", params=[Param("text", "string")])
    def echo(text):
        return text

    try:
        worker.start()
        first.receive(b"READY")
        first.send(b"WELCOME", WELCOME)
        first.invoke(b"left-1", b"py.wait")
        assert started.wait(5)
        # `first` says nothing more: after 3 heartbeats of 100 ms the worker moves, cancelling what `first` sent.
        ready = second.receive(b"READY", timeout_ms=5000)
        assert json.loads(ready[2])["name"] == "py-mover"
        assert ended.wait(5)
        second.send(b"WELCOME", WELCOME)
        second.invoke(b"new-1", b"py.echo", b'{"text":"here"}')
        # The fake bus sends no heartbeats, so the worker will leave it too: the first RESULT must be new-1's.
        results = (fields for command, fields in (second.next_message() for _ in range(10)) if command == b"RESULT")
        assert next(results)[:2] == [b"new-1", b"ok"]
    finally:
        worker.stop()
        first.close()
        second.close()
    assert moves_in(capsys.readouterr().err)[0] == (
        f"skillbus worker 'py-mover': moving from coordinator {first.endpoint} to {second.endpoint}: "
        f"{first.endpoint} nothing came from it for 300 ms (3 heartbeats of 100 ms)")


def test_a_worker_and_a_replica_follow_when_the_leader_is_killed(cluster, capsys):
    """The second coordinator starts on its endpoints once the first is killed, as a standby takes over: before
    that, only the first publishes on the feeds the replica listens to."""
    second_bus, second_feed = free_endpoint(), free_endpoint()
    worker = echo_worker("py-survivor", [cluster.bus, second_bus])
    replica = Replica([cluster.feed, second_feed], coordinator=f"{cluster.bus},{second_bus}")
    try:
        worker.start()
        worker.wait_registered()
        cluster.wait_joined("py-survivor")
        assert replica.wait_for(lambda r: "py-survivor" in r.entries())
        first_epoch = replica.position()["epoch"]

        cluster.coordinator.popen.kill()  # by its PID: SIGKILL
        cluster.coordinator.popen.wait(10)
        second = cluster._start([BINARY, "coordinator", "--bus", second_bus, "--feed", second_feed,
                                 "--heartbeat-ms", "200"], "second coordinator")
        second.wait_for_line(lambda line: "agent 'py-survivor' joined" in line, "the worker joining", timeout=10)
        assert worker.coordinator == second_bus
        with Client(second_bus, timeout=10) as client:
            assert client.request("py.echo", {"text": "again"}).value == "again"
        assert replica.wait_for(lambda r: "py-survivor" in r.entries() and r.position()["epoch"] != first_epoch)
        wait_until(lambda: worker.replica is not None and worker.replica.synced, "the worker's new replica")
    finally:
        replica.stop()
        worker.stop()
    # The own DEALER sees the connection close: no 3 heartbeats of silence first (pyzmq's says nothing).
    why = "nothing came from it for" if os.environ.get("SKILLBUS_PY_ENGINE") == "libzmq" else "its connection closed"
    assert f"moving from coordinator {cluster.bus} to {second_bus}: {cluster.bus} {why}" in capsys.readouterr().err
