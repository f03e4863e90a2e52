"""What a running skill sees: its invocation, partial output, cancellation and sub-calls."""

from __future__ import annotations

import threading
import time

from . import jsonwire
from .errors import Cancelled, SkillbusError

BATCH_INTERVAL_S = 0.025  # at most one OUTPUT per 25 ms per invocation (PROTOCOL §4.10)
BATCH_BYTES = 64 * 1024  # pending parts this large go at once


class Invocation:
    """The context of one running invocation, handed to a skill that takes a `context` parameter.

    `emit` sends partial output (§3.9); `cancelled` is set on CANCEL or when the worker stops, and
    `check_cancelled()` / `sleep()` raise `Cancelled` then; `call` runs another skill of the
    registry in the same round and session (§4.10 "Sub-calls").
    """

    def __init__(self, worker, invocation_id: str, skill: str, round_id: str, session: str, deadline_ms: int,
                 max_output_bytes: int, wake=None):
        self.id = invocation_id
        self.skill = skill
        self.round_id = round_id
        self.session = session
        self.deadline = time.monotonic() + deadline_ms / 1000  # the bus's deadline; informative (§4.9)
        self.cancelled = threading.Event()
        self._worker = worker
        self._wake = wake  # tells the worker's socket thread that output is pending; None: emit goes nowhere
        self._lock = threading.Lock()
        self._pending: list[dict] = []
        self._pending_bytes = 0
        self._sent_parts = 0
        self._output_bytes = 0
        self._max_output_bytes = max_output_bytes
        self._last_batch: float | None = None
        self._due: float | None = None
        self.output_error: SkillbusError | None = None

    # --- for skills ------------------------------------------------------------------------------

    def time_left(self) -> float:
        """Seconds until the bus's deadline for this invocation (may be negative)."""
        return self.deadline - time.monotonic()

    def check_cancelled(self) -> None:
        """Raises `Cancelled` when the invocation was cancelled."""
        if self.cancelled.is_set():
            raise Cancelled(f"'{self.skill}' was cancelled")

    def sleep(self, seconds: float) -> None:
        """Waits `seconds`, or raises `Cancelled` as soon as the invocation is cancelled."""
        if self.cancelled.wait(seconds):
            raise Cancelled(f"'{self.skill}' was cancelled")

    def emit(self, part) -> None:
        """Emits one part of partial output: a `str` is a text part, anything else a json part.

        Raises `SkillbusError` `output_too_large` once the parts pass the worker's limit; the
        invocation is then cancelled and fails with that error whatever the skill returns.
        """
        part = {"type": "text", "text": part} if isinstance(part, str) else {"type": "json", "json": part}
        size = len(jsonwire.encode(part)) + 1
        with self._lock:
            if self.output_error is not None:
                raise self.output_error
            if self._output_bytes + size > self._max_output_bytes:
                limit = self._max_output_bytes
                self.output_error = SkillbusError(
                    "output_too_large",
                    f"'{self.skill}' emitted more than {limit} bytes of output (the agent's maxOutputBytes); it was stopped",
                    {"limit": limit})
                self.cancelled.set()
                raise self.output_error
            if self._wake is None:
                return  # a sub-call run in-process: nobody waits for its output
            self._output_bytes += size
            self._pending.append(part)
            self._pending_bytes += size
            now = time.monotonic()
            if self._due is None:
                self._due = now + BATCH_INTERVAL_S if self._last_batch is None else max(
                    now, self._last_batch + BATCH_INTERVAL_S)
            if self._pending_bytes >= BATCH_BYTES:
                self._due = now
        self._wake()

    def call(self, skill: str, params: dict | None = None, *, timeout: float | None = None):
        """Runs another skill in this invocation's round and session and returns its `Result`.

        Inside a round it goes through the bus as a REQUEST, even to a skill this worker offers, so the
        round's single-flight covers it (§3.4) and its document lists it; with no round, a skill this
        worker offers runs here. Raises `SkillbusError` when it fails.
        """
        return self._worker._sub_call(self, skill, params or {}, timeout)

    def child(self, skill: str) -> "Invocation":
        """The context of a sub-call run in-process: same round, deadline and cancellation, no output."""
        child = Invocation(self._worker, self.id, skill, self.round_id, self.session, 0, self._max_output_bytes)
        child.deadline, child.cancelled = self.deadline, self.cancelled
        return child

    # --- for the worker's socket thread ----------------------------------------------------------

    def take_batch(self, now: float, final: bool = False):
        """The (first, parts) of the batch due now (all pending parts when `final`), or None."""
        with self._lock:
            if not self._pending or (not final and (self._due is None or now < self._due)):
                return None
            first, parts = self._sent_parts, self._pending
            self._pending, self._pending_bytes, self._due, self._last_batch = [], 0, None, now
            self._sent_parts += len(parts)
            return first, parts

    def batch_due(self) -> float | None:
        with self._lock:
            return self._due
