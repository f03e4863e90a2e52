"""A worker (agent) in Python: skills declared with a decorator, served over `SKB2W` (PROTOCOL §4, wire v2)."""

from __future__ import annotations

import concurrent.futures
import inspect
import re
import signal
import sys
import threading
from dataclasses import dataclass

import zmq

from . import schema
from .client import Client, coordinator_endpoints, endpoint_list
from .errors import SkillbusError
from .keys import curve_options
from .replica import Replica
from .results import Result
from .schema import Param
from .socketthread import SocketThread
from .worker_loop import WorkerLoop


@dataclass(frozen=True)
class Skill:
    """A registered skill: its descriptor (§5.2), its parameter fields and the function that runs it."""

    identifier: str
    params: tuple
    descriptor: dict
    function: object
    wants_context: bool
    quick: bool = False

    concurrency: int | None = None  # at most this many invocations at once on this agent (§5.2.1)

    def run(self, values: dict, context):
        """Calls the function with the validated parameters (and `context` when it takes one); `values`
        is the caller's own dict, which this may change."""
        if self.wants_context:
            values["context"] = context
        return Result.from_value(self.function(**values))

    def run_for_payload(self, values: dict, context) -> bytes:
        """`run`, returning the RESULT payload: a `str` goes to bytes without a `Result` in between."""
        if self.wants_context:
            values["context"] = context
        return Result.payload_of(self.function(**values))


def _params(declared) -> list[Param]:
    """`params` as the decorator takes them: a list of `Param`, or a dict of name -> type or Param."""
    if declared is None:
        return []
    if isinstance(declared, dict):
        return [p if isinstance(p, Param) else Param(name, p) for name, p in declared.items()]
    params = list(declared)
    for p in params:
        if not isinstance(p, Param):
            raise TypeError(f"params must be Param objects (or a dict of name -> type), got {p!r}")
    return params


class Worker:
    """An agent that offers skills to the coordinator.

        worker = Worker("py-upper", coordinator="tcp://127.0.0.1:5555")

        @worker.skill("py.upper", params={"text": "string"}, description="Upper-cases text")
        def upper(text):
            return text.upper()

        worker.run()  # until SIGINT or SIGTERM, then it leaves cleanly

    A skill gets its validated parameters as keyword arguments, and the `Invocation` as `context`
    when it declares that parameter. It returns a `str` (a text result), a `Result`, or any other
    JSON value (a json result); it fails by raising `SkillbusError` (its code travels) or anything
    else (`skill_failed`). Up to `capacity` invocations run at once, each on its own thread.
    The worker keeps a registry replica (`worker.replica`, §8) fed from the coordinator's feed.
    `coordinator` defaults to $SKILLBUS_COORDINATOR, else tcp://127.0.0.1:5555. For a coordinator group it
    names every coordinator (a list, or "a,b"): the worker registers with the leader, following a `not_leader`
    refusal to it, and moves to the next coordinator when its own falls silent (§4.4 item 6); `coordinator` is
    the one it talks to now.

    With a `planner` the worker takes turns (§3.7), in a team when it has a `role` (and a `description`
    for other agents' planners, §5.1): `planner(message, team, turn)` gets the message, the
    `TeamContext` and the `AgentTurn`, calls skills with `turn.call(skill, params)` and other agents
    with `turn.ask(target, message)`, and returns the reply (a `str`) or a `Handoff(to, note)`.

    For a coordinator with keys (§12), `server_key` and `key` (this worker's secret key) as `Client` takes
    them: its DEALER, its client and its replica's SUB all speak CURVE.
    """

    def __init__(self, name: str, *, coordinator: str | None = None, capacity: int = 4,
                 heartbeat_ms: int = 1000, feed: str | None = None, replica: bool = True,
                 max_output_bytes: int = 1_048_576, context: zmq.Context | None = None, planner=None,
                 role: str | None = None, description: str | None = None, server_key=None, key=None):
        if not schema.is_identifier(name):
            raise ValueError(f"agent name {name!r} is invalid: use 1-128 of A-Z a-z 0-9 . _ -")
        if not (isinstance(capacity, int) and 1 <= capacity <= 100_000):
            raise ValueError(f"capacity must be an integer from 1 to 100000, got {capacity!r}")
        if not (isinstance(heartbeat_ms, int) and 10 <= heartbeat_ms <= 3_600_000):
            raise ValueError(f"heartbeat_ms must be an integer from 10 to 3600000, got {heartbeat_ms!r}")
        if planner is not None and not callable(planner):
            raise TypeError(f"planner must be a function (message, team, turn) -> reply or Handoff, got {planner!r}")
        if role is not None and not (isinstance(role, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", role)):
            raise ValueError(f"role {role!r} is invalid: use 1-64 of A-Z a-z 0-9 _ -")
        if description is not None and not (isinstance(description, str) and len(description.encode()) <= 1024):
            raise ValueError("description must be a string of at most 1024 bytes")
        self._curve = curve_options(server_key, key)  # ValueError names a missing or unreadable key
        self._keys = (server_key, key)
        self.name = name
        self.planner, self.role, self.description = planner, role, description
        self.coordinators = coordinator_endpoints(coordinator)  # ValueError names a bad entry
        self.coordinator = self.coordinators[0]
        self.capacity = capacity
        self.heartbeat_ms = heartbeat_ms
        self.max_output_bytes = max_output_bytes
        self.replica: Replica | None = None
        self._feed = endpoint_list(feed, "feed") if feed else None
        self._wants_replica = replica
        self._context = context or zmq.Context.instance()
        self._skills: dict[str, Skill] = {}
        self._lock = threading.Lock()
        self._loop: WorkerLoop | None = None
        self._socket: SocketThread | None = None
        self._client: Client | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._stop_signal = threading.Event()

    # --- skills ----------------------------------------------------------------------------------

    def skill(self, identifier: str, *, params=None, description: str = "", display_name: str | None = None,
              concurrency: int | None = None, default_timeout_ms: int | None = None, idempotent: bool = False,
              confirm: bool = False, metadata: dict | None = None, quick: bool = False):
        """Declares the decorated function as the skill `identifier` with these parameter fields.

        `quick=True` says the function returns within microseconds and never blocks (no I/O, no
        sleeping, no `context.call`): it then runs on the worker's socket thread as its INVOKE is read,
        with no hop to the thread pool, and a burst of quick invocations costs one RESULT each and no
        STATE (PROTOCOL §4.10, "STATE rule"). While it runs the worker reads nothing else, so it
        cannot be cancelled and a slow one delays every other message.

        `concurrency` bounds how many of its invocations run at once on this agent (§5.2.1);
        `confirm` makes every call wait for its client's approval (§3.8); `idempotent` says that
        running it twice does no more than running it once (§5.2.1).
        Declared while the worker runs, the skill is offered at once (SKILLS, §4.11).
        """
        fields = _params(params)
        body = schema.descriptor(identifier, fields, display_name=display_name, description=description,
                                 concurrency=concurrency, default_timeout_ms=default_timeout_ms,
                                 idempotent=idempotent, confirm=confirm, metadata=metadata)

        def register(function):
            wants_context = self._check_signature(identifier, function, fields)
            with self._lock:
                if identifier in self._skills:
                    raise ValueError(f"skill '{identifier}' is declared twice on worker '{self.name}'")
                self._skills[identifier] = Skill(identifier, tuple(fields), body, function, wants_context, quick,
                                                 concurrency)
            if self._loop is not None:
                self._loop.skills_changed()
            return function

        return register

    def remove_skill(self, identifier: str) -> None:
        """Withdraws a skill; running invocations of it finish (§4.11)."""
        with self._lock:
            if self._skills.pop(identifier, None) is None:
                raise KeyError(f"worker '{self.name}' offers no skill '{identifier}'")
        if self._loop is not None:
            self._loop.skills_changed()

    def skills(self) -> dict[str, Skill]:
        with self._lock:
            return dict(self._skills)

    @staticmethod
    def _check_signature(identifier: str, function, fields: list[Param]) -> bool:
        parameters = inspect.signature(function).parameters
        wants_context = "context" in parameters
        if wants_context and any(p.name == "context" for p in fields):
            raise ValueError(f"skill '{identifier}': a parameter named 'context' clashes with the invocation context")
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        for p in fields:
            if not takes_any and p.name not in parameters:
                raise ValueError(f"skill '{identifier}': {function.__name__}() takes no parameter '{p.name}'")
        return wants_context

    # --- running ---------------------------------------------------------------------------------

    def start(self) -> "Worker":
        """Connects and registers in the background; returns at once."""
        if self._loop is not None:
            raise RuntimeError(f"worker '{self.name}' is already started")
        self._pool = concurrent.futures.ThreadPoolExecutor(self.capacity, thread_name_prefix=f"skill-{self.name}")
        self._client = Client(self.coordinators, context=self._context, server_key=self._keys[0], key=self._keys[1])
        self._loop = WorkerLoop(self)
        options = {zmq.LINGER: 200, zmq.RECONNECT_IVL: 1000, zmq.RECONNECT_IVL_MAX: 32000,
                   zmq.MAXMSGSIZE: 4 * 1_048_576 + 4096, zmq.SNDHWM: 100_000, **self._curve}
        self._socket = SocketThread(self._context, zmq.DEALER, self.coordinator, self._loop,
                                    name=f"skillbus-worker-{self.name}", options=options, refusals=bool(self._curve),
                                    batching=True)
        self._loop.attach(self._socket)
        return self

    def wait_registered(self, timeout: float = 10.0) -> dict:
        """Waits for the first WELCOME and returns it (§5.7); raises `SkillbusError` `unreachable`."""
        if self._loop is None or not self._loop.welcomed.wait(timeout):
            why = self._socket.refused_connect if self._socket is not None else ""
            raise SkillbusError("unreachable", f"worker '{self.name}' got no WELCOME within {timeout:g} s{why}")
        return self._loop.welcome

    def stop(self, grace: float = 2.0) -> None:
        """Leaves gracefully: running invocations are cancelled and answered (within `grace`
        seconds), then DISCONNECT tells the bus to drop this agent and its skills at once (§4.4)."""
        if self._loop is None:
            return
        self._loop.leave(grace)
        self._loop.left.wait(grace + 1.0)
        self._socket.stop()
        self._client.close()  # first: a snapshot the replica waits for fails at once
        if self.replica is not None:
            self.replica.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop, self.replica = None, None

    def run(self) -> None:
        """Starts, serves until SIGINT or SIGTERM, then stops gracefully. Call it from the main thread.
        Says on standard error what it offers and where, when the coordinator welcomes it, and when it leaves,
        as `skillbus worker` does."""
        self._stop_signal.clear()
        previous = {s: signal.signal(s, lambda *_: self._stop_signal.set()) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            skills = ", ".join(sorted(self.skills())) or "no skills"
            group = f" (group: {', '.join(self.coordinators)})" if len(self.coordinators) > 1 else ""
            _say(f"worker '{self.name}': connecting to {self.coordinator}{group} with {skills}; Ctrl-C stops it")
            welcomed = self._loop.welcomed
            threading.Thread(target=lambda: welcomed.wait() and _say(f"worker '{self.name}': registered"),
                             name=f"skillbus-welcome-{self.name}", daemon=True).start()
            while not self._stop_signal.wait(3600):
                pass
        finally:
            self.stop()
            _say(f"worker '{self.name}': left the bus")
            for number, handler in previous.items():
                signal.signal(number, handler)

    def __enter__(self):
        return self.start()

    def __exit__(self, *_):
        self.stop()

    # --- called by the loop and by invocations ---------------------------------------------------

    def _start_replica(self, feed) -> None:
        if self._wants_replica and self.replica is None and feed:
            self.replica = Replica(feed, client=self._client)

    def _drop_replica(self) -> None:
        """Closes the replica of a coordinator left (the next WELCOME starts one on the new feed), on a thread of
        its own: closing waits for a snapshot it may be waiting for."""
        replica, self.replica = self.replica, None
        if replica is not None:
            threading.Thread(target=replica.stop, name=f"skillbus-replica-stop-{self.name}", daemon=True).start()

    def _sub_call(self, invocation, skill: str, params: dict, timeout: float | None):
        # Inside a round every sub-call goes through the bus, so its single-flight and document see it (§4.10).
        local = None if invocation.round_id else self.skills().get(skill)
        if local is not None:
            return local.run(schema.validated(skill, list(local.params), params), invocation.child(skill))
        if self.replica is not None and self.replica.synced and skill not in self.replica.skills():
            raise SkillbusError("unknown_skill", f"no agent offers skill '{skill}' (the registry replica has none)")
        left = invocation.time_left() if timeout is None else min(timeout, invocation.time_left())
        reply = self._client.request(skill, params, round_id=invocation.round_id, session=invocation.session,
                                     timeout=max(0.001, left))
        return reply.result


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
