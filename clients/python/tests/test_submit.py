"""`Client.submit` and `submit_round`: many calls in flight from one thread, each a future resolved on the
client's socket thread. A stand-in bus on a socket; no coordinator."""

import json
import random
import threading
import time

import pytest
import zmq

from skillbus import Client, SkillbusError, SubmittedCall, jsonwire, wire
from skillbus.wire import BUS_TO_CLIENT, CLIENT_TO_BUS

from conftest import messages


class ClientBus:
    """A ROUTER in the coordinator's place for a client: it reads REQUESTs and answers as told."""

    def __init__(self):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def requests(self, count: int) -> list[tuple[bytes, list[bytes]]]:
        """The next `count` messages, as (peer, fields)."""
        received = []
        while len(received) < count:
            assert self.sock.poll(5000), f"the client sent {len(received)} of {count} messages"
            peer, *frames = self.sock.recv_multipart()
            received.extend((peer, CLIENT_TO_BUS.unpack(message)) for message in messages(frames))
        return received

    def reply(self, peer: bytes, request_id: bytes, status: bytes, payload: bytes) -> None:
        self.sock.send_multipart([peer, *BUS_TO_CLIENT.pack(b"REPLY", request_id, b"", status, b"w", b"7", payload)])

    def close(self):
        self.sock.close()


@pytest.fixture
def client_bus():
    bus = ClientBus()
    yield bus
    bus.close()


def test_submitted_requests_are_all_in_flight_at_once_and_answered_in_any_order(client_bus):
    with Client(client_bus.endpoint, timeout=10) as client:
        calls = [client.submit("echo", {"text": f"t{n}"}) for n in range(64)]
        assert all(isinstance(call, SubmittedCall) and not call.done() for call in calls)
        requests = client_bus.requests(64)  # every one sent before any answer
        assert [json.loads(fields[7])["text"] for _, fields in requests] == [f"t{n}" for n in range(64)]
        random.shuffle(requests)
        for peer, fields in requests:
            text = json.loads(fields[7])["text"]
            client_bus.reply(peer, fields[2], b"ok", jsonwire.encode({"text": text.upper(), "type": "text"}))
        assert [call.result(5).value for call in calls] == [f"T{n}" for n in range(64)]
        assert all(call.result().agent == "w" and call.result().duration_us == 7 for call in calls)


def test_the_first_message_announces_batches_and_batched_answers_are_read_in_order(client_bus):
    """§2.2: the client's first message on a connection is a batch (of one, or more), and it reads a batch of
    answers as the answers one by one."""
    with Client(client_bus.endpoint, timeout=10) as client:
        calls = [client.submit("echo", {"text": f"t{n}"}) for n in range(40)]
        assert client_bus.sock.poll(5000)
        peer, *first = client_bus.sock.recv_multipart()
        assert len(first) == 1 and wire.is_batch(first[0])
        requests = [CLIENT_TO_BUS.unpack(message) for message in messages(first)]
        requests += [fields for _, fields in client_bus.requests(40 - len(requests))]
        assert [json.loads(fields[7])["text"] for fields in requests] == [f"t{n}" for n in range(40)]
        answers = [BUS_TO_CLIENT.pack(b"REPLY", fields[2], b"", b"ok", b"w", b"7",
                                      jsonwire.encode({"text": json.loads(fields[7])["text"], "type": "text"}),
                                      folded=True)[0] for fields in requests]
        batches = wire.batches(answers)
        assert len(batches) == 2 and all(wire.is_batch(frame) for frame in batches)  # 30 and 10
        for frame in batches:
            client_bus.sock.send_multipart([peer, frame])
        assert [call.result(5).value for call in calls] == [f"t{n}" for n in range(40)]


def test_a_done_callback_runs_once_on_the_socket_thread_and_may_submit_more(client_bus):
    with Client(client_bus.endpoint, timeout=10) as client:
        seen, finished = [], threading.Event()

        def on_done(call):
            seen.append((call.result().value, threading.current_thread().name))
            if len(seen) == 1:
                client.submit("echo", {"text": "second"}).add_done_callback(on_done)
            else:
                finished.set()

        client.submit("echo", {"text": "first"}).add_done_callback(on_done)
        for expected in ("first", "second"):
            (peer, fields), = client_bus.requests(1)
            assert json.loads(fields[7]) == {"text": expected}
            client_bus.reply(peer, fields[2], b"ok", jsonwire.encode({"text": expected, "type": "text"}))
        assert finished.wait(5)
        assert seen == [("first", "skillbus-client"), ("second", "skillbus-client")]
        late = []
        done = client.submit("echo", {"text": "x"})
        (peer, fields), = client_bus.requests(1)
        client_bus.reply(peer, fields[2], b"ok", b'{"json":[1],"type":"json"}')
        assert done.result(5).value == [1]
        done.add_done_callback(late.append)  # after the answer: at once, here
        assert late == [done]


def test_a_submitted_call_fails_with_the_error_the_bus_sent(client_bus):
    with Client(client_bus.endpoint, timeout=10) as client:
        call = client.submit("nope")
        (peer, fields), = client_bus.requests(1)
        client_bus.reply(peer, fields[2], b"error", b'{"code":"unknown_skill","message":"no agent offers skill \'nope\'"}')
        failure = call.exception(5)
        assert isinstance(failure, SkillbusError) and failure.code == "unknown_skill"
        with pytest.raises(SkillbusError, match="no agent offers"):
            call.result()


def test_a_submitted_call_nobody_answers_fails_unreachable_after_its_timeout_plus_a_second(client_bus):
    with Client(client_bus.endpoint) as client:
        started = time.monotonic()
        call = client.submit("echo", {"text": "hi"}, timeout=0.2)
        with pytest.raises(TimeoutError):
            call.result(timeout=0.05)  # not answered yet: the wait given here ran out
        with pytest.raises(SkillbusError) as failed:
            call.result(timeout=5)
        assert failed.value.code == "unreachable"
        assert 1.1 <= time.monotonic() - started < 3.0
        assert "nothing listens" not in failed.value.message  # this bus listens, and answers nothing


def test_cancel_sends_cancel_for_a_submitted_call_and_close_fails_the_rest(client_bus):
    client = Client(client_bus.endpoint, timeout=10)
    try:
        call, other = client.submit("sleep", {"ms": 5000}), client.submit("sleep", {"ms": 5000})
        client_bus.requests(2)
        call.cancel()
        (_, cancel), = client_bus.requests(1)
        assert cancel[1:3] == [b"CANCEL", call.request_id.encode()]
    finally:
        client.close()
    assert other.exception(5).code == "unreachable"
    with pytest.raises(TypeError):
        other.events()


def test_a_submitted_round_resolves_to_its_document_or_to_round_failed(client_bus):
    with Client(client_bus.endpoint, timeout=10) as client:
        good = client.submit_round({"fanout": {"skill": "echo", "params": {"text": "hi"}, "agents": "all"}})
        bad = client.submit_round({"invoke": {"skill": "nope", "params": {}}})
        (peer, first), (_, second) = client_bus.requests(2)
        assert first[1] == b"ROUND" and json.loads(first[6]) == {
            "fanout": {"agents": "all", "params": {"text": "hi"}, "skill": "echo"}}
        assert first[3].decode() == good.round_id
        for fields, document in ((first, {"status": "ok", "result": ["hi"], "invocations": []}),
                                 (second, {"status": "error", "invocations": [],
                                           "error": {"code": "unknown_skill", "message": "no agent offers 'nope'"}})):
            client_bus.sock.send_multipart([peer, *BUS_TO_CLIENT.pack(b"ROUND", fields[2], fields[3],
                                                                      jsonwire.encode(document))])
        assert good.result(5).status == "ok" and good.result().result == ["hi"]
        failure = bad.exception(5)
        assert failure.code == "unknown_skill" and failure.document.status == "error"


def test_a_blocking_call_reads_for_other_threads_while_it_waits_and_the_socket_thread_takes_over_after(client_bus):
    with Client(client_bus.endpoint, timeout=10) as client:
        answers = {}
        first = threading.Thread(target=lambda: answers.update(first=client.request("echo", {"text": "a"}).value))
        first.start()
        (peer, waiting), = client_bus.requests(1)  # the first thread's call, not answered yet
        second = threading.Thread(target=lambda: answers.update(second=client.request("echo", {"text": "b"}).value))
        second.start()
        submitted = client.submit("echo", {"text": "c"})
        later = client_bus.requests(2)  # sent while the first thread may hold the socket
        assert sorted(json.loads(fields[7])["text"] for _, fields in later) == ["b", "c"]
        for peer_, fields in [*later, (peer, waiting)]:
            text = json.loads(fields[7])["text"]
            client_bus.reply(peer_, fields[2], b"ok", jsonwire.encode({"text": text.upper(), "type": "text"}))
        first.join(5)
        second.join(5)
        assert answers == {"first": "A", "second": "B"} and submitted.result(5).value == "C"
        for text in ("d", "e"):  # one blocking call after another, then a future: each answered
            call = threading.Thread(target=lambda t=text: answers.update({t: client.request("echo", {"text": t}).value}))
            call.start()
            (peer, fields), = client_bus.requests(1)
            client_bus.reply(peer, fields[2], b"ok", jsonwire.encode({"text": text, "type": "text"}))
            call.join(5)
        late = client.submit("echo", {"text": "f"})
        (peer, fields), = client_bus.requests(1)
        client_bus.reply(peer, fields[2], b"ok", b'{"text":"f","type":"text"}')
        assert answers["d"] == "d" and answers["e"] == "e" and late.result(5).value == "f"


def test_a_plan_is_sent_with_each_skill_steps_after_and_params_written_out(client_bus):
    """§3.5.8: a skill step without `after` or `params` gets both, so that the body is in canonical form (the
    one the bus reads fastest); an ask step and what the caller wrote are left as they are."""
    with Client(client_bus.endpoint, timeout=10) as client:
        steps = [{"id": "a", "skill": "echo"}, {"id": "b", "skill": "echo", "params": {"text": "x"}, "after": ["a"]},
                 {"id": "c", "ask": {"role": "critic", "message": "m"}}]
        done = []
        thread = threading.Thread(target=lambda: done.append(client.plan(steps)))
        thread.start()
        (peer, fields), = client_bus.requests(1)
        assert fields[6] == jsonwire.encode({"plan": {"onFailure": "stop", "steps": [
            {"after": [], "id": "a", "params": {}, "skill": "echo"},
            {"after": ["a"], "id": "b", "params": {"text": "x"}, "skill": "echo"},
            {"ask": {"message": "m", "role": "critic"}, "id": "c"}]}})
        document = jsonwire.encode({"round": fields[3].decode(), "status": "ok", "result": {}})
        client_bus.sock.send_multipart([peer, *BUS_TO_CLIENT.pack(b"ROUND", fields[2], fields[3], document)])
        thread.join(5)
        assert done and done[0].status == "ok"
