"""The replica's rules of §8.3 (gaps, heartbeats ahead, another epoch), fed by hand: the snapshots
come from a scripted source instead of a bus, the feed messages straight to `on_message`."""

import json
import queue

from skillbus import Replica, SkillbusError, Snapshot


def entry(agent, *skills):
    return {"agent": agent, "capacity": 1, "skills": [
        {"description": "", "displayName": s, "identifier": s, "parameters": []} for s in skills]}


class ScriptedSnapshots:
    """Answers each SNAPSHOT with the next snapshot the test queued (or fails, like a silent bus)."""

    def __init__(self):
        self.answers = queue.Queue()
        self.asked = 0

    def snapshot(self, timeout):
        self.asked += 1
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            raise SkillbusError("unreachable", "no snapshot") from None


def update(epoch, seq, agent, value):
    return [b"registry.update", json.dumps({"epoch": epoch, "seq": seq, "agent": agent, "entry": value}).encode()]


def heartbeat(epoch, seq):
    return [b"registry.heartbeat", json.dumps({"epoch": epoch, "seq": seq, "heartbeatMs": 1000}).encode()]


def test_gaps_heartbeats_ahead_and_a_new_epoch_each_take_a_new_snapshot():
    source = ScriptedSnapshots()
    source.answers.put(Snapshot("e1", 2, 1000, {"alpha": entry("alpha", "echo")}))
    replica = Replica("tcp://127.0.0.1:9", client=source)  # no feed there: the test is the feed
    try:
        assert replica.wait_for(lambda r: r.position() == {"epoch": "e1", "seq": 2, "digest": r.position()["digest"]})
        replica.on_message(update("e1", 2, "alpha", None))  # old: ignored
        replica.on_message(update("e1", 3, "beta", entry("beta", "math.eval")))  # next: applied
        assert set(replica.entries()) == {"alpha", "beta"} and replica.position()["seq"] == 3

        source.answers.put(Snapshot("e1", 5, 1000, {"beta": entry("beta", "math.eval"), "gamma": entry("gamma")}))
        replica.on_message(update("e1", 5, "gamma", entry("gamma")))  # 4 is missing: a gap
        assert replica.wait_for(lambda r: r.position()["seq"] == 5)
        assert set(replica.entries()) == {"beta", "gamma"} and replica.snapshots == 2

        source.answers.put(Snapshot("e1", 7, 1000, {"beta": entry("beta")}))
        replica.on_message(heartbeat("e1", 7))  # ahead of the copy: updates 6 and 7 were lost
        assert replica.wait_for(lambda r: r.position()["seq"] == 7) and replica.snapshots == 3

        source.answers.put(Snapshot("e2", 1, 1000, {"delta": entry("delta", "echo")}))
        replica.on_message(update("e2", 1, "delta", entry("delta", "echo")))  # the coordinator restarted
        assert replica.wait_for(lambda r: r.position()["epoch"] == "e2")
        assert list(replica.entries()) == ["delta"] and replica.skills()["echo"]["providers"] == ["delta"]

        for unreadable in ([b"registry.update", b"not json"], [b"registry.update"],
                           update("e2", 0, "delta", None), update("e2", 2, "delta", {"agent": "other"}),
                           update("e2", 2, "bad name", None)):
            replica.on_message(unreadable)  # rule 8: ignored
        assert replica.synced and replica.position()["seq"] == 1 and replica.snapshots == 4
    finally:
        replica.stop()


def test_a_snapshot_that_fails_is_tried_again():
    source = ScriptedSnapshots()
    replica = Replica("tcp://127.0.0.1:9", client=source)
    try:
        assert not replica.wait_for(lambda r: True, timeout=3.2)  # 3 s for an answer that never comes
        assert replica.position() is None
        source.answers.put(Snapshot("e1", 4, 1000, {}))
        replica.on_message(heartbeat("e1", 4))  # the bus answers again (rule 6)
        assert replica.wait_for(lambda r: r.position() is not None and r.position()["seq"] == 4, timeout=3)
        assert source.asked == 2 and replica.snapshots == 1
    finally:
        replica.stop()
