"""Bad input gets an error that names what was wrong, and the worker keeps serving (§4.10, §3.5.2)."""

import json
import threading

import pytest
import zmq

from skillbus import Client, RoundFailed, Worker
from skillbus.wire import BUS_TO_CLIENT, CLIENT, WORKER, envelope

from conftest import FakeBus


def upper_worker(name, bus, **options):
    worker = Worker(name, coordinator=bus, heartbeat_ms=200, replica=False, **options)

    @worker.skill("py.upper", params={"text": "string"})
    def upper(text):
        return text.upper()

    return worker


def exchange(bus, *frames):
    """Sends one message as these frames on a fresh DEALER and returns the frames of the answer."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(bus)
    try:
        sock.send_multipart(list(frames))
        assert sock.poll(6000), f"no answer to {frames!r}"
        return sock.recv_multipart()
    finally:
        sock.close()


def raw_request(bus, skill, params_frame):
    """A REQUEST whose parameters frame is sent as given, which the package's client never does."""
    head = envelope(CLIENT, [b"REQUEST", b"raw-1", b"", b"", skill.encode(), b"5000"])
    fields = BUS_TO_CLIENT.unpack(exchange(bus, head, params_frame))
    assert fields[1] == b"REPLY" and fields[4] == b"error"
    return json.loads(fields[7])


def test_a_v1_peer_is_answered_in_v1_form_naming_v2(cluster):
    v1_client = exchange(cluster.bus, b"SKB1C", b"REQUEST", b"raw-v1", b"", b"", b"echo", b"5000", b"{}")
    assert v1_client[:3] == [b"SKB1C", b"ERROR", b"raw-v1"] and len(v1_client) == 4
    v1_worker = exchange(cluster.bus, b"SKB1W", b"READY", b'{"capacity":1,"heartbeatMs":200,"name":"old","skills":[]}')
    assert v1_worker[:2] == [b"SKB1W", b"ERROR"] and len(v1_worker) == 3
    for frames in (v1_client, v1_worker):
        error = json.loads(frames[-1])
        assert error["code"] == "unsupported_protocol"
        assert "SKB2C" in error["message"] and "SKB2W" in error["message"], error


def test_the_bus_refuses_a_wrong_split_and_a_truncated_envelope(cluster):
    # The parameters inside the envelope (the folded form of §2.1) and a frame after it as well.
    inside = exchange(cluster.bus, envelope(CLIENT, [b"REQUEST", b"raw-2", b"", b"", b"echo", b"5000", b"{}"]), b"x")
    fields = BUS_TO_CLIENT.unpack(inside)
    assert fields[:3] == [CLIENT, b"ERROR", b"raw-2"] and json.loads(fields[3])["code"] == "malformed_message"
    truncated = exchange(cluster.bus, CLIENT + b"\x07REQUEST\x05raw", b"{}")
    fields = BUS_TO_CLIENT.unpack(truncated)
    assert fields[:2] == [CLIENT, b"ERROR"] and json.loads(fields[3])["code"] == "malformed_message"


def test_parameters_that_are_no_json_object_are_refused_by_the_python_worker(cluster, start_worker):
    start_worker(upper_worker("pyupper", cluster.bus))
    broken = raw_request(cluster.bus, "py.upper", b'{"text":')
    assert broken["code"] == "invalid_parameters"
    assert broken["message"].startswith("parameters of 'py.upper' are not valid JSON: ")
    twice = raw_request(cluster.bus, "py.upper", b'{"text":"a","text":"b"}')
    assert twice["code"] == "invalid_parameters" and "occurs twice" in twice["message"]
    array = raw_request(cluster.bus, "py.upper", b"[1,2]")
    assert array == {"code": "invalid_parameters", "message": "parameters of 'py.upper' must be a JSON object, got array"}
    with Client(cluster.bus) as client:
        assert client.request("py.upper", {"text": "fine"}).value == "FINE"


def test_bad_rounds_are_refused_with_the_bus_s_reason(cluster, client):
    cluster.swift_worker("swifty", "--skills", "echo")
    with pytest.raises(RoundFailed) as refused:
        client.invoke("echo", {"text": "x"}, priority="urgent")
    assert refused.value.code == "invalid_round" and "'priority' must be high, normal or low" in refused.value.message
    with pytest.raises(RoundFailed) as unknown:
        client.fanout("echo", {"text": "x"}, agents=["nobody"])
    assert unknown.value.code == "unknown_skill" and unknown.value.details == {"agent": "nobody", "skill": "echo"}
    with pytest.raises(ValueError, match="one key"):
        client.round({"invoke": {}, "plan": {}})
    with pytest.raises(ValueError, match="needs a round id"):
        client.cancel_round("")
    assert client.invoke("echo", {"text": "still"}, priority="high", no_cache=True).result["text"] == "still"


def test_the_worker_survives_malformed_messages_and_refuses_in_the_documented_words(capsys):
    bus = FakeBus()
    worker = upper_worker("pyfake", bus.endpoint, capacity=2)
    gate, inside = threading.Event(), threading.Semaphore(0)

    def hold():
        inside.release()
        gate.wait(10)
        return "held"

    worker.skill("py.hold", params={}, concurrency=1)(hold)
    worker.skill("py.wait", params={})(hold)
    saw_cancel, finish = threading.Event(), threading.Event()

    @worker.skill("py.linger", params={})
    def linger(context):
        inside.release()
        if context.cancelled.wait(10):
            saw_cancel.set()
        finish.wait(10)
        return "stopped late"
    try:
        worker.start()
        ready = json.loads(bus.receive(b"READY")[2])
        assert ready["name"] == "pyfake" and [s["identifier"] for s in ready["skills"]] == [
            "py.hold", "py.linger", "py.upper", "py.wait"]
        bus.send(b"WELCOME", b"not json")
        welcome = {"accepted": ["py.hold", "py.linger", "py.upper", "py.wait"], "epoch": "e1", "feed": "", "heartbeatMs": 200,
                   "refused": []}
        bus.send(b"WELCOME", json.dumps(welcome).encode())
        worker.wait_registered(5)
        v1_refusal = b'{"code":"unsupported_protocol","message":"this bus speaks SKB1C (clients) and SKB1W (workers)"}'
        for junk in ([envelope(WORKER, [b"INVOKE"])], [b"XYZ9Q\x05READY"], [envelope(WORKER, [b"FROB"]), b"x"],
                     [envelope(WORKER, [b"HEARTBEAT", b"abc"])], [envelope(WORKER, [b"CANCEL", b"i-unknown"])],
                     [envelope(WORKER, [b"INVOKE", b"i0", b"r", b"", b"py.upper", b"5000", b"{}"]), b"x"],
                     [WORKER + b"\x06INVOKE\x02i0\x01", b"{}"],
                     [b"SKB1W", b"INVOKE", b"i0", b"r", b"", b"py.upper", b"5000", b"{}"], [b"SKB1W", b"ERROR", v1_refusal]):
            bus.send_frames(*junk)

        def refusal(invocation, skill):
            bus.invoke(invocation, skill)
            frames = bus.receive(b"RESULT")
            assert frames[2:4] == [invocation, b"error"]
            return json.loads(frames[4])

        assert refusal(b"i1", b"nope") == {
            "code": "unknown_skill", "message": "agent 'pyfake' does not offer 'nope' (offers: py.hold, py.linger, py.upper, py.wait)"}
        bus.invoke(b"i2", b"py.hold", b"{}")
        assert inside.acquire(timeout=5)
        assert refusal(b"i3", b"py.hold") == {
            "code": "busy", "message": "agent 'pyfake' is at the concurrency limit of 'py.hold' (1)"}
        bus.invoke(b"i4", b"py.wait", b"{}")
        assert inside.acquire(timeout=5)
        assert refusal(b"i5", b"py.upper") == {"code": "busy", "message": "agent 'pyfake' is at capacity (2)"}
        gate.set()
        assert sorted(bus.receive(b"RESULT")[2:4] + bus.receive(b"RESULT")[2:4]) == [b"i2", b"i4", b"ok", b"ok"]
        bus.invoke(b"i6", b"py.upper")
        assert bus.receive(b"RESULT")[2:] == [b"i6", b"ok", b'{"text":"A","type":"text"}']

        # Leaving: what still runs is cancelled (this skill takes its time to stop), new INVOKEs are refused.
        bus.invoke(b"i7", b"py.linger", b"{}")
        assert inside.acquire(timeout=5)
        leaving = threading.Thread(target=worker.stop, kwargs={"grace": 5})
        leaving.start()
        assert saw_cancel.wait(5)
        assert refusal(b"i8", b"py.upper") == {"code": "agent_lost", "message": "agent 'pyfake' is shutting down"}
        finish.set()
        assert bus.receive(b"RESULT")[2:] == [b"i7", b"ok", b'{"text":"stopped late","type":"text"}']
        bus.receive(b"DISCONNECT")
        leaving.join(5)
    finally:
        gate.set()
        finish.set()
        worker.stop()
        bus.close()
    log = capsys.readouterr().err
    assert "ignored a malformed WELCOME" in log and "ignored b'INVOKE' with 2 fields" in log
    assert "ignored a message with header b'XYZ9Q'" in log and "ignored b'FROB' with 3 fields" in log
    assert ("ignored INVOKE carries fields 0-6 in its envelope and the rest as frames; "
            "got 8 field(s) in the envelope and 1 frame(s) after it") in log
    assert "ignored a truncated envelope: field 3 announces 1 bytes, 0 follow" in log
    assert "ignored a v1 message (header SKB1W); this peer speaks SKB2W" in log
    assert "the bus speaks v1 (SKB1W), not SKB2W: unsupported_protocol: this bus speaks SKB1C" in log
