"""Following the leader of a coordinator group (PROTOCOL §4.4 item 6), for `WorkerLoop`: a `not_leader` refusal
sends the worker to the leader it names (else the next coordinator of its list), and a coordinator silent for 3
heartbeats, whose connection closed, or that refused the connection, is left for the next. A move cancels what the
coordinator left dispatched, without answering it there or anywhere, and opens a new DEALER to the one moved to.
"""

from __future__ import annotations

import time

from .client import leader_bus
from .errors import SkillbusError


class FollowingTheLeader:
    """Mixed into `WorkerLoop`, whose state (`choice`, `_generation`, `_running`, `_turns`, …) it reads and changes,
    on the worker's socket thread only."""

    def _silence_ends(self) -> float | None:
        """With two coordinators or more: when this one will have been silent for 3 heartbeats of the bus, counted
        from the last thing it sent or from the end of the last move's back-off. None for a single coordinator,
        which is never left (§4.7: the worker registers there again)."""
        if len(self.choice.endpoints) < 2:
            return None
        return max(self._last_heard, self.choice.not_before) + 3 * self._bus_heartbeat_ms / 1000

    def connection_closed(self, now: float) -> None:
        """The connection to the bus ended (the package's own DEALER says so; pyzmq's does not): with two
        coordinators or more the worker moves on at once, as from one fallen silent; with one it registers there
        again as soon as the connection is back (the bus answered what it ran `agent_lost` already, §4.7)."""
        if self.left.is_set():
            return
        if len(self.choice.endpoints) >= 2:
            return self._move(self.choice.leave(now), "its connection closed", now)
        if self._registered:
            self._log("the connection to the bus closed: registering again")
            self._register_again(now)

    def connection_refused(self, now: float) -> bool:
        """Nobody listens at the coordinator's endpoint (the own DEALER says so): with two coordinators or more the
        worker moves on at once, as from one fallen silent, once it has its socket and the last move's back-off
        has passed (until then the refusal is kept: False); with one it keeps connecting there."""
        if self.left.is_set() or len(self.choice.endpoints) < 2:
            return True
        if self._socket is None or now < self.choice.not_before:
            return False
        self._move(self.choice.leave(now), "no connection could be made", now)
        return True

    def _follow_refusal(self, error: SkillbusError) -> None:
        """ERROR `not_leader`: to the leader the refusal names, else to the next coordinator of the list."""
        bus, now = leader_bus(error.details), time.monotonic()
        moved = self.choice.refused(bus, now)
        if moved is None:  # a late refusal naming the coordinator this worker already talks to
            return self._log(f"the bus refused a message: not_leader: {error.message}")
        self._move(moved, f"it is a standby; the leader is at {bus}" if bus else "it is a standby and knows no leader",
                   now)

    def _move(self, moved: tuple[str, str], why: str, now: float) -> None:
        """Leaves the coordinator talked to for `moved[1]`: its invocations and turns are cancelled and answered
        nowhere (the new coordinator never dispatched them, §4.3), the replica of its feed closes, a new DEALER
        opens, and READY goes once the move's back-off has passed (`_timers`)."""
        before, after = moved
        if before == after:
            self._log(f"coordinator {before} does not serve ({why}); registering there again")
        else:
            self._log(f"moving from coordinator {before} to {after}: {before} {why}")
        self._generation += 1
        for inv in self._running.values():
            inv.cancelled.set()
        self._running.clear()
        for turn in self._turns.values():
            turn.cancel(SkillbusError("agent_lost", f"agent '{self.worker.name}' moved to coordinator {after}"))
        self._turns.clear()
        self.worker._drop_replica()
        self.worker.coordinator = after
        self._socket.reopen(after)
        self._arrived(now)

    def _sender(self):
        """`_send` for a turn: it sends nothing once the worker has moved to another coordinator."""
        generation = self._generation

        def send(*fields: bytes) -> None:
            if self._generation == generation:
                self._send(*fields)
        return send
