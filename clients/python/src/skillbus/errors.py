"""Errors: the error object of PROTOCOL §5.6 as Python exceptions."""

from __future__ import annotations


class SkillbusError(Exception):
    """An error with a stable `code` (PROTOCOL §6), a human `message` and optional `details`.

    Raised by the client for every answer that says `error`, and raised by a skill to fail with a
    code of its own (the worker sends exactly this code, message and details).
    `agent` names the agent that produced it when the answer says so.
    """

    def __init__(self, code: str, message: str, details=None, *, agent: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details
        self.agent = agent

    def to_object(self) -> dict:
        """The error object of §5.6 (`details` only when there are some)."""
        error = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return error

    @classmethod
    def from_object(cls, value, *, agent: str | None = None) -> "SkillbusError":
        """Reads an error object the way §5.6 asks: no code is `internal`, no message is "no message given"."""
        if not isinstance(value, dict):
            return cls("malformed_message", f"an error payload that is no JSON object: {value!r:.200}", agent=agent)
        code = value.get("code") if isinstance(value.get("code"), str) else "internal"
        message = value.get("message") if isinstance(value.get("message"), str) else "no message given"
        return cls(code, message, value.get("details"), agent=agent)


class Cancelled(SkillbusError):
    """The invocation was cancelled: raised inside a skill by `Invocation.check_cancelled()` and
    `Invocation.sleep()`, and by the client when the bus answers `cancelled`."""

    def __init__(self, message: str = "cancelled", details=None, *, agent: str | None = None):
        super().__init__("cancelled", message, details, agent=agent)


class RoundFailed(SkillbusError):
    """A round whose document says `error`; the whole document is in `document`."""

    def __init__(self, error: SkillbusError, document):
        super().__init__(error.code, error.message, error.details, agent=error.agent)
        self.document = document


class TurnFailed(SkillbusError):
    """A turn that ended `error`; `turn` holds the turn document when the agent made one."""

    def __init__(self, error: SkillbusError, turn):
        super().__init__(error.code, error.message, error.details, agent=error.agent)
        self.turn = turn


def error_for(value, *, agent: str | None = None) -> SkillbusError:
    """The exception for an error object: `Cancelled` for code `cancelled`, else `SkillbusError`."""
    error = SkillbusError.from_object(value, agent=agent)
    if error.code == "cancelled":
        return Cancelled(error.message, error.details, agent=agent)
    return error
