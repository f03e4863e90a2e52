"""Quick skills (`quick=True`): run on the worker's socket thread as their INVOKE is read, one RESULT each
and no STATE (PROTOCOL §4.10, rule 3 and "What a fast worker may skip"). Seen from a stand-in bus."""

import json
import threading

from skillbus import Param, SkillbusError, Worker

from conftest import FakeBus

WELCOME = json.dumps({"accepted": ["py.quick"], "epoch": "e1", "feed": "", "heartbeatMs": 10000,
                      "refused": []}).encode()


def quick_worker(bus, **skill_options):
    worker = Worker("pyquick", coordinator=bus.endpoint, heartbeat_ms=10000, replica=False)
    threads = []

    @worker.skill("py.quick", params=[Param("text", "string")], quick=True, **skill_options)
    def quick(text):
        threads.append(threading.current_thread().name)
        if text == "fail":
            raise SkillbusError("skill_failed", "it broke")
        return text.upper()

    worker.start()
    assert bus.next_message()[0] == b"READY"
    bus.send(b"WELCOME", WELCOME)
    assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])
    return worker, threads


def test_a_burst_of_quick_invocations_costs_one_result_each_and_no_state():
    bus = FakeBus()
    worker, threads = quick_worker(bus)
    try:
        for n in range(20):
            bus.invoke(f"i{n}".encode(), b"py.quick", json.dumps({"text": f"t{n}"}).encode())
        for n in range(20):
            assert bus.next_message() == (b"RESULT", [f"i{n}".encode(), b"ok",
                                                      f'{{"text":"T{n}","type":"text"}}'.encode()])
        assert set(threads) == {"skillbus-worker-pyquick"}  # the socket thread: no hop to the pool
        assert not bus.sock.poll(300)  # and nothing else: no STATE executingSkill, no idle
    finally:
        worker.stop()
        bus.close()


def test_a_quick_invocation_that_fails_still_says_state_failed_then_idle():
    bus = FakeBus()
    worker, _ = quick_worker(bus)
    try:
        bus.invoke(b"i1", b"py.quick", b'{"text":"fail"}')
        command, frames = bus.next_message()
        assert (command, frames[:2]) == (b"RESULT", [b"i1", b"error"])
        assert json.loads(frames[2]) == {"code": "skill_failed", "message": "it broke"}
        assert bus.next_message() == (b"STATE", [b'{"reason":"it broke","state":"failed"}'])
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])
        bus.invoke(b"i2", b"py.quick", b'{"text":1}')  # refused before it runs: no STATE (§4.10 steps 1-6)
        command, frames = bus.next_message()
        assert (command, frames[:2]) == (b"RESULT", [b"i2", b"error"])
        assert json.loads(frames[2])["code"] == "invalid_parameters"
        assert not bus.sock.poll(300)
    finally:
        worker.stop()
        bus.close()


def test_a_quick_skill_with_a_context_sends_its_output_before_its_result():
    bus = FakeBus()
    worker = Worker("pyquick", coordinator=bus.endpoint, heartbeat_ms=10000, replica=False)

    @worker.skill("py.quick", params={}, quick=True)
    def quick(context):
        context.emit("one")
        context.emit({"two": 2})
        return context.round_id

    try:
        worker.start()
        assert bus.next_message()[0] == b"READY"
        bus.send(b"WELCOME", WELCOME)
        assert bus.next_message()[0] == b"STATE"
        bus.send(b"INVOKE", b"i1", b"round-1", b"", b"py.quick", b"5000", b"{}")
        assert bus.next_message() == (b"OUTPUT", [b"i1", b"0", b'[{"text":"one","type":"text"},'
                                                               b'{"json":{"two":2},"type":"json"}]'])
        assert bus.next_message() == (b"RESULT", [b"i1", b"ok", b'{"text":"round-1","type":"text"}'])
        assert not bus.sock.poll(300)
    finally:
        worker.stop()
        bus.close()


def test_the_invocation_id_is_echoed_byte_for_byte_by_quick_and_pooled_skills():
    bus = FakeBus()
    worker = Worker("pyquick", coordinator=bus.endpoint, heartbeat_ms=10000, replica=False)
    worker.skill("py.quick", params={}, quick=True)(lambda: "q")
    worker.skill("py.pooled", params={})(lambda: "p")
    try:
        worker.start()
        assert bus.next_message()[0] == b"READY"
        bus.send(b"WELCOME", WELCOME)
        for skill, text in ((b"py.quick", b"q"), (b"py.pooled", b"p")):
            bus.invoke(b"\xff\x00id", skill, b"{}")  # not UTF-8: decoding it would change it
            command, frames = bus.next_message()
            while command == b"STATE":
                command, frames = bus.next_message()
            assert (command, frames) == (b"RESULT", [b"\xff\x00id", b"ok", b'{"text":"' + text + b'","type":"text"}'])
    finally:
        worker.stop()
        bus.close()
