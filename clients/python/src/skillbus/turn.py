"""A turn a Python agent takes (PROTOCOL §3.7): its planner, the calls and asks it makes, its states and
its document (§5.18), and how it ends (TURNEND, §4.1)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from . import jsonwire
from .errors import Cancelled, SkillbusError, TurnFailed
from .results import Result


@dataclass(frozen=True)
class Handoff:
    """What a planner returns to hand the session over (§3.7.2): `to` an agent or `role:NAME`, and a note."""

    to: str
    note: str = ""


@dataclass(frozen=True)
class TeamContext:
    """Where a turn stands in its team (TURN field 8, §4.2), and who else is in it.

    `parent` and `caller`: the turn and agent that asked this one (None for a client's turn); `depth`: 0 for
    a client's turn, the parent's + 1 for a nested one; `handed_over_by`: `{"from", "note", "turn"}` when
    another agent handed the session over (§3.7.2); `agents`: the other live agents with a planner, as the
    worker's registry replica holds them (`{"agent", "role", "description"}`, the last two when declared).
    """

    parent: str | None = None
    caller: str | None = None
    depth: int = 0
    handed_over_by: dict | None = None
    agents: tuple = ()

    @staticmethod
    def read(field: dict | None, agents=()) -> "TeamContext":
        field = field or {}
        handoff = field.get("handoff")
        return TeamContext(field.get("parent"), field.get("caller"), int(field.get("depth") or 0),
                           handoff if isinstance(handoff, dict) else None, tuple(agents))


def timestamp(seconds: float) -> str:
    """A time as on the feed: ISO 8601 UTC with milliseconds (§7)."""
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class AgentTurn:
    """One turn, given to the planner as `turn`: `call(skill, params)` runs a skill through the bus as a
    REQUEST of the turn's round and session; `ask(target, message)` asks another agent (a nested turn,
    §3.7.1) and returns its reply. Both record a call in the turn's document and raise `SkillbusError` when
    it failed (`TurnFailed` for an ask). `message`, `session`, `round_id`, `id` and `team` say what was asked.
    """

    def __init__(self, worker, send, fields: dict, team: TeamContext):
        self.id = fields["turn"]
        self.round_id = fields["round"]
        self.session = fields["session"]
        self.message = fields["message"]
        self.team = team
        self.deadline = time.monotonic() + fields["deadline_ms"] / 1000
        self.cancelled = threading.Event()
        self._cancel_reason: SkillbusError | None = None  # set before `cancelled`: the planner's thread reads it
        self._worker = worker
        self._send = send  # sends one worker message (fields 1, 2, …) on the worker's connection; any thread
        if fields["lease"]:
            # This worker runs no call itself, so holding the round gains it nothing, while the round's other
            # calls (another agent's, in a team round) would wait for it: it gives the round back at once (§3.7).
            send(b"RELEASE", self.id.encode())
        self._lock = threading.Lock()
        self._ended = False
        self._states: list[dict] = []
        self._calls: list[dict] = []
        self._waiting: set = set()  # the Calls of the requests and asks in flight, to cancel them

    # --- for planners ----------------------------------------------------------------------------

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled("the turn was cancelled")

    def call(self, skill: str, params: dict | None = None, *, timeout: float | None = None) -> Result:
        """Runs `skill` as a REQUEST of the turn's round and session; returns its `Result`."""
        params = dict(params or {})
        self._enter({"skill": skill, "state": "executingSkill"}, parameters=params)
        entry = {"skill": skill, "parameters": params}
        start = self._start(lambda client, left: client.start_request(
            skill, params, round_id=self.round_id, session=self.session, timeout=left), timeout)
        try:
            reply = self._wait(start)
        except SkillbusError as error:
            self._ended_call(entry, start, error.agent or "", error=error)
            raise
        self._ended_call(entry, start, reply.agent, result=reply.result.to_json())
        return reply.result

    def ask(self, target: str, message: str, *, timeout: float | None = None) -> str:
        """Asks another agent (a name or `role:NAME`) as a step of this turn; returns its reply."""
        self._enter({"state": "delegating", "to": target})
        entry = {"ask": {"to": target, "message": message}}
        start = self._start(lambda client, left: client.start_ask(
            message, agent=target, session=self.session, round_id=self.round_id, timeout=left,
            parent_turn=self.id), timeout)
        try:
            turn = self._wait(start)
        except TurnFailed as error:
            nested = error.turn.raw if error.turn is not None else None
            if nested is None and isinstance(error.details, dict) and isinstance(error.details.get("turn"), dict):
                nested = error.details["turn"]  # a handoff the bus refused: the handing turn's document
            answered = error.agent or (nested or {}).get("agent", "")
            self._ended_call({**entry, "turn": nested}, start, answered, error=error)
            raise
        except SkillbusError as error:
            self._ended_call({**entry, "turn": None}, start, error.agent or "", error=error)
            raise
        reply = turn.reply or ""
        self._ended_call({**entry, "turn": turn.raw}, start, turn.agent,
                         result=Result.of_text(reply).to_json())
        return reply

    # --- the turn's life (the worker's side) ------------------------------------------------------

    def run(self, planner) -> None:
        """On the turn's own thread: asks the planner and ends the turn with what it returned."""
        self._enter({"state": "thinking"})
        try:
            outcome = planner(self.message, self.team, self)
        except SkillbusError as error:
            return self.fail(self._stopped() or error)
        except Exception as error:  # a planner's bug is the turn's failure, as a skill's is (§4.10 step 10)
            return self.fail(self._stopped() or SkillbusError("skill_failed", f"the planner failed: {error!r}"))
        if self._stopped() is not None:
            return self.fail(self._stopped())
        if isinstance(outcome, Handoff):
            return self._end("ok", None, {"to": outcome.to, "note": outcome.note})
        if isinstance(outcome, str):
            return self._end("ok", outcome, None)
        self.fail(SkillbusError("skill_failed",
                                f"the planner returned {type(outcome).__name__}, not a reply (str) or a Handoff"))

    def cancel(self, why: SkillbusError | None = None) -> None:
        """A CANCEL with this turn's id (§3.7), or the worker leaving (`why`): the turn stops its calls and
        ends at once, `cancelled` (or with `why`)."""
        # The reason first: a planner woken by `cancelled` may end the turn before this thread does.
        self._cancel_reason = why
        self.cancelled.set()
        with self._lock:
            waiting = list(self._waiting)
        for call in waiting:
            call.cancel()
        self.fail(why or SkillbusError("cancelled", "the turn was cancelled"))

    def expire_if_due(self, now: float) -> None:
        """Ends the turn with `timeout` once its deadline passed, whatever its planner still does."""
        if now >= self.deadline and not self._ended:
            self.cancelled.set()
            self.fail(self._stopped())

    def fail(self, error: SkillbusError) -> None:
        self._end("error", None, None, error)

    @property
    def ended(self) -> bool:
        return self._ended

    # --- internals -------------------------------------------------------------------------------

    def _stopped(self) -> SkillbusError | None:
        if self.time_left() <= 0:
            return SkillbusError("timeout", f"the turn ran out of time after {len(self._calls)} skill call(s)")
        if self.cancelled.is_set():
            return self._cancel_reason or SkillbusError("cancelled", "the turn was cancelled")
        return None

    def _enter(self, state: dict, parameters: dict | None = None) -> None:
        """Records a state of the turn and sends it as a STATE with the turn's session and id (§4.1)."""
        with self._lock:
            if self._ended:
                return
            self._states.append({**state, "time": timestamp(time.time())})
            body = {**state, "session": self.session, "turn": self.id}
            if parameters is not None:
                body["parameters"] = parameters
            self._send(b"STATE", jsonwire.encode(body))

    def _start(self, send_request, timeout: float | None) -> tuple:
        """Sends a call or an ask with the time the turn has left (or less); returns (started, its Call)."""
        stopped = self._stopped()
        if stopped is not None:
            raise stopped
        left = self.time_left() if timeout is None else min(timeout, self.time_left())
        call = send_request(self._worker._client, max(0.001, left))
        with self._lock:
            self._waiting.add(call)
        return time.monotonic(), call

    def _wait(self, start: tuple):
        try:
            return start[1].result()
        finally:
            with self._lock:
                self._waiting.discard(start[1])

    def _ended_call(self, entry: dict, start: tuple, agent: str, *, result=None, error=None) -> None:
        """Records an ended call (§5.18 `calls`) and sends it as a STEP (§4.1); the planner thinks again."""
        call = {**entry, "agent": agent, "durationMs": round((time.monotonic() - start[0]) * 1000, 3)}
        if error is None:
            call.update(status="ok", result=result)
        else:
            call.update(status="error", error=error.to_object())
        with self._lock:
            if self._ended:
                return
            self._calls.append(call)
            self._send(b"STEP", self.id.encode(), jsonwire.encode(call))
        self._enter({"state": "thinking"})

    def _end(self, status: str, reply, handoff, error: SkillbusError | None = None) -> None:
        """The last state, then TURNEND with the document (§5.18); only the first ending counts."""
        with self._lock:
            if self._ended:
                return
            last = {"state": "completed"} if error is None else {"reason": error.message, "state": "failed"}
            self._states.append({**last, "time": timestamp(time.time())})
            self._send(b"STATE", jsonwire.encode({**last, "session": self.session, "turn": self.id}))
            document = self._document(status, reply, handoff)
            if error is not None:
                document["error"] = error.to_object()
                body = SkillbusError(error.code, error.message, document).to_object()
            else:
                body = document
            self._ended = True
            fields = [b"TURNEND", self.id.encode(), status.encode(), jsonwire.encode(body)]
            self._send(*fields, *([jsonwire.encode(handoff)] if handoff is not None else []))

    def _document(self, status: str, reply, handoff) -> dict:
        document = {"turn": self.id, "round": self.round_id, "session": self.session,
                    "agent": self._worker.name, "status": status, "reply": reply,
                    "states": list(self._states), "calls": list(self._calls)}
        if self._worker.role:
            document["role"] = self._worker.role
        if self.team.parent is not None:
            document["parent"], document["depth"] = self.team.parent, self.team.depth
        if self.team.handed_over_by is not None:
            handing = self.team.handed_over_by
            document["handedOverBy"] = {"agent": handing.get("from"), "note": handing.get("note"),
                                        "turn": handing.get("turn")}
        if handoff is not None:
            document["handoff"] = handoff
        return document
