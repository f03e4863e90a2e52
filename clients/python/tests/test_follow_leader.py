"""A client of a coordinator group (PROTOCOL §3.3): a list of endpoints, and `not_leader` refusals followed to the
leader, against the real coordinator and a stand-in standby (Tests/interop/fake_standby.py)."""

from __future__ import annotations

import os
import re
import sys
import time

import pytest
import zmq

from conftest import BINARY, REPO, Process
from skillbus import Client, SkillbusError
from skillbus.client import SILENCE_S, CoordinatorChoice, backoff, coordinator_endpoints

FAKE_STANDBY = str(REPO / "Tests" / "interop" / "fake_standby.py")


def start_standby(cluster, *arguments: str) -> tuple[Process, str]:
    """A fake standby naming the cluster's coordinator (or, with --no-leader, none); returns it and its bus."""
    standby = cluster._start([sys.executable, "-u", FAKE_STANDBY, *arguments], "fake standby")
    ready = standby.wait_for_line(lambda line: line.startswith("fake standby ready:"), "the ready line")
    return standby, re.search(r"bus=(\S+)", ready).group(1)


@pytest.mark.parametrize(
    "given, problem",
    [
        ("tcp://a:1,tcp://b", "entry 2 of 'tcp://a:1,tcp://b': 'tcp://b' has no port"),
        ("tcp://a:1,", "entry 2 of 'tcp://a:1,' is empty"),
        (["tcp://a:1", "tcp://a:1"], "names 'tcp://a:1' twice"),
        ("http://a:1", "'http://a:1' is not a ZeroMQ endpoint"),
        ([], "no endpoint given"),
    ],
)
def test_bad_lists_name_the_entry(given, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        coordinator_endpoints(given)


def test_lists_and_choice_without_sockets():
    assert coordinator_endpoints(" tcp://a:1 , tcp://b:2") == ["tcp://a:1", "tcp://b:2"]
    assert coordinator_endpoints(["tcp://a:1"]) == ["tcp://a:1"]
    assert [backoff(moves) for moves in range(8)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    choice = CoordinatorChoice(["tcp://a:1", "tcp://b:1"])
    assert choice.refused("tcp://c:1", 10.0) == ("tcp://a:1", "tcp://c:1")  # a leader outside the list is added
    assert choice.endpoints == ["tcp://a:1", "tcp://b:1", "tcp://c:1"] and choice.not_before == 10.0
    assert choice.refused("tcp://c:1", 10.0) is None  # a late refusal naming where it is already: nothing moves
    assert choice.refused(None, 10.0) == ("tcp://c:1", "tcp://a:1")  # none named: the next, after the last the first
    assert choice.not_before == pytest.approx(10.1)
    choice.answered()
    assert choice.moves_without_answer == 0


def test_a_standby_first_sends_the_client_to_the_leader(cluster):
    cluster.swift_worker("w1", "--skills", "echo")
    standby, standby_bus = start_standby(cluster, "--leader-bus", cluster.bus, "--leader-feed", cluster.feed)
    calls = [
        lambda client: client.request("echo", {"text": "hi"}).value == "hi",
        lambda client: client.invoke("echo", {"text": "round"}).status == "ok",
        lambda client: any(agent["agent"] == "w1" for agent in client.agents()["agents"]),
    ]
    for coordinators in ([standby_bus, cluster.bus], standby_bus, f"{standby_bus},{cluster.bus}"):
        for call in calls:  # each on a new client, so that each goes to the standby first
            with Client(coordinators, timeout=10) as client:
                assert call(client)
                assert client.coordinator == cluster.bus
    assert any(line.startswith("refused SKB2C REQUEST") for line in standby.lines)
    assert any(line.startswith("refused SKB2C ROUND") for line in standby.lines)
    assert any(line.startswith("refused SKB2C AGENTS") for line in standby.lines)


def test_a_standby_that_knows_no_leader_sends_it_to_the_next(cluster):
    cluster.swift_worker("w1", "--skills", "echo")
    standby, standby_bus = start_standby(cluster, "--no-leader")
    with Client([standby_bus, cluster.bus], timeout=10) as client:
        assert client.request("echo", {"text": "next"}).value == "next"


def free_endpoint() -> str:
    """A loopback endpoint nobody listens on (bound, then closed)."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind("tcp://127.0.0.1:*")
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    sock.close(linger=0)
    return endpoint


def test_a_dead_first_endpoint_is_left_for_the_next(cluster):
    cluster.swift_worker("w1", "--skills", "echo")
    dead = free_endpoint()
    started = time.monotonic()
    with Client([dead, cluster.bus], timeout=10) as client:
        assert client.invoke("echo", {"text": "over"}).status == "ok"  # a ROUND goes again where the client moves
        assert client.coordinator == cluster.bus
        assert any(agent["agent"] == "w1" for agent in client.agents()["agents"])
    took = time.monotonic() - started
    print(f"fell over from a dead endpoint in {took:.2f} s")
    # The own DEALER hears the refusal, so the client leaves without the probe and its second of silence.
    assert took < (5 if os.environ.get("SKILLBUS_PY_ENGINE") == "libzmq" else SILENCE_S), took


def test_choice_probes_then_leaves_a_silent_coordinator():
    choice = CoordinatorChoice(["tcp://a:1", "tcp://b:1"])
    assert choice.tick(False, 0.0) == "nothing"
    assert choice.tick(True, 0.0) == "probe"
    assert choice.next_tick(True) == 1.0
    assert choice.tick(True, 0.5) == "nothing"
    assert choice.tick(True, 1.0) == "move"
    assert choice.leave(1.0) == ("tcp://a:1", "tcp://b:1")
    assert choice.tick(True, 1.0) == "probe"  # b is probed at once; it answers, and is left alone for a second
    choice.heard(1.01)
    assert choice.tick(True, 1.5) == "nothing" and choice.tick(True, 2.02) == "probe"
    single = CoordinatorChoice(["tcp://a:1"])
    assert single.tick(True, 0.0) == "nothing" and single.tick(True, 60.0) == "nothing"


def test_a_group_client_leaves_a_killed_coordinator_at_once(cluster):
    """The own DEALER sees the connection close, so the next call goes to the next coordinator without the probe
    and the second of silence a pyzmq DEALER's client needs (SILENCE_S twice)."""
    cluster.swift_worker("w1", "--skills", "echo")
    second_bus = free_endpoint()
    second = cluster._start([BINARY, "coordinator", "--bus", second_bus, "--feed", free_endpoint()], "second")
    second.wait_for_line(lambda line: line.startswith("skillbus coordinator ready:"), "the second's ready line")
    cluster._start([BINARY, "worker", "--name", "w2", "--skills", "echo", "--coordinator", second_bus], "w2")
    second.wait_for_line(lambda line: "agent 'w2' joined" in line, "w2 joining the second")
    with Client([cluster.bus, second_bus], timeout=10) as client:
        assert client.invoke("echo", {"text": "first"}).agent == "w1"
        cluster.coordinator.popen.kill()  # by its PID: SIGKILL
        cluster.coordinator.popen.wait(10)
        started = time.monotonic()
        assert client.invoke("echo", {"text": "second"}).agent == "w2"
        took = time.monotonic() - started
    print(f"a killed coordinator left in {took:.2f} s")
    if os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq":
        assert took < 2 * SILENCE_S, took


def test_no_leader_anywhere_ends_at_the_timeout_naming_every_endpoint(cluster):
    _, first = start_standby(cluster, "--no-leader")
    _, second = start_standby(cluster, "--no-leader")
    started = time.monotonic()
    with Client([first, second], timeout=1.5) as client:
        with pytest.raises(SkillbusError) as raised:
            client.request("echo", {"text": "nobody"})
    assert raised.value.code == "unreachable"
    assert first in raised.value.message and second in raised.value.message
    assert "no leader is known" in raised.value.message
    assert time.monotonic() - started < 5
