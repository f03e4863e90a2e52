"""One request in flight on a `Client`: its intermediate messages and its one answer (§3.3)."""

from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass

from . import jsonwire
from .errors import RoundFailed, SkillbusError, TurnFailed, error_for
from .results import Output, Reply, Result, RoundDocument, Turn


@dataclass(frozen=True)
class Progress:
    """A state of a turn, or a call of it that ended (PROGRESS, §3.2): `kind` is `state` or `call`."""

    agent: str
    kind: str
    body: dict


@dataclass(frozen=True)
class Snapshot:
    """The whole registry at one sequence number (SNAPSHOT, §3.3): `entries` by agent name (§5.10)."""

    epoch: str
    seq: int
    heartbeat_ms: int
    entries: dict


def _text(field: bytes) -> str:
    return field.decode("utf-8", errors="replace")


def _integer(field: bytes, what: str) -> int:
    if not field.isdigit():
        raise SkillbusError("malformed_message", f"{what} is not an integer: {field[:32]!r}")
    return int(field)


def _json(field: bytes, what: str, read=jsonwire.loads):
    try:
        return read(field)
    except ValueError as error:
        raise SkillbusError("malformed_message", f"{what} is not JSON: {error}") from None


class Call:
    """A request the bus has not answered yet.

    `events()` yields what comes before the answer: `Output` batches (§3.9), `str` pieces of a
    turn's reply (STREAM) and `Progress`; `result()` waits for the answer and returns it, or raises
    `SkillbusError` with the error's code; `cancel()` gives up on it (§3.10), after which the answer
    still comes, saying `cancelled`.
    """

    _queued = True  # its messages wait in a queue for the thread that reads them

    def __init__(self, client, request_id: str, kind: str, wait_s: float, on_output=None):
        self.request_id = request_id
        self.round_id: str | None = None  # a ROUND's, once sent
        self.kind = kind
        self.outputs: list[Output] = []
        self.streamed: list[str] = []
        self._client = client
        self._wait_s = wait_s
        self._on_output = on_output
        self._queue: queue.SimpleQueue | None = queue.SimpleQueue() if self._queued else None
        self._entries: list[dict] = []
        self._answer = None
        self._failure: SkillbusError | None = None
        self._done = False
        self._started = time.monotonic()
        self._key = request_id.encode()
        self._serve = None  # set while this thread holds the client's socket: reads it instead of waiting

    # Called on the thread that reads the client's socket.
    def _deliver(self, fields: list[bytes]) -> None:
        self._queue.put(fields)

    def _abandon(self, failure: SkillbusError) -> None:
        """Wakes a waiter with `failure` (`unreachable` when the client closed, say)."""
        self._queue.put(failure)

    def cancel(self) -> None:
        """Sends CANCEL for this request (3 fields, §3.1); the answer still comes, saying cancelled."""
        if not self._done:
            self._client._send(b"CANCEL", self.request_id.encode())

    def events(self):
        """Yields each Output, STREAM text and Progress as it arrives, until the answer has come."""
        while not self._done:
            event = self._next(self._deadline())
            if event is not None:
                yield event

    def result(self, timeout: float | None = None):
        """Waits for the answer (at most `timeout` seconds, else the request's timeout + 1 s)."""
        deadline = self._deadline() if timeout is None else time.monotonic() + timeout
        while not self._done:
            self._next(deadline)
        if self._failure is not None:
            raise self._failure
        return self._answer

    def _deadline(self) -> float:
        return self._started + self._wait_s

    def _next(self, deadline: float):
        try:
            if self._serve is not None and self._queue.empty():
                self._serve(lambda: not self._queue.empty(), deadline)
            left = deadline - time.monotonic()
            item = self._queue.get(timeout=max(0.0, left)) if left > 0 else self._queue.get_nowait()
        except KeyboardInterrupt:
            self.cancel()  # Ctrl-C gives up on the request on the bus too, then stops the caller
            raise
        except queue.Empty:
            waited = time.monotonic() - self._started
            self._finish(failure=SkillbusError(
                "unreachable", f"no answer from the bus to {self.kind} {self.request_id} within {waited:.1f} s"
                + self._client._tried()))
            return None
        if isinstance(item, SkillbusError):
            self._finish(failure=item)
            return None
        try:
            return self._take(item)
        except SkillbusError as error:
            self._finish(failure=error)
            return None

    def _finish(self, answer=None, failure: SkillbusError | None = None) -> None:
        self._done = True
        self._answer, self._failure = answer, failure
        self._client._forget(self.request_id)

    def _take(self, fields: list[bytes]):
        command, count = fields[1], len(fields)
        if command == b"ERROR" and count == 4:
            self._finish(failure=error_for(_json(fields[3], "the ERROR body")))
        elif command == b"OUTPUT" and count == 6:
            output = Output(_text(fields[3]), _integer(fields[4], "OUTPUT field 4"), _json(fields[5], "the OUTPUT parts"))
            self.outputs.append(output)
            if self._on_output is not None:
                self._on_output(output)
            return output
        elif command == b"STREAM" and count == 4:
            self.streamed.append(_text(fields[3]))
            return self.streamed[-1]
        elif command == b"PROGRESS" and count == 6:
            return Progress(_text(fields[3]), _text(fields[4]), _json(fields[5], "the PROGRESS body"))
        elif command == b"CONFIRM" and count == 6:
            approved = self._client._approve(_text(fields[4]), _json(fields[5], "the CONFIRM parameters"))
            self._client._send(b"APPROVE", fields[3], b"yes" if approved else b"no")
        elif command == b"ENTRY" and count == 4:
            self._entries.append(_json(fields[3], "an ENTRY"))
        else:
            self._answered(command, fields)
        return None

    def _answered(self, command: bytes, fields: list[bytes]) -> None:
        count = len(fields)
        if command == b"REPLY" and count == 8:
            self._reply(fields)
        elif command == b"ROUND" and count == 5:
            document = RoundDocument(_json(fields[4], "the round document", jsonwire.loads_canonical),
                                     list(self.outputs))
            if document.status == "ok":
                self._finish(document)
            else:
                self._finish(failure=RoundFailed(error_for(document.error, agent=document.agent), document))
        elif command == b"TURN" and count == 6:
            agent, body = _text(fields[3]), _json(fields[5], "the turn document")
            if fields[4] == b"ok":
                self._finish(Turn(body, list(self.streamed)))
            else:
                error = error_for(body, agent=agent or None)
                details = body.get("details") if isinstance(body, dict) else None
                turn = Turn(details, list(self.streamed)) if isinstance(details, dict) else None
                self._finish(failure=TurnFailed(error, turn))
        elif command in (b"SKILLS", b"AGENTS", b"CANCELLED") and count == 4:
            self._finish(_json(fields[3], f"the {command.decode()} body"))
        elif command == b"SNAPSHOT" and count == 4:
            self._snapshot(_json(fields[3], "the snapshot summary"))
        # Anything else carrying our request id is skipped: a newer bus may send more (§10).

    def _reply(self, fields: list[bytes]) -> None:
        status, agent = fields[4], _text(fields[5])
        text = jsonwire.text_result(fields[7]) if status == b"ok" else None
        if text is not None:  # the common answer, read without building its object
            self._finish(Reply(Result.of_text(text), agent, _integer(fields[6], "the REPLY duration"),
                               _text(fields[3]), list(self.outputs)))
            return
        payload = _json(fields[7], "the REPLY payload")
        if status == b"ok":
            try:
                result = Result.from_json(payload)
            except ValueError as error:
                raise SkillbusError("malformed_message", f"REPLY from '{agent}': {error}", agent=agent) from None
            self._finish(Reply(result, agent, _integer(fields[6], "the REPLY duration"), _text(fields[3]), list(self.outputs)))
        else:
            self._finish(failure=error_for(payload, agent=agent or None))

    def _snapshot(self, summary) -> None:
        try:
            epoch, seq, agents = summary["epoch"], int(summary["seq"]), int(summary["agents"])
            entries = {entry["agent"]: entry for entry in self._entries}
        except (KeyError, TypeError, ValueError) as error:
            raise SkillbusError("malformed_message", f"an incomplete snapshot: {error!r}") from None
        if agents != len(self._entries) or len(entries) != len(self._entries):
            raise SkillbusError("malformed_message",
                                f"the snapshot announced {agents} entries and {len(self._entries)} came")
        self._finish(Snapshot(epoch, seq, int(summary.get("heartbeatMs", 1000)), entries))


class SubmittedCall(Call):
    """A request sent by `Client.submit`: a `Call` that is its own future.

    Everything of it runs on the thread that reads the client's socket (its socket thread, or a thread
    in a blocking call that borrowed it) as its messages come: no waiting thread and no queue between
    them. `result(timeout)`, `exception(timeout)`, `done()` and `add_done_callback(fn)` behave as those
    of a `concurrent.futures.Future`; `fn(call)` runs on that thread when the answer has come (at once,
    on the caller's thread, if it already has). `cancel()` sends CANCEL (§3.10); the answer,
    `cancelled`, still comes. Partial output goes to `on_output`, called there too. The client fails
    it with `unreachable` when no answer came within its wait.
    """

    _queued = False

    def __init__(self, client, request_id: str, kind: str, wait_s: float, on_output=None):
        super().__init__(client, request_id, kind, wait_s, on_output)
        self._callbacks: list | None = []  # None once the answer has come
        self._waiter: threading.Event | None = None  # made only when a thread waits before the answer

    def _deliver(self, fields: list[bytes]) -> None:
        try:
            if fields[1] == b"REPLY" and len(fields) == 8:
                self._reply(fields)
            else:
                self._take(fields)
        except SkillbusError as error:
            self._finish(failure=error)

    def _abandon(self, failure: SkillbusError) -> None:
        self._finish(failure=failure)

    def _expire(self, now: float) -> None:
        """Fails the call with `unreachable` when its wait is over."""
        if now >= self._deadline():
            waited = now - self._started
            self._finish(failure=SkillbusError(
                "unreachable", f"no answer from the bus to {self.kind} {self.request_id} within {waited:.1f} s"
                + self._client._tried()))

    def _finish(self, answer=None, failure: SkillbusError | None = None) -> None:
        client = self._client
        with client._lock:  # close() may abandon it on another thread as the answer comes
            if self._done:
                return
            self._done = True
            self._answer, self._failure = answer, failure
            callbacks, self._callbacks, waiter = self._callbacks, None, self._waiter
            client._pending.pop(self._key, None)
            client._submitted.pop(self._key, None)
        if waiter is not None:
            waiter.set()
        for callback in callbacks:
            self._run_callback(callback)

    def _run_callback(self, callback) -> None:
        try:
            callback(self)
        except Exception as error:  # as concurrent.futures does: reported, never raised into the socket thread
            print(f"skillbus: a callback of {self.kind} {self.request_id} failed: {error!r}", file=sys.stderr,
                  flush=True)

    def add_done_callback(self, callback) -> None:
        """Runs `callback(call)` once the answer has come."""
        with self._client._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        self._run_callback(callback)

    def done(self) -> bool:
        return self._done

    def events(self):
        raise TypeError("a submitted call has no events(): pass on_output to submit, or use start_request")

    def result(self, timeout: float | None = None):
        """The `Reply`, waiting at most `timeout` seconds (else until the answer or the client's
        `unreachable`); raises the `SkillbusError` of a failed call, or TimeoutError."""
        failure = self.exception(timeout)
        if failure is not None:
            raise failure
        return self._answer

    def exception(self, timeout: float | None = None) -> SkillbusError | None:
        """The `SkillbusError` the call failed with, or None; waits as `result` does."""
        with self._client._lock:
            if not self._done and self._waiter is None:
                self._waiter = threading.Event()
            waiter = self._waiter
        if not self._done and not waiter.wait(timeout):
            raise TimeoutError(f"{self.kind} {self.request_id} is not answered yet")
        return self._failure
