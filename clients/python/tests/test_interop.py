"""The package against the real Swift coordinator and workers: both ways, rounds, streaming, cancel."""

import json
import signal
import threading
import os
import time

import pytest

from skillbus import Cancelled, Client, Output, Param, RoundFailed, SkillbusError, Worker

from conftest import wait_until


def text_worker(name, cluster):
    """A Python worker with an `echo` of the Swift schema (so both can serve one fan-out), and more."""
    worker = Worker(name, coordinator=cluster.bus, capacity=4, heartbeat_ms=200)

    @worker.skill("echo", params=[Param("text", "string", description="Text to return")])
    def echo(text):
        return text

    @worker.skill("py.upper", params={"text": "string"}, description="Upper-cases text")
    def upper(text):
        return text.upper()

    @worker.skill("py.broken", params={})
    def broken():
        raise ZeroDivisionError("division by zero")

    @worker.skill("py.unjsonable", params={})
    def unjsonable():
        return {"value": object()}

    return worker


def test_a_python_worker_serves_the_swift_cli(cluster, start_worker):
    start_worker(text_worker("pyworker", cluster))
    code, document = cluster.send_json("py.upper", "text=hello")
    assert code == 0 and document["agent"] == "pyworker"
    assert document["result"] == {"text": "HELLO", "type": "text"}

    # It keeps no context store, and says so when asked about one (QUERY, §3.6).
    code, lines = cluster.skillbus("sessions", "--agent", "pyworker", "--coordinator", cluster.bus)
    assert code == 1 and lines == ["error: unsupported: agent 'pyworker' keeps no context store"]
    # Found live rather than named, it is listed with its error, also as the only agent.
    code, lines = cluster.skillbus("sessions", "--json", "--coordinator", cluster.bus)
    listed = json.loads(next(line for line in lines if line.startswith("{")))
    assert code == 0 and listed["sessions"] == []
    assert [(entry["agent"], entry["error"]["code"]) for entry in listed["errors"]] == [("pyworker", "unsupported")]

    code, document = cluster.send_json("py.upper", "txt:=1")
    assert code == 2 and document["error"] == {
        "code": "invalid_parameters",
        "message": "invalid parameters for 'py.upper': missing required parameter 'text' (string); "
                   "unknown parameter 'txt' (expected: text)",
        "details": ["missing required parameter 'text' (string)", "unknown parameter 'txt' (expected: text)"]}


def test_a_failing_skill_is_reported_and_the_worker_keeps_serving(cluster, start_worker, client):
    start_worker(text_worker("pyworker", cluster))
    with pytest.raises(SkillbusError) as failed:
        client.request("py.broken")
    assert failed.value.code == "skill_failed" and failed.value.agent == "pyworker"
    assert failed.value.message == "'py.broken' failed: division by zero"
    with pytest.raises(SkillbusError) as unwritable:
        client.request("py.unjsonable")
    assert unwritable.value.code == "skill_failed" and "cannot write object as JSON" in unwritable.value.message
    assert client.request("py.upper", {"text": "still here"}).value == "STILL HERE"


def test_the_python_client_calls_swift_skills(cluster, client):
    cluster.swift_worker("swifty", "--skills", "echo,math.eval")
    reply = client.request("math.eval", {"expression": "6 * 7"})
    assert reply.agent == "swifty" and reply.value["value"] == 42 and reply.duration_us > 0

    with pytest.raises(SkillbusError) as unknown:
        client.request("no.such.skill")
    assert unknown.value.code == "unknown_skill" and unknown.value.details["offered"] == ["echo", "math.eval"]
    with pytest.raises(SkillbusError) as invalid:
        client.request("math.eval", {"expr": "1"})
    assert invalid.value.code == "invalid_parameters" and invalid.value.agent == "swifty"
    with pytest.raises(TypeError, match="parameters are a dict"):
        client.request("echo", ["not", "an", "object"])
    with pytest.raises(ValueError, match="a timeout must be"):
        client.request("echo", {"text": "x"}, timeout=0)

    catalog = {entry["identifier"]: entry for entry in client.skills()}
    assert [p["agent"] for p in catalog["echo"]["providers"]] == ["swifty"]
    assert [a["agent"] for a in client.agents()["agents"]] == ["swifty"]


def test_a_fanout_round_mixes_python_and_swift_agents(cluster, start_worker, client):
    cluster.swift_worker("swifty", "--skills", "echo")
    start_worker(text_worker("pyworker", cluster))
    document = client.fanout("echo", {"text": "hi"})
    assert [(r["agent"], r["result"]) for r in document.result] == [
        ("pyworker", {"text": "hi", "type": "text"}), ("swifty", {"text": "hi", "type": "text"})]
    assert document.summary["executions"] == 2

    majority = client.fanout("echo", {"text": "same"}, aggregate="majority")
    assert majority.raw["aggregate"]["votes"] == 2 and majority.result == {"text": "same", "type": "text"}

    # A plan whose second step, on the Python agent, takes the Swift step's result.
    cluster.swift_worker("mathy", "--skills", "math.eval")
    plan = client.plan([
        {"id": "area", "skill": "math.eval", "params": {"expression": "6 * 7"}},
        {"id": "loud", "skill": "py.upper", "params": {"text": {"$ref": "area.result.json.expression"}}},
    ])
    assert plan.result["loud"] == {"text": "6 * 7", "type": "text"}
    assert plan.invocation("loud")["agent"] == "pyworker" and plan.invocation("area")["agent"] == "mathy"

    with pytest.raises(RoundFailed) as refused:
        client.plan([{"id": "a", "skill": "echo", "after": ["nope"]}])
    assert refused.value.code == "invalid_round" and refused.value.document.invocations == []


def test_output_streams_both_ways(cluster, start_worker, client):
    worker = Worker("pystream", coordinator=cluster.bus, heartbeat_ms=200)

    @worker.skill("py.count", params={"n": "integer"})
    def count(n, context):
        for i in range(1, n + 1):
            context.emit(str(i))
            context.emit({"done": i})
        return f"counted to {n}"

    start_worker(worker)
    code, document = cluster.send_json("py.count", "n:=3")
    assert code == 0 and document["result"]["text"] == "counted to 3"
    assert [p.get("text", p.get("json")) for p in document["invocations"][0]["output"]] == [
        "1", {"done": 1}, "2", {"done": 2}, "3", {"done": 3}]

    # A Swift skill's output reaches the Python client as it comes, before the document.
    cluster.swift_worker("swifty", "--skills", "text.lines")
    call = client.start_round({"invoke": {"skill": "text.lines", "params": {"text": "a\nb\nc", "delayMs": 30}}})
    events = list(call.events())
    assert all(isinstance(e, Output) for e in events) and len(events) >= 2  # 30 ms apart: several batches
    assert [t for e in events for t in e.texts] == ["a", "b", "c"]
    assert [e.first for e in events] == [sum(len(x.parts) for x in events[:i]) for i in range(len(events))]
    assert call.result().result == {"json": {"lines": 3}, "type": "json"}


def test_cancel_stops_a_swift_skill_and_a_python_skill(cluster, start_worker, client):
    cluster.swift_worker("swifty", "--skills", "sleep")
    call = client.start_request("sleep", {"ms": 20000}, round_id="r-sleep")
    wait_until(lambda: running_on(client, "swifty") == 1, "the sleep to start")
    started = time.monotonic()
    call.cancel()
    with pytest.raises(Cancelled) as cancelled:
        call.result()
    assert cancelled.value.details == {"reason": "client"} and time.monotonic() - started < 2

    worker = Worker("pywait", coordinator=cluster.bus, heartbeat_ms=200)
    stopped = threading.Event()

    @worker.skill("py.wait", params={"seconds": "number"})
    def wait(seconds, context):
        try:
            context.sleep(seconds)
        except Cancelled:
            stopped.set()
            raise
        return "waited"

    start_worker(worker)
    round_call = client.start_round({"invoke": {"skill": "py.wait", "params": {"seconds": 30}}})
    wait_until(lambda: running_on(client, "pywait") == 1, "py.wait to start")
    summary = client.cancel_round(round_call.round_id)
    assert summary["rounds"] == 1 and summary["stopped"] == 1
    with pytest.raises(RoundFailed) as failed:
        round_call.result()
    assert failed.value.code == "cancelled"
    assert stopped.wait(5), "the Python skill never saw the CANCEL"
    wait_until(lambda: running_on(client, "pywait") == 0, "the slot to come back (the RESULT after CANCEL)")


def running_on(client, agent):
    return next(a["inFlight"] for a in client.agents()["agents"] if a["agent"] == agent)


def test_timeouts_the_bus_answers_and_a_bus_that_never_answers(cluster, client):
    cluster.swift_worker("swifty", "--skills", "sleep")
    with pytest.raises(SkillbusError) as late:
        client.request("sleep", {"ms": 5000}, timeout=0.3)
    assert late.value.code == "timeout" and late.value.agent == "swifty"

    nobody = cluster.bus.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
    with Client(nobody, timeout=0.2) as lost:
        started = time.monotonic()
        with pytest.raises(SkillbusError) as unreachable:
            lost.request("echo", {"text": "x"})
        assert unreachable.value.code == "unreachable" and 1.1 < time.monotonic() - started < 3
    if os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq":  # pyzmq's DEALER does not say a connect was refused
        assert f"nothing listens at {nobody} (the connection is refused" in unreachable.value.message


def test_ctrl_c_in_a_waiting_client_cancels_its_request_on_the_bus(cluster, client, tmp_path):
    cluster.swift_worker("swifty", "--skills", "sleep")
    program = tmp_path / "wait.py"
    # Ctrl-C as a terminal gives it: a shell that starts this run in the background makes SIGINT ignored,
    # and Python keeps an inherited SIG_IGN instead of raising KeyboardInterrupt.
    program.write_text(
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from skillbus import Client\n"
        "with Client() as client:\n"
        "    client.request('sleep', {'ms': 20000}, timeout=30)\n")
    waiting = cluster.python(str(program), "waiting client")
    wait_until(lambda: running_on(client, "swifty") == 1, "the sleep to start")
    waiting.popen.send_signal(signal.SIGINT)
    assert waiting.wait(10) != 0 and any("KeyboardInterrupt" in line for line in waiting.lines)
    wait_until(lambda: running_on(client, "swifty") == 0, "the worker to stop the sleep", timeout=3)


def test_too_much_output_stops_the_skill_with_output_too_large(cluster, start_worker, client):
    worker = Worker("pychatty", coordinator=cluster.bus, heartbeat_ms=200, max_output_bytes=100)
    emitted = []

    @worker.skill("py.chatty", params={})
    def chatty(context):
        for i in range(1000):
            context.emit(f"line {i}")
            emitted.append(i)
        return "never"

    start_worker(worker)
    with pytest.raises(SkillbusError) as stopped:
        client.request("py.chatty")
    assert stopped.value.code == "output_too_large" and stopped.value.details == {"limit": 100}
    assert stopped.value.message == ("'py.chatty' emitted more than 100 bytes of output (the agent's "
                                     "maxOutputBytes); it was stopped")
    assert len(emitted) < 10  # each part is 31 bytes or so: stopped at the fourth
