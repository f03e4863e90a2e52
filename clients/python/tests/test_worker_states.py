"""The STATE rule of §4.10, seen from a stand-in bus: what a Python worker says, and in which order."""

import json
import threading

from skillbus import SkillbusError, Worker

from conftest import FakeBus

WELCOME = json.dumps({"accepted": ["py.fail", "py.hold"], "epoch": "e1", "feed": "", "heartbeatMs": 200,
                      "refused": []}).encode()


def state(body):
    return json.loads(body)


def test_states_follow_the_rule_executing_then_result_failed_idle_and_again_after_every_welcome():
    bus = FakeBus()
    worker = Worker("pystates", coordinator=bus.endpoint, heartbeat_ms=200, replica=False)
    inside, release = threading.Event(), threading.Event()

    @worker.skill("py.hold", params={})
    def hold():
        inside.set()
        release.wait(10)
        return "done"

    @worker.skill("py.fail", params={})
    def fail():
        raise SkillbusError("skill_failed", "it broke")

    try:
        worker.start()
        assert bus.next_message()[0] == b"READY"
        bus.send(b"WELCOME", WELCOME)
        # Rule 1: a WELCOME makes it state its current state again, even idle.
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])

        bus.send(b"INVOKE", b"i1", b"r", b"", b"py.hold", b"5000", b"{}")
        assert inside.wait(5)
        assert bus.next_message() == (b"STATE", [b'{"skill":"py.hold","state":"executingSkill"}'])
        bus.send(b"WELCOME", WELCOME)  # a registration again, while it runs
        assert bus.next_message() == (b"STATE", [b'{"skill":"py.hold","state":"executingSkill"}'])
        release.set()
        assert bus.next_message() == (b"RESULT", [b"i1", b"ok", b'{"text":"done","type":"text"}'])
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])

        # Rule 4: every failure is one STATE failed, after its RESULT, then the current state.
        bus.send(b"INVOKE", b"i2", b"r", b"", b"py.fail", b"5000", b"{}")
        command, frames = bus.next_message()
        if command == b"STATE":  # the executingSkill may or may not show: it is over so soon
            assert state(frames[0]) == {"skill": "py.fail", "state": "executingSkill"}
            command, frames = bus.next_message()
        assert (command, frames[:2]) == (b"RESULT", [b"i2", b"error"])
        assert bus.next_message() == (b"STATE", [b'{"reason":"it broke","state":"failed"}'])
        assert bus.next_message() == (b"STATE", [b'{"state":"idle"}'])

        # Leaving: DISCONNECT, and nothing after it.
        worker.stop()
        assert bus.next_message()[0] == b"DISCONNECT"
        assert not bus.sock.poll(300)
    finally:
        release.set()
        worker.stop()
        bus.close()
