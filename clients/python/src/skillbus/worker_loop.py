"""The worker protocol's state (PROTOCOL §4), kept on the worker's socket thread.

Registration with back-off (§4.7), heartbeats both ways, INVOKE checked in the order of §4.10,
RESULT and OUTPUT, CANCEL, the STATE rule of §4.10, SKILLS (§4.11), DISCONNECT (§4.4), TURN for a
worker with a planner (§3.7, `turn.py`), and a group's moves to the leader (§4.4 item 6, `worker_follow.py`).
Skills run on the worker's thread pool; what they finish comes back through a queue. Each turn runs on a thread of its own and sends its own messages.
"""

from __future__ import annotations

import queue
import sys
import threading
import time

from . import jsonwire, schema, wire
from .client import CoordinatorChoice
from .errors import SkillbusError
from .invocation import Invocation
from .turn import AgentTurn, TeamContext
from .worker_follow import FollowingTheLeader

IDLE = {"state": "idle"}
_FIELDS = {b"WELCOME": (3, 3), b"INVOKE": (8, 8), b"CANCEL": (3, 3), b"HEARTBEAT": (2, 3), b"ERROR": (3, 3),
           b"QUERY": (4, 4), b"TURN": (8, 9)}
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 1.0, 32.0


def _error(code: str, message: str, details=None) -> bytes:
    return jsonwire.encode(SkillbusError(code, message, details).to_object())


def _error_in(body: bytes) -> SkillbusError:
    """The error object of an ERROR."""
    try:
        return SkillbusError.from_object(jsonwire.loads(body))
    except ValueError:
        return SkillbusError("malformed_message", "an ERROR whose body is not JSON")


def feed_for(bus: str, feed: str) -> str:
    """The feed endpoint to connect to: WELCOME's, with a wildcard host replaced by the bus's (§8.6)."""
    if not bus.startswith("tcp://") or not feed.startswith("tcp://"):
        return feed
    host, _, port = feed[len("tcp://"):].rpartition(":")
    if host in ("0.0.0.0", "*", "[::]", "::"):
        return bus.rpartition(":")[0] + ":" + port
    return feed


_RESULT_ENVELOPE = wire.WORKER + bytes((len(b"RESULT"),)) + b"RESULT"
_LENGTHS = [bytes((size,)) for size in range(wire.LONG)]


def _nothing() -> None:
    pass


def _outcome(skill, skill_id: str, inv: Invocation | None, values: dict) -> tuple[bytes, bytes, str | None]:
    """Runs the skill: its RESULT's status and payload, and the reason of its STATE failed or None
    (§4.10 steps 7-10)."""
    try:
        status, payload, failure = b"ok", skill.run_for_payload(values, inv), None
    except SkillbusError as error:
        status, payload = b"error", jsonwire.encode(error.to_object())
        failure = "cancelled" if error.code == "cancelled" else error.message
    except Exception as error:  # anything else is skill_failed (step 10)
        failure = f"'{skill_id}' failed: {error or type(error).__name__}"
        status, payload = b"error", _error("skill_failed", failure)
    if inv is not None and inv.output_error is not None:  # passed the output limit: that is the outcome
        status, payload, failure = b"error", jsonwire.encode(inv.output_error.to_object()), inv.output_error.message
    return status, payload, failure


class WorkerLoop(FollowingTheLeader):
    def __init__(self, worker):
        self.worker = worker
        self.welcomed = threading.Event()  # the first WELCOME came
        self.welcome: dict | None = None
        self.left = threading.Event()  # DISCONNECT is on its way
        self._socket = None
        self._finished: queue.SimpleQueue = queue.SimpleQueue()
        now = time.monotonic()
        self._registered = False
        self._awaiting_welcome = False
        self._backoff = _BACKOFF_MIN_S
        self._last_ready: float | None = None
        self._bus_heartbeat_ms = worker.heartbeat_ms
        self._last_heard = now
        self._next_heartbeat = now
        self._running: dict[str, Invocation] = {}
        self._turns: dict[str, AgentTurn] = {}  # by turn id; read and changed on the socket thread only
        self._current_skill = ""
        self._state_sent: dict | None = IDLE  # the STATE last sent; None: forgotten at a WELCOME
        self._offered: list | None = None  # the skill list the bus holds for us
        self._skills_dirty = False
        self._leave_by: float | None = None
        self.choice = CoordinatorChoice(worker.coordinators)
        self._generation = 0  # one more at each move: what a turn of the coordinator left sends is dropped

    def attach(self, socket) -> None:
        self._socket = socket
        socket.wake()

    # --- from other threads ----------------------------------------------------------------------

    def skills_changed(self) -> None:
        self._skills_dirty = True
        self._socket.wake()

    def leave(self, grace: float) -> None:
        self._leave_by = time.monotonic() + grace
        self._socket.wake()

    # --- the socket thread -----------------------------------------------------------------------

    def _send(self, *fields: bytes) -> None:
        """Sends fields 1, 2, ... (the command first) in wire v2 framing, folded: the socket batches them (§2.2)."""
        self._socket.send(wire.WORKER_TO_BUS.pack(*fields, folded=True))

    def _log(self, text: str) -> None:
        print(f"skillbus worker '{self.worker.name}': {text}", file=sys.stderr, flush=True)

    def before_poll(self, now: float):
        if self._socket is None or self.left.is_set():
            return None
        if (self._registered and not self._running and not self._turns and now < self._next_heartbeat
                and self._leave_by is None and not self._skills_dirty and self._finished.empty()
                and self._state_sent == IDLE):
            return self._next_heartbeat  # nothing due but a heartbeat: the common case between quick invocations
        self._finish_invocations(now)
        if self._leave_by is not None:
            return self._leaving(now)
        self._send_output(now)
        if self._skills_dirty:
            self._skills_dirty = False
            self._offer_skills()
        due = self._timers(now)
        turn_dues = self._watch_turns(now)
        self._flush_state()
        batch_dues = [d for d in (inv.batch_due() for inv in self._running.values()) if d is not None]
        return min([due, *batch_dues, *turn_dues])

    def _timers(self, now: float) -> float:
        silence = self._silence_ends()
        if silence is not None and now >= silence:
            self._move(self.choice.leave(now), f"nothing came from it for {3 * self._bus_heartbeat_ms} ms "
                                               f"(3 heartbeats of {self._bus_heartbeat_ms} ms)", now)
            silence = self._silence_ends()
        if not self._registered:
            if now < self.choice.not_before:
                return self.choice.not_before  # a move's back-off
            if self._last_ready is None or now - self._last_ready >= self._backoff:
                self._send_ready(now)
            return min(self._last_ready + self._backoff, silence or float("inf"))
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.worker.heartbeat_ms / 1000
            fields = [b"HEARTBEAT", str(self.worker.heartbeat_ms).encode()]
            replica = self.worker.replica
            position = replica.position() if replica is not None else None
            if position is not None:
                fields.append(jsonwire.encode(position))
            self._send(*fields)
            if silence is None and now - self._last_heard > 3 * self._bus_heartbeat_ms / 1000:
                self._log("the bus has been silent for 3 heartbeats: registering again")
                self._register_again(now)
                return now + self._backoff
        return min(self._next_heartbeat, silence or float("inf"))

    def _register_again(self, now: float) -> None:
        """The bus lost this worker (silence, or its connection closed): READY again, what ran cancelled."""
        self._registered = False
        self._backoff = _BACKOFF_MIN_S
        for inv in self._running.values():
            inv.cancelled.set()  # the bus has answered them agent_lost already
        self._send_ready(now)

    def _arrived(self, now: float) -> None:
        """A move's new DEALER is open: unregistered, with the READY back-off and liveness of a fresh start."""
        self._registered = self._awaiting_welcome = False
        self._last_ready, self._backoff = None, _BACKOFF_MIN_S
        self._bus_heartbeat_ms = self.worker.heartbeat_ms  # until the new coordinator's WELCOME says its own
        self._last_heard, self._state_sent = now, None

    def _send_ready(self, now: float) -> None:
        if self._last_ready is not None:
            self._backoff = min(2 * self._backoff, _BACKOFF_MAX_S)
            if self._socket.key_refused:  # heard on the socket's monitor since the last READY
                self._socket.key_refused = False
                self._log(f"the coordinator refused this worker's key; trying again in {self._backoff:g} s")
        self._last_ready = now
        self._awaiting_welcome = True
        self._offered = self._descriptors()
        body = {"name": self.worker.name, "capacity": self.worker.capacity,
                "heartbeatMs": self.worker.heartbeat_ms, "skills": self._offered}
        if self.worker.planner is not None:
            body["planner"] = True
        body.update({k: v for k, v in (("role", self.worker.role), ("description", self.worker.description)) if v})
        self._send(b"READY", jsonwire.encode(body))

    def _descriptors(self) -> list:
        return [s.descriptor for _, s in sorted(self.worker.skills().items())]

    def _offer_skills(self) -> None:
        if self._registered and self._descriptors() != self._offered:
            self._offered = self._descriptors()
            self._send(b"SKILLS", jsonwire.encode(self._offered))

    def _flush_state(self) -> None:
        """The STATE rule of §4.10: before waiting, send the current state if it is not the last sent."""
        if not self._registered:
            return
        current = {"skill": self._current_skill, "state": "executingSkill"} if self._running else IDLE
        if current != self._state_sent:
            self._state_sent = current
            self._send(b"STATE", jsonwire.encode(current))

    def _leaving(self, now: float):
        for inv in self._running.values():
            inv.cancelled.set()
        for turn in list(self._turns.values()):
            turn.cancel(SkillbusError("agent_lost", f"agent '{self.worker.name}' is shutting down"))
        if self._running and now < self._leave_by:
            return self._leave_by
        if self._registered:
            self._send(b"DISCONNECT")
        self.left.set()
        return None

    def on_message(self, frames: list[bytes]) -> None:
        self._last_heard = time.monotonic()
        try:
            fields = wire.BUS_TO_WORKER.unpack(frames)
        except wire.WireError as error:
            if error.fields[:2] == [wire.V1_WORKER, b"ERROR"] and len(error.fields) == 3:
                said = _error_in(error.fields[2])  # a v1 bus refuses each v2 message in v1 form (§10)
                return self._log(f"the bus speaks v1 (SKB1W), not SKB2W: {said.code}: {said.message}")
            return self._log(f"ignored {error.message}")
        command = fields[1]
        low, high = _FIELDS.get(command, (None, None))
        if low is None or not low <= len(fields) <= high:
            return self._log(f"ignored {command[:16]!r} with {len(fields)} fields")
        if command != b"ERROR":
            self.choice.answered()  # a group's next move after this goes without back-off
        if command == b"INVOKE":
            self._invoke(fields)
        elif command == b"CANCEL":
            cancelled = fields[2].decode("utf-8", errors="replace")
            inv, turn = self._running.get(cancelled), self._turns.get(cancelled)
            if inv is not None:  # an id that already finished is ignored (§4.9)
                inv.cancelled.set()
            if turn is not None:  # a turn id (§3.7): the turn ends cancelled at once
                turn.cancel()
        elif command == b"HEARTBEAT" and len(fields) == 3:
            if fields[2].isdigit() and 10 <= int(fields[2]) <= 3_600_000:
                self._bus_heartbeat_ms = int(fields[2])
        elif command == b"WELCOME":
            self._on_welcome(fields[2])
        elif command == b"ERROR":
            self._on_error(fields[2])
        elif command == b"QUERY":
            self._send(b"ANSWER", fields[2], b"error",
                       _error("unsupported", f"agent '{self.worker.name}' keeps no context store"))
        elif command == b"TURN":
            self._take_turn(fields)

    def _on_welcome(self, body: bytes) -> None:
        try:
            welcome = jsonwire.loads(body)
            keys = ("accepted", "refused", "feed", "epoch", "heartbeatMs")
            if not isinstance(welcome, dict) or any(k not in welcome for k in keys):
                raise ValueError(f"a WELCOME needs {', '.join(keys)}")
            heartbeat = int(welcome["heartbeatMs"])
        except (ValueError, TypeError) as error:
            return self._log(f"ignored a malformed WELCOME: {error}")
        self._bus_heartbeat_ms = min(max(heartbeat, 10), 3_600_000)
        self._registered, self._awaiting_welcome = True, False
        self._backoff = _BACKOFF_MIN_S
        self._state_sent = None  # a registration resets the bus's view to idle: say the state again
        self._next_heartbeat = time.monotonic() + self.worker.heartbeat_ms / 1000
        for refused in welcome["refused"]:
            self._log(f"skill refused: {refused}")
        self.worker._start_replica(self.worker._feed or feed_for(self.worker.coordinator, welcome["feed"]))
        self.welcome = welcome
        self.welcomed.set()  # after the replica exists: whoever waited for this may use it
        self._offer_skills()  # skills declared while the READY was on its way

    def _on_error(self, body: bytes) -> None:
        error = _error_in(body)
        if error.code == "not_leader":
            return self._follow_refusal(error)
        self.choice.answered()
        if error.code == "not_registered":
            # Answers come in order (§4.2): one that arrives while our READY waits refers to an older message.
            if not self._awaiting_welcome:
                self._registered = False
                self._timers(time.monotonic())
        elif error.code in ("name_taken", "invalid_registration", "not_allowed"):
            self._awaiting_welcome = False
            self._log(f"registration refused: {error.code}: {error.message}")
        else:
            self._log(f"the bus refused a message: {error.code}: {error.message}")

    def _invoke(self, fields: list[bytes]) -> None:
        """§4.10: steps 1-6 run nothing and send no STATE; then the skill runs on the pool, or here when
        it is quick. Fields: 2 invocation id, 3 round id, 4 session, 5 skill, 6 deadline, 7 parameters;
        each is decoded only where it is needed (a quick skill without `context` needs the skill alone)."""
        worker, key, skill_id = self.worker, fields[2], fields[5].decode("utf-8", errors="replace")
        skill = worker._skills.get(skill_id)  # one dict read: atomic, no copy of the catalog per INVOKE
        if self._leave_by is not None:
            return self._refuse(key, "agent_lost", f"agent '{worker.name}' is shutting down")
        if len(self._running) >= worker.capacity:
            return self._refuse(key, "busy", f"agent '{worker.name}' is at capacity ({worker.capacity})")
        limit = skill.concurrency if skill else None
        if limit is not None and sum(1 for i in self._running.values() if i.skill == skill_id) >= limit:
            return self._refuse(key, "busy",
                                f"agent '{worker.name}' is at the concurrency limit of '{skill_id}' ({limit})")
        if skill is None:
            offered = ", ".join(sorted(worker.skills())) or "none"
            return self._refuse(key, "unknown_skill",
                                f"agent '{worker.name}' does not offer '{skill_id}' (offers: {offered})")
        try:
            params = jsonwire.loads(fields[7])
        except ValueError as error:
            return self._refuse(key, "invalid_parameters", f"parameters of '{skill_id}' are not valid JSON: {error}")
        if type(params) is not dict:
            return self._refuse(key, "invalid_parameters",
                                f"parameters of '{skill_id}' must be a JSON object, got {jsonwire.type_name(params)}")
        try:
            values = schema.validated(skill_id, skill.params, params)
        except SkillbusError as error:
            return self._refuse(key, error.code, error.message, error.details)
        self._current_skill = skill_id
        if skill.quick and not skill.wants_context:
            # Here, on the socket thread: it starts and ends before the loop next waits, so the STATE rule
            # coalesces it away (§4.10) and its RESULT is all it sends.
            status, payload, failure = _outcome(skill, skill_id, None, values)
            self._send_result(key, status, payload)
            if failure is not None:
                self._failed(failure)
            return
        inv = Invocation(self.worker, key.decode("utf-8", errors="replace"), skill_id,
                         fields[3].decode("utf-8", errors="replace"), fields[4].decode("utf-8", errors="replace"),
                         int(fields[6]) if fields[6].isdigit() else 0, self.worker.max_output_bytes,
                         wake=_nothing if skill.quick else self._socket.wake)
        inv.key = key  # echoed byte for byte in its RESULT
        if skill.quick:
            self._answer(inv, *_outcome(skill, skill_id, inv, values), time.monotonic())
            return
        self._running[inv.id] = inv
        self.worker._pool.submit(self._execute, skill, inv, values)

    def _refuse(self, key: bytes, code: str, message: str, details=None) -> None:
        """An INVOKE that fails steps 1-6 of §4.10: its RESULT, and no STATE."""
        self._send_result(key, b"error", _error(code, message, details))

    def _send_result(self, key: bytes, status: bytes, payload: bytes) -> None:
        """RESULT, folded (§2.1) and spelled here: the one message of every invocation."""
        if len(key) < wire.LONG and len(payload) < wire.LONG:
            self._socket.send([_RESULT_ENVELOPE + _LENGTHS[len(key)] + key + _LENGTHS[len(status)] + status
                               + _LENGTHS[len(payload)] + payload])
        else:
            self._send(b"RESULT", key, status, payload)

    def _failed(self, reason: str) -> None:
        """STATE failed after a failed invocation's RESULT (§4.10 rule 4)."""
        if self._registered:
            self._state_sent = {"reason": reason, "state": "failed"}
            self._send(b"STATE", jsonwire.encode(self._state_sent))

    def _execute(self, skill, inv: Invocation, values: dict) -> None:
        """On a pool thread: runs the skill and queues its outcome for the socket thread."""
        self._finished.put((inv, *_outcome(skill, inv.skill, inv, values)))
        self._socket.wake()

    def _finish_invocations(self, now: float) -> None:
        """Answers the invocations the pool finished."""
        while not self._finished.empty():
            inv, status, payload, failure = self._finished.get()
            if self._running.get(inv.id) is not inv:
                continue  # one of a coordinator left: no RESULT (§4.4 item 6)
            del self._running[inv.id]
            self._answer(inv, status, payload, failure, now)

    def _answer(self, inv: Invocation, status: bytes, payload: bytes, failure: str | None, now: float) -> None:
        """On the wire: the last OUTPUT, RESULT, then STATE failed for a failure (§4.10 rule 4)."""
        key = inv.key
        batch = inv.take_batch(now, final=True)
        if batch is not None:
            self._send(b"OUTPUT", key, str(batch[0]).encode(), jsonwire.encode(batch[1]))
        self._send_result(key, status, payload)
        if failure is not None:
            self._failed(failure)

    def _send_output(self, now: float) -> None:
        for inv in self._running.values():
            batch = inv.take_batch(now)
            if batch is not None:
                self._send(b"OUTPUT", inv.key, str(batch[0]).encode(), jsonwire.encode(batch[1]))

    # --- turns (§3.7) ----------------------------------------------------------------------------

    def _take_turn(self, fields: list[bytes]) -> None:
        """Starts a turn on a thread of its own; refuses one it cannot take with TURNEND `error`."""
        def refuse(code: str, message: str) -> None:
            self._send(b"TURNEND", fields[2], b"error", _error(code, message))

        name = self.worker.name
        if self.worker.planner is None:
            return refuse("unsupported", f"agent '{name}' has no planner")
        if self._leave_by is not None:
            return refuse("agent_lost", f"agent '{name}' is shutting down")
        try:
            team = jsonwire.loads(fields[8]) if len(fields) == 9 and fields[8] else None
        except ValueError as error:
            return refuse("malformed_message", f"TURN field 8 (team) is not JSON: {error}")
        if not (team is None or isinstance(team, dict)) or not fields[5].isdigit():
            return refuse("malformed_message", "TURN needs an integer deadline (field 5) and an object as field 8")
        text = [f.decode("utf-8", errors="replace") for f in fields[2:7]]
        turn = AgentTurn(self.worker, self._sender(), {
            "turn": text[0], "round": text[1], "session": text[2], "deadline_ms": int(text[3]), "message": text[4],
            "lease": fields[7] == b"1"}, TeamContext.read(team, self._team_members()))
        self._turns[turn.id] = turn
        threading.Thread(target=turn.run, args=(self.worker.planner,), name=f"turn-{turn.id}", daemon=True).start()

    def _team_members(self) -> list[dict]:
        """The other live agents with a planner, from the registry replica (§5.10)."""
        replica = self.worker.replica
        entries = replica.entries() if replica is not None else {}
        return [{k: entry[k] for k in ("agent", "role", "description") if k in entry}
                for name, entry in sorted(entries.items()) if entry.get("planner") and name != self.worker.name]

    def _watch_turns(self, now: float) -> list[float]:
        """Ends the turns whose deadline passed; forgets those that ended. Returns the deadlines to wake at."""
        for turn_id, turn in list(self._turns.items()):
            turn.expire_if_due(now)
            if turn.ended:
                del self._turns[turn_id]
                self._state_sent = None  # the turn's last state stands until the agent's own is said again
        return [turn.deadline for turn in self._turns.values()]
