"""A Python agent in the team of configs/team.json (PROTOCOL §3.7, §3.7.1, §3.7.2, §3.5.10): the Swift
agents ask it, it asks them, it hands over to them, and a team round asks all of them."""

import json
import re
import threading
import time

import pytest
import zmq

from skillbus import Client, Handoff, Progress, SkillbusError, TurnFailed, Worker

from conftest import REPO, Cluster, FakeBus

ORACLE_RULE = {"intent": "^oracle (?<q>.+)$", "ask": "role:oracle", "message": "{q}", "reply": "oracle says: {result}"}


def team_configs(directory):
    """Per-worker config files from configs/team.json; the lead's copy also asks the oracle."""
    team = json.loads((REPO / "configs" / "team.json").read_text())
    paths = {}
    for worker in team["workers"]:
        config = {"version": 1, **worker}
        if worker["name"] == "lead":
            config["planner"] = {"rules": [*worker["planner"]["rules"], ORACLE_RULE]}
        paths[worker["name"]] = directory / f"{worker['name']}.json"
        paths[worker["name"]].write_text(json.dumps(config))
    return paths


class Oracle:
    """The Python agent's planner: sums with math.eval, reviews with text.stats and the critic, hands
    complaints to support, waits for a cancel when told to; it keeps the team context of each turn."""

    def __init__(self):
        self.teams = []

    def __call__(self, message, team, turn):
        self.teams.append(team)
        if asked := re.fullmatch(r"what is (.+)", message):
            value = turn.call("math.eval", {"expression": asked[1]}).value["value"]
            return f"{asked[1]} is {value}"
        if asked := re.fullmatch(r"review (.+)", message):
            words = turn.call("text.stats", {"text": asked[1]}).value["words"]
            return f"{words} words; the critic says: {turn.ask('role:critic', f'critique {asked[1]}')}"
        if re.search("complain|refund|broken", message):
            return Handoff("role:support", "the user has a complaint")
        if message == "wait for a cancel":
            turn.cancelled.wait(20)
            turn.check_cancelled()
        raise SkillbusError("invalid_parameters", f"the oracle cannot answer {message!r}")


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """A coordinator, the four Swift agents of configs/team.json and the Python oracle, for every test here."""
    directory = tmp_path_factory.mktemp("team")
    cluster = Cluster(directory)
    planner = Oracle()
    oracle = Worker("oracle", coordinator=cluster.bus, heartbeat_ms=200, planner=planner, role="oracle",
                    description="Answers sums and reviews, in Python")
    client = None
    try:
        for name, path in team_configs(directory).items():
            cluster.swift_worker(name, "--config", str(path))
        oracle.start()
        oracle.wait_registered()
        cluster.wait_joined("oracle")
        assert oracle.replica.wait_for(lambda r: len(r.entries()) == 5), "the oracle's replica never saw the team"
        client = Client(cluster.bus, timeout=10)
        feed = zmq.Context.instance().socket(zmq.SUB)
        feed.setsockopt(zmq.LINGER, 0)
        feed.connect(cluster.feed)
        for prefix in (b"request.", b"agent.state", b"registry.heartbeat"):
            feed.setsockopt(zmq.SUBSCRIBE, prefix)
        assert feed.poll(5000), "no registry.heartbeat on the feed"  # so the subscription is in place
        yield client, planner, feed
    finally:
        if client is not None:
            client.close()
            feed.close()
        oracle.stop()
        cluster.close()


def feed_until(feed, keep, done, what, timeout=10.0):
    """Reads the feed (§7), keeping the events `keep(event)` accepts, until `done(kept)` holds."""
    kept, deadline = [], time.monotonic() + timeout
    while not done(kept):
        assert feed.poll(max(0, int((deadline - time.monotonic()) * 1000))), f"no {what} on the feed: {kept}"
        event = json.loads(feed.recv_multipart()[1])
        if keep(event):
            kept.append(event)
    return kept


def single_flight(feed, round_id, skill):
    """The `request.*` events of `skill` in the round, read until a REQUEST of it was deduplicated (§3.4):
    (how many INVOKEs the bus sent for it, how many REQUESTs it answered from another)."""
    seen = feed_until(feed, lambda e: e.get("round") == round_id and e.get("skill") == skill,
                      lambda kept: any(e["type"] == "request.deduplicated" for e in kept), f"{skill} deduplicated")
    count = lambda kind: sum(1 for e in seen if e["type"] == kind)
    return count("request.dispatched"), count("request.deduplicated")


def test_the_registry_shows_the_python_agent_as_a_member_of_the_team(team):
    client = team[0]
    oracle = next(a for a in client.agents()["agents"] if a["agent"] == "oracle")
    assert (oracle["planner"], oracle["role"], oracle["description"]) == (True, "oracle", "Answers sums and reviews, in Python")


def test_a_swift_agent_delegates_to_the_python_agent(team):
    client, planner, feed = team
    turn = client.ask("oracle what is 6*7", agent="lead")
    assert turn.agent == "lead" and turn.reply.splitlines()[-1] == "oracle says: 6*7 is 42"
    asked = next(call for call in turn.calls if "ask" in call)
    assert asked["ask"] == {"to": "role:oracle", "message": "what is 6*7"}
    assert (asked["agent"], asked["status"], asked["result"]) == ("oracle", "ok", {"type": "text", "text": "6*7 is 42"})
    nested = asked["turn"]
    assert (nested["agent"], nested["role"], nested["parent"], nested["depth"]) == ("oracle", "oracle", turn.raw["turn"], 1)
    assert (nested["round"], nested["status"], nested["reply"]) == (turn.raw["round"], "ok", "6*7 is 42")
    assert [s["state"] for s in nested["states"]] == ["thinking", "executingSkill", "thinking", "completed"]
    # The lead ran its own math.eval of the same sum on itself, holding the round (§3.7): the oracle's
    # REQUEST took that outcome, and the bus sent no INVOKE.
    assert [(c["skill"], c["parameters"], c["agent"]) for c in nested["calls"]] == [("math.eval", {"expression": "6*7"}, "lead")]
    assert single_flight(feed, turn.raw["round"], "math.eval") == (0, 1)
    team_seen = planner.teams[-1]
    assert (team_seen.caller, team_seen.parent, team_seen.depth) == ("lead", turn.raw["turn"], 1)
    assert {a["agent"]: a.get("role") for a in team_seen.agents} == {
        "critic": "critic", "lead": "lead", "support": "support", "writer": "writer"}


def test_the_python_agent_delegates_to_a_swift_agent_and_shares_its_call(team):
    client, _, feed = team
    call = client.start_ask("review Skillbus runs agents", agent="oracle", progress=True)
    events = list(call.events())
    turn = call.result()
    assert turn.reply == "3 words; the critic says: 3 words; give an example."
    assert [(c.get("skill"), c.get("ask")) for c in turn.calls] == [
        ("text.stats", None), (None, {"to": "role:critic", "message": "critique Skillbus runs agents"})]
    ran, asked = turn.calls
    nested = asked["turn"]
    assert (asked["agent"], nested["agent"], nested["parent"], nested["depth"]) == ("critic", "critic", turn.raw["turn"], 1)
    # One execution: the critic's identical text.stats in the same round took the oracle's outcome.
    assert [(c["skill"], c["agent"], c["result"]) for c in nested["calls"]] == [("text.stats", ran["agent"], ran["result"])]
    assert single_flight(feed, turn.raw["round"], "text.stats") == (1, 1)
    # PROGRESS: the oracle's own states and calls (no `depth`), and the critic's nested ones (depth 1).
    own = [e for e in events if isinstance(e, Progress) and "depth" not in e.body]
    states = [e.body for e in own if e.kind == "state"]
    assert [s["state"] for s in states] == [
        "thinking", "executingSkill", "thinking", "delegating", "thinking", "completed"]
    assert states[1]["parameters"] == {"text": "Skillbus runs agents"} and states[3]["to"] == "role:critic"
    assert [e.body for e in own if e.kind == "call"] == turn.calls
    assert {(e.agent, e.body["depth"]) for e in events if isinstance(e, Progress) and e not in own} == {("critic", 1)}


def test_the_python_agent_hands_the_session_over_to_support(team):
    client = team[0]
    turn = client.ask("my order is broken", agent="oracle", session="complaint-1")
    assert (turn.agent, turn.reply) == ("support", "Support here: I opened a ticket.")
    handed = turn.raw["handedOverBy"]
    assert (handed["agent"], handed["note"]) == ("oracle", "the user has a complaint")
    assert handed["turn"]["handoff"] == {"to": "role:support", "note": "the user has a complaint"}
    assert handed["turn"]["reply"] is None and handed["turn"]["states"][-1]["state"] == "completed"
    # Support is the session's agent now: an ASK that names nobody goes to it.
    assert client.ask("I want a refund", session="complaint-1").agent == "support"


def test_a_python_turn_fails_is_cancelled_and_runs_out_of_time(team):
    client, _, feed = team
    with pytest.raises(TurnFailed) as refused:
        client.ask("sing", agent="oracle")
    assert (refused.value.code, refused.value.message) == ("invalid_parameters", "the oracle cannot answer 'sing'")
    assert refused.value.turn.raw["error"]["code"] == "invalid_parameters"
    assert refused.value.turn.states[-1] == {**refused.value.turn.states[-1], "state": "failed",
                                             "reason": "the oracle cannot answer 'sing'"}

    # After a turn the agent says its own state again (§4.10): idle.
    ended = {"state": "failed", "turn": refused.value.turn.raw["turn"]}

    def idle_after_the_turn(kept):
        last = next((i for i, e in enumerate(kept) if ended.items() <= e.items()), None)
        return last is not None and len(kept) > last + 1 and kept[last + 1]["state"] == "idle"

    states = feed_until(feed, lambda e: e["type"] == "agent.state" and e["agent"] == "oracle", idle_after_the_turn,
                        "the oracle idle after its turn")
    assert "turn" not in states[-1] and "session" not in states[-1]

    call = client.start_ask("wait for a cancel", agent="role:oracle", progress=True)
    for event in call.events():
        if isinstance(event, Progress) and event.body["state"] == "thinking":
            call.cancel()
    with pytest.raises(TurnFailed) as cancelled:
        call.result()
    assert (cancelled.value.code, cancelled.value.message) == ("cancelled", "the turn was cancelled")
    assert cancelled.value.turn.states[-1]["reason"] == "the turn was cancelled"

    # A planner still busy at the deadline: the bus answers `timeout`, and the agent ends the turn then too.
    with pytest.raises(TurnFailed) as late:
        client.ask("wait for a cancel", agent="oracle", timeout=0.5)
    assert late.value.code == "timeout"
    feed_until(feed, lambda e: e["type"] == "agent.state" and e["agent"] == "oracle" and e["state"] == "failed",
               lambda kept: any(e["reason"] == "the turn ran out of time after 0 skill call(s)" for e in kept),
               "the oracle's turn out of time")


def test_team_rounds_from_the_python_client_ask_the_python_agent_too(team):
    client = team[0]
    document = client.round({"asks": {"agents": ["oracle", "lead", "writer", "critic"], "message": "what is 6*7",
                                      "aggregate": "majority"}})
    assert document.status == "ok" and document.result == {"type": "text", "text": "6*7 is 42"}
    assert document.raw["aggregate"]["votes"] == 4  # "6*7 IS 42" of the critic agrees, lower-cased
    asks = {i["id"]: i for i in document.invocations if i["skill"] == ""}
    assert asks["oracle"]["turn"]["agent"] == "oracle" and asks["oracle"]["turn"]["role"] == "oracle"
    sums = [i for i in document.invocations if i["id"].startswith("sub-")]
    assert len(sums) == 4 and [i["deduplicated"] for i in sums].count(False) == 1

    critique = client.round({"asks": {"role": "critic", "message": "critique Skillbus runs agents"}})
    assert critique.status == "ok" and critique.result == [
        {"agent": "critic", "error": None, "result": {"type": "text", "text": "3 words; give an example."}, "status": "ok"}]
    oracle = client.round({"ask": {"role": "oracle", "message": "what is 2+3"}})
    assert (oracle.status, oracle.agent, oracle.result) == ("ok", "oracle", {"type": "text", "text": "2+3 is 5"})


def test_the_wire_of_a_python_turn(tmp_path):
    """READY with planner, role and description (§5.1); a TURN with a team field (§4.2) answered by RELEASE (it
    held its round), STATEs of the turn, TURNEND with its document (§5.18), then the agent's own state; bad TURNs
    refused."""
    bus = FakeBus()
    hold, seen_cancel = threading.Event(), threading.Event()

    def planner(message, team, turn):
        if hold.is_set() and turn.cancelled.wait(10):
            seen_cancel.set()
        return f"{message} from {team.caller}"

    worker = Worker("solo", coordinator=bus.endpoint, heartbeat_ms=200, replica=False, role="oracle",
                    description="Replies", planner=planner)
    try:
        worker.start()
        ready = json.loads(bus.receive(b"READY")[2])
        assert (ready["planner"], ready["role"], ready["description"]) == (True, "oracle", "Replies")
        bus.send(b"WELCOME", json.dumps({"accepted": [], "refused": [], "feed": "", "epoch": "e",
                                         "heartbeatMs": 200}).encode())
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])  # a WELCOME forgets the state sent
        handing = {"turn": "t1", "agent": "lead", "reply": None}
        team = {"parent": "t1", "caller": "lead", "depth": 1, "handoff": {"from": "lead", "note": "n", "turn": handing}}
        bus.send(b"TURN", b"t2", b"r", b"s", b"5000", b"hi", b"1", json.dumps(team).encode())
        assert bus.next_message() == (b"RELEASE", [b"t2"])  # it holds the round (field 7): given back at once
        assert [json.loads(bus.next_message()[1][0]) for _ in range(2)] == [
            {"state": "thinking", "session": "s", "turn": "t2"}, {"state": "completed", "session": "s", "turn": "t2"}]
        command, (turn_id, status, body) = bus.next_message()
        document = json.loads(body)
        assert (command, turn_id, status, document["reply"], document["status"]) == (b"TURNEND", b"t2", b"ok", "hi from lead", "ok")
        assert (document["agent"], document["role"], document["parent"], document["depth"]) == ("solo", "oracle", "t1", 1)
        assert document["handedOverBy"] == {"agent": "lead", "note": "n", "turn": handing}
        assert [s["state"] for s in document["states"]] == ["thinking", "completed"] and document["calls"] == []
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])

        bus.send(b"TURN", b"t3", b"r", b"s", b"soon", b"hi", b"")
        assert bus.next_message() == (b"TURNEND", [b"t3", b"error", json.dumps({
            "code": "malformed_message", "message": "TURN needs an integer deadline (field 5) and an object as field 8"},
            separators=(",", ":")).encode()])
        bus.send(b"TURN", b"t4", b"r", b"s", b"5000", b"hi", b"", b"[1]")
        assert json.loads(bus.next_message()[1][2])["code"] == "malformed_message"

        hold.set()  # the planner now waits for the turn's cancellation: the worker leaves meanwhile
        bus.send(b"TURN", b"t5", b"r", b"", b"5000", b"hi", b"")
        assert json.loads(bus.next_message()[1][0])["state"] == "thinking"
        worker.stop()
        failed, (command, (_, status, body)) = json.loads(bus.next_message()[1][0]), bus.next_message()
        assert failed == {"reason": "agent 'solo' is shutting down", "session": "", "state": "failed", "turn": "t5"}
        assert (command, status, json.loads(body)["code"]) == (b"TURNEND", b"error", "agent_lost")
        assert bus.next_message() == (b"DISCONNECT", [])
        assert seen_cancel.wait(5)
    finally:
        worker.stop()
        bus.close()
