"""The client side of the bus: `SKB2C` (PROTOCOL §3, in wire v2 framing: `wire.py`)."""

from __future__ import annotations

import itertools
import os
import random
import threading
import uuid

import zmq

from . import jsonwire, wire
from .call import Call, SubmittedCall
from .errors import SkillbusError, error_for
from .socketthread import SocketThread

DEFAULT_COORDINATOR = "tcp://127.0.0.1:5555"
_MAX_TIMEOUT_MS = 86_400_000
_QUERY_WAIT_S = 5.0  # SKILLS, AGENTS, SNAPSHOT and a round-wide CANCEL (§3.3)
_EXPIRY_CHECK_S = 0.25  # how often the socket thread looks for submitted calls past their wait


def coordinator_endpoint(endpoint: str | None = None) -> str:
    """`endpoint`, else $SKILLBUS_COORDINATOR (as the `skillbus` commands read it), else the default."""
    return endpoint or os.environ.get("SKILLBUS_COORDINATOR") or DEFAULT_COORDINATOR


def new_round_id() -> str:
    """A fresh round id: a lower-case UUID, as the reference client makes them (§2 "Identifiers")."""
    return str(uuid.uuid4())


class Client:
    """A connection to the bus for asking things: calls, rounds, turns, listings and cancels.

    Thread-safe: many calls may be in flight at once from any threads; one socket thread owns the
    DEALER, and lends it to a thread making a blocking call while it has nothing else to watch, so a
    lone call is sent and read on its own thread (`SocketThread.borrow`). Every method that waits
    raises `SkillbusError` (code and message of §6) when the answer says `error`, or `unreachable`
    when nothing came within the timeout plus one second.

        with Client("tcp://127.0.0.1:5555") as client:
            print(client.request("echo", {"text": "hi"}).value)

    `confirm(skill, params) -> bool` answers the bus's CONFIRM for skills that need approval (§3.8),
    on the thread that waits for the call; without it every such call is refused.
    """

    def __init__(self, coordinator: str | None = None, *, timeout: float = 15.0, confirm=None,
                 context: zmq.Context | None = None, max_message_bytes: int = 1_048_576):
        self.coordinator = coordinator = coordinator_endpoint(coordinator)
        self.timeout = timeout
        self._confirm = confirm
        self._pending: dict[bytes, Call] = {}
        # The pending calls of submit() and submit_round(): the socket thread times them out.
        self._submitted: dict[bytes, SubmittedCall] = {}
        self._next_expiry_check = 0.0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._prefix = "".join(random.choice("0123456789abcdefghijklmnopqrstuvwxyz") for _ in range(7))
        self._closed = False
        # A short linger lets a CANCEL sent just before close (Ctrl-C, say) still leave.
        options = {zmq.LINGER: 200, zmq.MAXMSGSIZE: 4 * max_message_bytes + 4096, zmq.SNDHWM: 100_000}
        self._socket = SocketThread(context or zmq.Context.instance(), zmq.DEALER, coordinator, self,
                                    name="skillbus-client", options=options)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def close(self) -> None:
        """Closes the connection; calls still waiting fail with `unreachable`."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        for call in pending:
            call._abandon(SkillbusError("unreachable", "the client was closed"))
        self._socket.stop()

    # --- one skill -------------------------------------------------------------------------------

    def request(self, skill: str, params: dict | None = None, *, round_id: str = "", session: str = "",
                timeout: float | None = None, on_output=None):
        """Runs one skill with a REQUEST (§3.1) and returns its `Reply`; `on_output(Output)` sees
        partial output as it comes. An empty `round_id` takes part in no round (§3.4)."""
        return self._blocking(lambda: self.start_request(skill, params, round_id=round_id, session=session,
                                                         timeout=timeout, on_output=on_output))

    def start_request(self, skill: str, params: dict | None = None, *, round_id: str = "", session: str = "",
                      timeout: float | None = None, on_output=None) -> Call:
        """Sends a REQUEST and returns its `Call` at once (for `events()`, `cancel()`, `result()`)."""
        return self._start(b"REQUEST", *self._request_fields(skill, params, round_id, session, timeout), on_output)

    def _request_fields(self, skill, params, round_id: str, session: str, timeout: float | None):
        """Fields 3-7 of a REQUEST (§3.1), its kind and how long to wait for its answer."""
        if not isinstance(skill, str) or not skill:
            raise ValueError(f"a skill identifier is needed, got {skill!r}")
        timeout_ms = self._timeout_ms(timeout)
        fields = [round_id.encode(), session.encode(), skill.encode(), str(timeout_ms).encode(), self._params(params)]
        return fields, "REQUEST", timeout_ms / 1000 + 1

    def submit(self, skill: str, params: dict | None = None, *, round_id: str = "", session: str = "",
               timeout: float | None = None, on_output=None) -> SubmittedCall:
        """Sends a REQUEST and returns at once its `SubmittedCall`, a future of its `Reply`.

        For many requests in flight from one thread: `call.result()` returns the `Reply` or raises
        `SkillbusError`, and `call.add_done_callback(fn)` runs `fn(call)` on the thread that reads the
        answer (the client's socket thread, or a thread in a blocking call of this client for the time
        being) when it comes: keep it short, it holds up every other answer; it may submit more.
        `on_output(Output)` runs there too; `call.cancel()` sends CANCEL (§3.10).

            calls = [client.submit("echo", {"text": str(n)}) for n in range(64)]
            texts = [call.result().value for call in calls]
        """
        return self._start(b"REQUEST", *self._request_fields(skill, params, round_id, session, timeout),
                           on_output, SubmittedCall)

    # --- rounds (§3.5) ---------------------------------------------------------------------------

    def invoke(self, skill: str, params: dict | None = None, **options):
        """A round of one invocation; returns its `RoundDocument` (raises `RoundFailed` on error)."""
        return self.round({"invoke": {"skill": skill, "params": self._checked_params(params)}}, **options)

    def fanout(self, skill: str, params: dict | None = None, *, agents="all", aggregate: str = "all", **options):
        """One skill on several agents (`agents`: "all" or a list of names); `aggregate` is
        all, first or majority (§3.5.5)."""
        body = {"skill": skill, "params": self._checked_params(params), "agents": agents, "aggregate": aggregate}
        return self.round({"fanout": body}, **options)

    def plan(self, steps: list[dict], *, on_failure: str = "stop", **options):
        """A plan of steps (`{"id", "skill", "params", "after"}`, §3.5.1), references included."""
        return self.round({"plan": {"steps": steps, "onFailure": on_failure}}, **options)

    def round(self, body: dict, *, round_id: str | None = None, session: str = "", timeout: float | None = None,
              priority: str | None = None, retries: int | None = None, no_cache: bool = False, on_output=None):
        """Sends a ROUND with `body` (one of the shapes of §3.5.1) and returns its `RoundDocument`."""
        return self._blocking(lambda: self.start_round(body, round_id=round_id, session=session, timeout=timeout,
                                                       priority=priority, retries=retries, no_cache=no_cache,
                                                       on_output=on_output))

    def start_round(self, body: dict, *, round_id: str | None = None, session: str = "",
                    timeout: float | None = None, priority: str | None = None, retries: int | None = None,
                    no_cache: bool = False, on_output=None) -> Call:
        """Sends a ROUND and returns its `Call` at once; the round id is in `call.round_id`."""
        return self._start_round(Call, body, round_id, session, timeout, priority, retries, no_cache, on_output)

    def submit_round(self, body: dict, *, round_id: str | None = None, session: str = "",
                     timeout: float | None = None, priority: str | None = None, retries: int | None = None,
                     no_cache: bool = False, on_output=None) -> SubmittedCall:
        """Sends a ROUND and returns at once its `SubmittedCall`, a future of its `RoundDocument`, as
        `submit` does for a REQUEST; a round that fails resolves it with `RoundFailed`."""
        return self._start_round(SubmittedCall, body, round_id, session, timeout, priority, retries, no_cache,
                                 on_output)

    def _start_round(self, call_class, body, round_id, session, timeout, priority, retries, no_cache, on_output):
        if not isinstance(body, dict) or len(body) != 1:
            raise ValueError("a round body is an object with one key: invoke, fanout, plan, ask or asks")
        shape, inner = next(iter(body.items()))
        inner = dict(inner)
        for key, value in (("priority", priority), ("retries", retries), ("noCache", no_cache or None)):
            if value is not None:
                inner[key] = value
        timeout_ms = self._timeout_ms(timeout)
        round_id = round_id or new_round_id()
        fields = [round_id.encode(), session.encode(), str(timeout_ms).encode(), jsonwire.encode({shape: inner})]
        call = self._start(b"ROUND", fields, "ROUND", timeout_ms / 1000 + 1, on_output, call_class)
        call.round_id = round_id
        return call

    # --- turns (§3.7) ----------------------------------------------------------------------------

    def ask(self, message: str, *, agent: str = "", session: str = "", round_id: str | None = None,
            timeout: float | None = None, progress: bool = False):
        """Asks an agent (a name, `role:NAME`, or "" for the session's) to take a turn; returns the `Turn`
        (raises `TurnFailed`)."""
        return self._blocking(lambda: self.start_ask(message, agent=agent, session=session, round_id=round_id,
                                                     timeout=timeout, progress=progress))

    def start_ask(self, message: str, *, agent: str = "", session: str = "", round_id: str | None = None,
                  timeout: float | None = None, progress: bool = False, parent_turn: str = "") -> Call:
        """Sends an ASK; `events()` of the call yields the reply's pieces (and `Progress` with `progress`).
        `parent_turn` makes it a step of that running turn (field 9, §3.7.1: an agent delegating)."""
        timeout_ms = self._timeout_ms(timeout)
        flag = b"progress" if progress else b""
        optional = [flag, parent_turn.encode()] if parent_turn else [flag] if progress else []
        fields = [(round_id or new_round_id()).encode(), session.encode(), agent.encode(),
                  str(timeout_ms).encode(), message.encode(), *optional]
        return self._start(b"ASK", fields, "ASK", timeout_ms / 1000 + 1, None)

    # --- listings and cancels --------------------------------------------------------------------

    def skills(self) -> list[dict]:
        """The catalog (§5.9): every skill on offer with its providers and their load."""
        return self._blocking(lambda: self._start(b"SKILLS", [], "SKILLS", _QUERY_WAIT_S, None))["skills"]

    def agents(self) -> dict:
        """The agents listing (§5.13): `{"agents": [...], "registry": position, ...}`."""
        return self._blocking(lambda: self._start(b"AGENTS", [], "AGENTS", _QUERY_WAIT_S, None))

    def snapshot(self, timeout: float = _QUERY_WAIT_S):
        """The whole registry at one sequence number (`Snapshot`, §3.3); a short one is refused."""
        return self._blocking(lambda: self.start_snapshot(timeout))

    def start_snapshot(self, timeout: float = _QUERY_WAIT_S) -> Call:
        return self._start(b"SNAPSHOT", [], "SNAPSHOT", timeout, None)

    def cancel_round(self, round_id: str) -> dict:
        """Cancels everything of a round, whoever sent it (CANCEL with 4 fields, §3.10); returns what was
        stopped: `{"round", "requests", "rounds", "turns", "stopped"}`."""
        if not round_id:
            raise ValueError("cancel_round needs a round id")
        return self._blocking(lambda: self._start(b"CANCEL", [round_id.encode()], "CANCEL", _QUERY_WAIT_S, None))

    # --- internals -------------------------------------------------------------------------------

    def _blocking(self, start):
        """`start()` (which sends a call) then the call's answer. When the socket thread has nothing to
        watch, this thread borrows the socket: it sends the call itself and reads until its answer has
        come, so neither the call nor its answer waits for another thread to wake up (two hand-overs,
        about 80 us of a one-in-flight request's p50 in make python-bench)."""
        if not self._socket.borrow():
            return start().result()
        try:
            call = start()
            call._serve = self._socket.serve_until
            return call.result()
        finally:
            self._socket.give_back()

    def _start(self, command: bytes, fields: list[bytes], kind: str, wait_s: float, on_output,
               call_class=Call) -> Call:
        """Sends a command with a fresh request id and registers its call."""
        call = call_class(self, f"{self._prefix}-{next(self._ids)}", kind, wait_s, on_output)
        key = call._key
        with self._lock:
            if self._closed:
                raise SkillbusError("unreachable", "the client is closed")
            self._pending[key] = call
            if call_class is SubmittedCall:
                self._submitted[key] = call
        self._send(command, key, *fields)
        return call

    def _send(self, *fields: bytes) -> None:
        """Sends fields 1, 2, ... (the command first) in wire v2 framing."""
        self._socket.send(wire.CLIENT_TO_BUS.pack(*fields))

    def _forget(self, request_id: str) -> None:
        key = request_id.encode()
        with self._lock:
            self._pending.pop(key, None)
            self._submitted.pop(key, None)

    def _approve(self, skill: str, params) -> bool:
        return bool(self._confirm and self._confirm(skill, params))

    def _timeout_ms(self, timeout: float | None) -> int:
        seconds = self.timeout if timeout is None else timeout
        timeout_ms = int(round(seconds * 1000))
        if not 1 <= timeout_ms <= _MAX_TIMEOUT_MS:
            raise ValueError(f"a timeout must be from 0.001 s to one day, got {seconds!r} s")
        return timeout_ms

    @staticmethod
    def _checked_params(params) -> dict:
        if params is None:
            return {}
        if not isinstance(params, dict):
            raise TypeError(f"parameters are a dict (a JSON object), got {type(params).__name__}")
        return params

    def _params(self, params) -> bytes:
        return jsonwire.encode(self._checked_params(params))

    # Socket thread.
    def on_message(self, frames: list[bytes]) -> None:
        try:
            fields = wire.BUS_TO_CLIENT.unpack(frames)
        except wire.WireError as error:
            return self._undelivered(error)
        if len(fields) < 3:
            return
        with self._lock:
            call = self._pending.get(fields[2])
        if call is not None:
            call._deliver(fields)  # anything for an id nobody waits for is dropped (§3.3)

    def _undelivered(self, error: wire.WireError) -> None:
        """A message that did not unpack fails the call it names, if it can be read that far."""
        fields = error.fields
        if fields[:2] == [wire.V1_CLIENT, b"ERROR"] and len(fields) == 4:
            # A v1 bus refuses each v2 message in v1 form (§10), with no request id of ours in it
            # (a v2 message has no frame 2 to echo): every call waiting now fails the same way.
            try:
                said = error_for(jsonwire.loads(fields[3])).message
            except ValueError:
                said = "an ERROR whose body is not JSON"
            refusal = SkillbusError("unsupported_protocol", f"the bus speaks v1 (SKB1C), not SKB2C: {said}")
            with self._lock:
                calls = list(self._pending.values())
            for call in calls:
                call._abandon(refusal)
            return
        with self._lock:
            call = self._pending.get(fields[2]) if len(fields) > 2 else None
        if call is None:
            raise error  # the socket thread logs it
        call._abandon(error)

    def idle(self) -> bool:
        """No call waits for an answer: the socket thread may lend the socket to a blocking call (`_blocking`)."""
        return not self._pending

    def before_poll(self, now: float):
        """Fails submitted calls that waited past their time; wakes again while any are pending."""
        if not self._submitted:
            return None
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + _EXPIRY_CHECK_S
            with self._lock:
                calls = list(self._submitted.values())
            for call in calls:
                call._expire(now)
        return self._next_expiry_check
