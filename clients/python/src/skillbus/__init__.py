"""Skillbus for Python: a client and a worker for the Skillbus bus, written from docs/PROTOCOL.md.

    from skillbus import Client, Worker, Param, SkillbusError

`Client` asks the coordinator: one skill (`request`), rounds (`invoke`, `fanout`, `plan`, team rounds),
turns (`ask`), listings (`skills`, `agents`, `snapshot`) and cancels. `Worker` offers skills declared
with `@worker.skill(...)`, and with a planner takes turns in a team (`AgentTurn`, `Handoff`,
`TeamContext`). `Replica` follows the registry from the feed. Every failure is a `SkillbusError` with
the protocol's error `code` and `message`.
"""
from .call import Call, Progress, Snapshot, SubmittedCall
from .client import DEFAULT_COORDINATOR, Client, new_round_id
from .errors import Cancelled, RoundFailed, SkillbusError, TurnFailed
from .invocation import Invocation
from .replica import Replica, digest
from .results import Output, Reply, Result, RoundDocument, Turn
from .schema import Param
from .turn import AgentTurn, Handoff, TeamContext
from .worker import Skill, Worker

__all__ = [
    "AgentTurn", "Call", "Cancelled", "Client", "DEFAULT_COORDINATOR", "Handoff", "Invocation", "Output", "Param",
    "Progress", "Replica", "Reply", "Result", "RoundDocument", "RoundFailed", "Skill", "SkillbusError", "Snapshot",
    "SubmittedCall",
    "TeamContext", "Turn", "TurnFailed", "Worker", "digest", "new_round_id",
]
