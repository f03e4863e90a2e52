"""What a Python skill can rely on: capacity and concurrency, confirmation, and sub-calls."""

import threading

import pytest

from skillbus import Param, SkillbusError, Worker

from conftest import wait_until


class Gate:
    """Counts the invocations inside a skill and holds them until the test opens it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = self.most = 0
        self.open = threading.Event()

    def hold(self, context):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            if not self.open.wait(10):
                raise SkillbusError("timeout", "the test never opened the gate")
        finally:
            with self.lock:
                self.inside -= 1
        return "through"


def test_capacity_and_concurrency_bound_what_runs_at_once(cluster, start_worker, client):
    worker = Worker("pyheld", coordinator=cluster.bus, capacity=2, heartbeat_ms=200)
    wide, narrow = Gate(), Gate()
    worker.skill("py.wide", params={})(lambda context: wide.hold(context))
    worker.skill("py.narrow", params={}, concurrency=1)(lambda context: narrow.hold(context))
    start_worker(worker)

    calls = [client.start_request("py.wide") for _ in range(3)]
    wait_until(lambda: wide.inside == 2 and client.agents()["waiting"] == 1, "two running and one waiting")
    wide.open.set()
    assert [call.result().value for call in calls] == ["through"] * 3 and wide.most == 2

    calls = [client.start_request("py.narrow") for _ in range(2)]
    wait_until(lambda: narrow.inside == 1 and client.agents()["waiting"] == 1, "one running, one waiting its turn")
    narrow.open.set()
    assert [call.result().value for call in calls] == ["through"] * 2 and narrow.most == 1


def test_a_skill_that_needs_confirmation_runs_only_when_approved(cluster, start_worker):
    from skillbus import Client

    worker = Worker("pycareful", coordinator=cluster.bus, heartbeat_ms=200)
    asked = []

    @worker.skill("py.delete", params={"path": "string"}, confirm=True)
    def delete(path):
        return f"deleted {path}"

    start_worker(worker)
    with Client(cluster.bus, confirm=lambda skill, params: asked.append((skill, params)) or True) as yes:
        assert yes.request("py.delete", {"path": "a.txt"}).value == "deleted a.txt"
    assert asked == [("py.delete", {"path": "a.txt"})]
    with Client(cluster.bus) as no:
        with pytest.raises(SkillbusError) as refused:
            no.request("py.delete", {"path": "b.txt"})
    assert refused.value.code == "confirmation_required"


def test_sub_calls_in_a_round_go_through_the_bus(cluster, start_worker, client):
    cluster.swift_worker("swifty", "--skills", "text.stats")
    worker = Worker("pyreport", coordinator=cluster.bus, heartbeat_ms=200)

    @worker.skill("py.upper", params={"text": "string"})
    def upper(text):
        return text.upper()

    @worker.skill("py.report", params=[Param("text", "string")])
    def report(text, context):
        loud = context.call("py.upper", {"text": text})  # offered here, but in a round: a REQUEST too
        stats = context.call("text.stats", {"text": text})  # offered by a Swift agent: a REQUEST
        with pytest.raises(SkillbusError) as missing:
            context.call("no.such.skill", {})
        return {"loud": loud.value, "words": stats.value["words"], "missing": missing.value.code}

    start_worker(worker)
    assert worker.replica.wait_for(lambda r: "text.stats" in r.skills())
    document = client.invoke("py.report", {"text": "one two three"})
    assert document.result["json"] == {"loud": "ONE TWO THREE", "words": 3, "missing": "unknown_skill"}
    assert [(i["id"], i["skill"], i["agent"]) for i in document.invocations] == [
        ("py.report", "py.report", "pyreport"), ("sub-1", "py.upper", "pyreport"), ("sub-2", "text.stats", "swifty")]
