"""The client side of the bus: `SKB2C` (PROTOCOL §3, in wire v2 framing: `wire.py`)."""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
import uuid

import zmq

from . import jsonwire, wire
from .call import Call, SubmittedCall
from .errors import SkillbusError, error_for
from .keys import curve_options
from .socketthread import SocketThread

DEFAULT_COORDINATOR = "tcp://127.0.0.1:5555"
_MAX_TIMEOUT_MS = 86_400_000
_QUERY_WAIT_S = 5.0  # SKILLS, AGENTS, SNAPSHOT and a round-wide CANCEL (§3.3)
_EXPIRY_CHECK_S = 0.25  # how often the socket thread looks for submitted calls past their wait


def coordinator_endpoint(endpoint: str | None = None) -> str:
    """`endpoint`, else $SKILLBUS_COORDINATOR (as the `skillbus` commands read it), else the default."""
    return endpoint or os.environ.get("SKILLBUS_COORDINATOR") or DEFAULT_COORDINATOR


def _endpoint_problem(text: str) -> str | None:
    """Why `text` is not one ZeroMQ endpoint (as the `skillbus` commands check it), or None."""
    if text.startswith("tcp://"):
        host, colon, port = text[6:].rpartition(":")
        if not colon:
            return f"'{text}' has no port (tcp://HOST:PORT)"
        if not host:
            return f"'{text}' has no host (tcp://HOST:PORT)"
        if port != "*" and not (port.isdigit() and 1 <= int(port) <= 65535):
            return f"'{text}' has an invalid port '{port}' (1-65535, or * for any free port)"
        return None
    if text.startswith(("ipc://", "inproc://")):
        return f"'{text}' has no path" if text.endswith("//") else None
    return f"'{text}' is not a ZeroMQ endpoint (use tcp://HOST:PORT, ipc://PATH or inproc://NAME)"


def coordinator_endpoints(coordinators=None) -> list[str]:
    """The coordinators of a group (PROTOCOL §3.3): a list of endpoints, or one string with commas between
    them; else $SKILLBUS_COORDINATOR, else the default. Each entry is checked: ValueError names a bad one."""
    if coordinators is None or coordinators == "":
        coordinators = coordinator_endpoint(None)
    return endpoint_list(coordinators, "coordinator")


def endpoint_list(given, what: str) -> list[str]:
    """`given` (a list of endpoints, or one string with commas between them) as a list, each entry checked:
    ValueError, starting with `what`, names a bad one."""
    if isinstance(given, str):
        text, entries = given, [entry.strip() for entry in given.split(",")]
    else:
        entries = list(given)
        text = ",".join(str(entry) for entry in entries)
        if not entries:
            raise ValueError(f"{what}: no endpoint given")
    seen = set()
    for index, entry in enumerate(entries, 1):
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"{what}: entry {index} of '{text}' is empty (a,b: endpoints between commas)")
        entry = entry.strip()
        problem = _endpoint_problem(entry)
        if problem is not None:
            raise ValueError(f"{what}: entry {index} of '{text}': {problem}" if len(entries) > 1
                             else f"{what}: {problem}")
        if entry in seen:
            raise ValueError(f"{what}: '{text}' names '{entry}' twice")
        seen.add(entry)
    return [entry.strip() for entry in entries]


FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
SILENCE_S = 1.0  # a group's coordinator silent this long while a call waits is probed, then left (§3.3)
_MOVES_AGAIN = {"ROUND", "SKILLS", "AGENTS", "SNAPSHOT"}  # what goes to the coordinator moved to on silence


def backoff(moves: int) -> float:
    """The wait before sending to a coordinator moved to, after `moves` moves with no answer in between (§3.3):
    none for the first, then 0.1 s doubling to 2 s."""
    if moves <= 0:
        return 0.0
    return min(FIRST_BACKOFF_S * 2 ** min(moves - 1, 16), MAX_BACKOFF_S)


class CoordinatorChoice:
    """Which coordinator of a group a client talks to, and where a `not_leader` refusal sends it (§3.3): plain
    state, no sockets."""

    def __init__(self, endpoints: list[str]):
        self.endpoints = list(endpoints)
        self.current = 0
        self.moves_without_answer = 0
        self.not_before = 0.0
        self.last_heard: float | None = None  # anything from the current coordinator, a refusal too
        self.probe_sent: float | None = None  # a SKILLS sent to it that nothing has followed yet

    @property
    def endpoint(self) -> str:
        return self.endpoints[self.current]

    def answered(self) -> None:
        """Something other than a refusal came: the back-off starts again."""
        self.moves_without_answer = 0

    def heard(self, now: float) -> None:
        """Anything came from the current coordinator: it is not silent."""
        self.last_heard, self.probe_sent = now, None

    def tick(self, waiting: bool, now: float) -> str:
        """`nothing`, `probe` (nothing came for SILENCE_S while a call waits: ask a SKILLS) or `move` (nothing came
        for SILENCE_S after the probe either: call `leave`). A single endpoint is never left on silence."""
        if len(self.endpoints) < 2 or not waiting:
            self.probe_sent = None
            return "nothing"
        if now < self.not_before:
            return "nothing"
        if self.probe_sent is not None:
            return "move" if now - self.probe_sent >= SILENCE_S else "nothing"
        if self.last_heard is not None and now - self.last_heard < SILENCE_S:
            return "nothing"
        self.probe_sent = now
        return "probe"

    def next_tick(self, waiting: bool) -> float | None:
        """When `tick` next has something to decide, while a call waits."""
        if len(self.endpoints) < 2 or not waiting:
            return None
        if self.probe_sent is not None:
            return self.probe_sent + SILENCE_S
        if self.last_heard is None:
            return self.not_before
        return max(self.last_heard + SILENCE_S, self.not_before)

    def leave(self, now: float) -> tuple[str, str]:
        """Moves to the next endpoint (the current one fell silent); returns (from, to)."""
        before = self.endpoint
        self._move(lambda: (self.current + 1) % len(self.endpoints), now)
        return before, self.endpoint

    def _move(self, index, now: float) -> None:
        self.current = index()
        self.not_before = now + backoff(self.moves_without_answer)
        self.moves_without_answer += 1
        self.last_heard, self.probe_sent = None, None

    def refused(self, leader_bus: str | None, now: float) -> tuple[str, str] | None:
        """The current coordinator refused with `not_leader`, naming the leader's bus (or None): moves to it (added
        to the list when it lacks it), else to the next endpoint. Returns (from, to), or None when the leader named
        is the current one (a late refusal: nothing moves)."""
        if leader_bus and leader_bus == self.endpoint:
            return None
        before = self.endpoint
        if leader_bus and leader_bus not in self.endpoints:
            self.endpoints.append(leader_bus)
        target = self.endpoints.index(leader_bus) if leader_bus else (self.current + 1) % len(self.endpoints)
        self._move(lambda: target, now)
        return before, self.endpoint


def leader_bus(details) -> str | None:
    """The leader's bus a `not_leader` refusal names in its details (§3.11); None when it names none, or one that is
    no endpoint (the next endpoint of the list is then tried instead)."""
    leader = details.get("leader") if isinstance(details, dict) else None
    bus = leader.get("bus") if isinstance(leader, dict) else None
    return bus if isinstance(bus, str) and bus and _endpoint_problem(bus) is None else None


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

    For a coordinator with keys (§12), `server_key` is its public key and `key` this client's secret key,
    each a key or the file holding it (else SKILLBUS_SERVER_KEY and SKILLBUS_KEY); the DEALER then speaks
    CURVE.

    Every message goes folded into one frame (§2.1), and what the socket's thread sends before it next waits goes
    batched (§2.2): each pyzmq call costs a Python client several microseconds, and a box under CURVE.
    """

    def __init__(self, coordinator: str | list[str] | None = None, *, timeout: float = 15.0, confirm=None,
                 context: zmq.Context | None = None, max_message_bytes: int = 1_048_576, server_key=None,
                 key=None):
        curve = curve_options(server_key, key)  # ValueError names a missing or unreadable key
        self.keys = (server_key, key) if curve else (None, None)  # what a worker's replica connects with too
        # A group's coordinators (a list, or "a,b"): one at a time, following not_leader refusals (§3.3).
        self.choice = CoordinatorChoice(coordinator_endpoints(coordinator))
        self.coordinator = coordinator = self.choice.endpoint
        self._held: list[tuple[float, Call]] = []  # refused calls, to go again once the back-off has passed
        self._last_refusal = ""
        # Whether anything but the plain one-coordinator path can happen (a group, or a refusal seen): until
        # then an answer costs no bookkeeping.
        self._following = len(self.choice.endpoints) > 1
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
        options = {zmq.LINGER: 200, zmq.MAXMSGSIZE: 4 * max_message_bytes + 4096, zmq.SNDHWM: 100_000, **curve}
        self._socket = SocketThread(context or zmq.Context.instance(), zmq.DEALER, coordinator, self,
                                    name="skillbus-client", options=options, refusals=bool(curve), batching=True)

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
        # A skill step with its `after` and `params` written out is the body's canonical form (§3.5.8), which
        # the bus reads fastest.
        if isinstance(steps, list):
            steps = [{"after": [], "params": {}, **step} if isinstance(step, dict) and "ask" not in step else step
                     for step in steps]
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
        call._message = (command, fields)
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
        self._socket.send(wire.CLIENT_TO_BUS.pack(*fields, folded=True))

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
        if fields[1] == b"ERROR" and len(fields) == 4 and self._refused(fields[3], call):
            return
        if self._following:
            self.choice.heard(time.monotonic())
            self.choice.answered()
        if call is not None:
            call._deliver(fields)  # anything for an id nobody waits for is dropped (§3.3)

    def _refused(self, body: bytes, call) -> bool:
        """A `not_leader` refusal (§3.11): moves to the leader it names (else the next endpoint) and sends the
        refused message again once the back-off has passed. False for any other ERROR."""
        try:
            error = jsonwire.loads(body)
        except ValueError:
            return False
        if not isinstance(error, dict) or error.get("code") != "not_leader":
            return False
        self._following = True
        self.choice.heard(time.monotonic())
        moved = self.choice.refused(leader_bus(error.get("details")), time.monotonic())
        if moved is not None and moved[1] != moved[0]:
            self._socket.retarget(moved[1])
            self.coordinator = moved[1]
        self._last_refusal = error.get("message", "")
        if call is not None:
            self._held.append((max(self.choice.not_before, time.monotonic()), call))
        return True

    def _follow_silence(self, now: float) -> float | None:
        """A group's client: probes a coordinator silent for SILENCE_S while calls wait, and leaves one that
        answered nothing to the probe either for the next endpoint, where the waiting ROUNDs and reads go again
        (REQUEST, ASK and QUERY do not: they may have run, §3.5.9). Returns when to look again."""
        waiting = bool(self._pending)
        action = self.choice.tick(waiting, now)
        if action == "probe":
            self._send(b"SKILLS", f"probe-{self._prefix}-{next(self._ids)}".encode())
        elif action == "move":
            self._leave(now)
        return self.choice.next_tick(waiting)

    def connection_closed(self, now: float) -> None:
        """The connection to the coordinator ended (the package's own DEALER says so, pyzmq's does not): a group's
        client leaves it at once, as one that fell silent, instead of probing it first."""
        if len(self.choice.endpoints) >= 2:
            self._leave(now)

    def connection_refused(self, now: float) -> bool:
        """Nobody listens at the coordinator's endpoint (the own DEALER says so): a group's client with calls waiting
        leaves it at once, once the last move's back-off has passed (until then the refusal is kept: False),
        instead of probing it first."""
        if len(self.choice.endpoints) < 2 or not self._pending:
            return True
        if now < self.choice.not_before:
            return False
        self._leave(now)
        return True

    def _leave(self, now: float) -> None:
        """To the next endpoint, where the waiting ROUNDs and reads go again."""
        _, target = self.choice.leave(now)
        self._socket.retarget(target)
        self.coordinator = target
        with self._lock:
            calls = [call for call in self._pending.values() if call.kind in _MOVES_AGAIN]
        self._held.extend((self.choice.not_before, call) for call in calls)

    def _tried(self) -> str:
        """For an `unreachable` error: that the coordinator refused this client's key, or that nothing listens at its
        endpoint, and for a group's client every endpoint it may have tried, and the last refusal."""
        key = ": the coordinator refused this client's key" if self._socket.key_refused else ""
        key = key or self._socket.refused_connect
        if len(self.choice.endpoints) < 2 and not self._last_refusal:
            return key
        refusal = f"; the last refusal: {self._last_refusal}" if self._last_refusal else ""
        return f"{key} (coordinators tried in turn: {', '.join(self.choice.endpoints)}{refusal})"

    def _send_held(self, now: float) -> float | None:
        """Sends the refused calls whose back-off has passed (with the time they have left); returns when the
        next is due."""
        due = [call for at, call in self._held if at <= now]
        self._held = [(at, call) for at, call in self._held if at > now]
        for call in due:
            if call._done:
                continue
            if call.kind == "SNAPSHOT":
                call._entries = []  # entries of two registries never mix
            command, fields = call._message
            fields = list(fields)
            index = {b"REQUEST": 3, b"ROUND": 2, b"ASK": 3}.get(command)
            if index is not None:
                left_ms = int((call._deadline() - 1 - now) * 1000)
                fields[index] = str(max(1, left_ms)).encode()
            self._send(command, call._key, *fields)
        return min((at for at, _ in self._held), default=None)

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
        """Follows a group's leader (probes, moves, refused calls sent again when due); fails submitted calls that
        waited past their time; wakes again while any are pending."""
        follow = self._follow_silence(now) if len(self.choice.endpoints) > 1 else None
        held = self._send_held(now) if self._held else None
        held = follow if held is None else held if follow is None else min(held, follow)
        if not self._submitted:
            return held
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + _EXPIRY_CHECK_S
            with self._lock:
                calls = list(self._submitted.values())
            for call in calls:
                call._expire(now)
        return self._next_expiry_check if held is None else min(held, self._next_expiry_check)
