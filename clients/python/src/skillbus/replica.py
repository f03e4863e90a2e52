"""A read-only copy of the bus's registry: the Clone pattern of PROTOCOL §8.3.

Subscribe to `registry.` first, then take a SNAPSHOT over the bus, catch up with the updates
queued meanwhile, apply each numbered update in order, and take a new snapshot on a gap, another
epoch, or a heartbeat that is ahead.
"""

from __future__ import annotations

import threading
import time

import zmq

from . import jsonwire, schema
from .client import Client, endpoint_list
from .errors import SkillbusError
from .keys import curve_options
from .socketthread import SocketThread

_SNAPSHOT_WAIT_S = 3.0
_RETRY_MIN_S, _RETRY_MAX_S = 1.0, 32.0
_QUEUE_LIMIT = 100_000


def digest(entries: dict) -> str:
    """The registry digest of §8.4: FNV-1a 64 over each entry as Skillbus writes it, plus a line end."""
    h = 0xCBF29CE484222325
    for name in sorted(entries):
        for byte in jsonwire.encode(entries[name]) + b"\n":
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _whole(value, least: int) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer() \
        and value >= least


def is_entry(entry) -> bool:
    """A registry entry a reader may accept (§5.10)."""
    return isinstance(entry, dict) and schema.is_identifier(entry.get("agent")) \
        and _whole(entry.get("capacity"), 1) and isinstance(entry.get("skills"), list) \
        and all(isinstance(d, dict) and schema.is_identifier(d.get("identifier")) for d in entry["skills"])


class Replica:
    """Follows the registry from the feed at `feed`; thread-safe to read.

    For a coordinator group, `feed` names every coordinator's feed (a list, or "a,b") and `coordinator` every bus:
    the SUB connects to each feed at once (only the leader publishes) and snapshots come from the leader, which
    the client follows (PROTOCOL §7, "Following the leader of a group").

    `entries()` are the agents' entries by name, `skills()` the derived skill view, `position()`
    what a worker reports in HEARTBEAT field 3 (None until the first snapshot), `wait_for(test)`
    waits for the copy to satisfy a test.
    """

    def __init__(self, feed: str | list[str], *, client: Client | None = None, coordinator=None,
                 context: zmq.Context | None = None, server_key=None, key=None):
        feeds = endpoint_list(feed, "feed")  # checked before anything starts
        if client is not None and server_key is None and key is None:
            server_key, key = getattr(client, "keys", (None, None))  # its feed is CURVE too (§12.1)
        curve = curve_options(server_key, key)
        self._owns_client = client is None
        self._client = client or Client(coordinator, context=context, server_key=server_key, key=key)
        self._changed = threading.Condition()
        self._entries: dict[str, dict] = {}
        self._epoch: str | None = None
        self._seq = 0
        self._synced = False
        self._loaded = False
        self._queued: list[dict] = []
        self._retry_at = 0.0
        self._delay = _RETRY_MIN_S
        self.snapshots = 0  # how many snapshots loaded: one, unless something was missed
        self._socket = SocketThread(context or zmq.Context.instance(), zmq.SUB, feeds, self,
                                    name="skillbus-replica", options=curve, subscriptions=[b"registry."])

    # --- reading ---------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._changed:
            return self._synced

    def entries(self) -> dict:
        with self._changed:
            return dict(self._entries)

    def skills(self) -> dict:
        """identifier -> {"descriptor", "providers"}: each skill some agent offers, providers sorted."""
        view: dict = {}
        for name, entry in sorted(self.entries().items()):
            for descriptor in entry["skills"]:
                view.setdefault(descriptor["identifier"], {"descriptor": descriptor, "providers": []})
                view[descriptor["identifier"]]["providers"].append(name)
        return view

    def position(self) -> dict | None:
        """`{"epoch", "seq", "digest"}` of the contents held (§5.11); None before the first snapshot."""
        with self._changed:
            if not self._loaded:
                return None
            return {"epoch": self._epoch, "seq": self._seq, "digest": digest(self._entries)}

    def wait_for(self, test, timeout: float = 10.0) -> bool:
        """Waits until `test(replica)` holds while synced; False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (self._synced and test(self)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def stop(self) -> None:
        self._socket.stop()
        if self._owns_client:
            self._client.close()

    # --- the replica's socket thread -------------------------------------------------------------

    def before_poll(self, now: float):
        with self._changed:
            due = not self._synced and now >= self._retry_at
        if due:
            self._take_snapshot()
        with self._changed:
            return None if self._synced else self._retry_at

    def _take_snapshot(self) -> None:
        """Rules 2, 3, 4 and 7: the SUB keeps queueing updates while this waits."""
        try:
            snapshot = self._client.snapshot(_SNAPSHOT_WAIT_S)
            if not all(is_entry(e) and e["agent"] == name for name, e in snapshot.entries.items()):
                raise SkillbusError("malformed_message", "the snapshot holds an entry that cannot be read")
        except SkillbusError:
            with self._changed:
                self._retry_at = time.monotonic() + self._delay
                self._delay = min(2 * self._delay, _RETRY_MAX_S)
            return
        with self._changed:
            self._entries, self._epoch, self._seq = dict(snapshot.entries), snapshot.epoch, snapshot.seq
            self._synced = self._loaded = True
            self._delay = _RETRY_MIN_S
            self.snapshots += 1
            later = sorted((u for u in self._queued if u["epoch"] == self._epoch and u["seq"] > self._seq),
                           key=lambda u: u["seq"])
            self._queued = []
            for index, update in enumerate(later):
                if not self._apply(update):
                    self._queued = later[index:]
                    break
            self._changed.notify_all()

    def _apply(self, update: dict) -> bool:
        """Rule 5, with the lock held. False when the update shows a gap or another epoch."""
        if update["epoch"] != self._epoch or update["seq"] > self._seq + 1:
            self._lose_sync()
            return False
        if update["seq"] == self._seq + 1:
            if update["entry"] is None:
                self._entries.pop(update["agent"], None)
            else:
                self._entries[update["agent"]] = update["entry"]
            self._seq = update["seq"]
        return True

    def on_message(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return  # rule 8: unreadable messages are ignored
        try:
            body = jsonwire.loads(frames[1])
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if frames[0] == b"registry.update" and self._readable_update(body):
            with self._changed:
                if not self._synced:
                    self._enqueue(body)
                elif not self._apply(body):
                    self._enqueue(body)
                self._changed.notify_all()
        elif frames[0] == b"registry.heartbeat" and isinstance(body.get("epoch"), str) and _whole(body.get("seq"), 0):
            with self._changed:  # rule 6
                if not self._synced:
                    self._retry_at = 0.0
                    self._socket.wake()
                elif body["epoch"] != self._epoch or body["seq"] > self._seq:
                    self._lose_sync()

    def _lose_sync(self) -> None:
        """With the lock held: take a new snapshot at once (the socket thread looks again)."""
        self._synced, self._retry_at = False, 0.0
        self._socket.wake()

    @staticmethod
    def _readable_update(body: dict) -> bool:
        entry = body.get("entry", False)
        return isinstance(body.get("epoch"), str) and _whole(body.get("seq"), 1) \
            and schema.is_identifier(body.get("agent")) \
            and (entry is None or (is_entry(entry) and entry["agent"] == body["agent"]))

    def _enqueue(self, update: dict) -> None:
        self._queued.append(update)
        if len(self._queued) > _QUEUE_LIMIT:
            self._queued = self._queued[len(self._queued) // 2:]
