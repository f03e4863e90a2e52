"""What skills return and what the client receives: result forms (§5.5), output parts (§5.19),
replies (§3.2), round documents (§5.14) and turn documents (§5.18)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from .jsonwire import dumps, encode, string_bytes


def text_payload(text: str) -> bytes:
    """A text result form (§5.5) as JSON bytes, in Skillbus's spelling (keys sorted)."""
    return b'{"text":' + string_bytes(text) + b',"type":"text"}'


@dataclass(frozen=True)
class Result:
    """One result form (§5.5): `text`, `json` or `attachment`.

    A skill may return a `Result`, or a plain value: a `str` becomes a text result, anything else
    (dict, list, number, bool, None) a json result.
    """

    type: str
    text: str | None = None
    json: object = None
    name: str | None = None
    media_type: str | None = None
    data: bytes | None = None

    @staticmethod
    def of_text(text: str) -> "Result":
        return Result("text", text=text)

    @staticmethod
    def of_json(value) -> "Result":
        return Result("json", json=value)

    @staticmethod
    def attachment(name: str, media_type: str, data: bytes) -> "Result":
        return Result("attachment", name=name, media_type=media_type, data=bytes(data))

    @staticmethod
    def from_value(value) -> "Result":
        """What a skill returned, as a result form."""
        if isinstance(value, Result):
            return value
        if isinstance(value, str):
            return Result.of_text(value)
        return Result.of_json(value)

    def to_json(self) -> dict:
        if self.type == "text":
            return {"type": "text", "text": self.text}
        if self.type == "json":
            return {"type": "json", "json": self.json}
        return {
            "type": "attachment",
            "name": self.name,
            "mediaType": self.media_type,
            "base64": base64.b64encode(self.data or b"").decode("ascii"),
        }

    def payload(self) -> bytes:
        """`to_json()` as the bytes of a RESULT payload; a text result without building the object."""
        if self.type == "text":
            return text_payload(self.text)
        return encode(self.to_json())

    @staticmethod
    def payload_of(value) -> bytes:
        """The RESULT payload of what a skill returned (`from_value(value).payload()`), a `str`
        written at once."""
        if type(value) is str:
            return text_payload(value)
        return Result.from_value(value).payload()

    @staticmethod
    def from_json(value) -> "Result":
        """Reads a result form; raises ValueError naming what is wrong (§5.5)."""
        if not isinstance(value, dict):
            raise ValueError("a result form must be a JSON object")
        kind = value.get("type")
        if kind == "text" and isinstance(value.get("text"), str):
            return Result.of_text(value["text"])
        if kind == "json" and "json" in value:
            return Result.of_json(value["json"])
        if kind == "attachment" and all(isinstance(value.get(k), str) for k in ("name", "mediaType", "base64")):
            data = base64.b64decode(value["base64"], validate=True)
            return Result.attachment(value["name"], value["mediaType"], data)
        raise ValueError(f"not a result form: type {kind!r} without its keys")

    @property
    def value(self):
        """The text, the JSON value, or the attachment's bytes."""
        return {"text": self.text, "json": self.json}.get(self.type, self.data)


@dataclass(frozen=True)
class Output:
    """One batch of partial output (OUTPUT, §3.9): `parts` are output parts (§5.19) as dicts;
    `first` counts the parts of the execution that came before; `invocation` names the round
    invocation (empty for a REQUEST)."""

    invocation: str
    first: int
    parts: list

    @property
    def texts(self) -> list[str]:
        """The text of each text part, and each json part as compact JSON."""
        return [p["text"] if p.get("type") == "text" else dumps(p.get("json")) for p in self.parts]


@dataclass(frozen=True)
class Reply:
    """A successful REPLY (§3.2): the agent that ran it, how long the bus took, and the result."""

    result: Result
    agent: str
    duration_us: int
    round_id: str
    outputs: list = field(default_factory=list)

    @property
    def value(self):
        return self.result.value


@dataclass(frozen=True)
class RoundDocument:
    """A round document (§5.14); `raw` is the whole document as the bus sent it."""

    raw: dict
    outputs: list = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.raw.get("status", "error")

    @property
    def round_id(self) -> str:
        return self.raw.get("round", "")

    @property
    def result(self):
        return self.raw.get("result")

    @property
    def error(self):
        return self.raw.get("error")

    @property
    def agent(self):
        return self.raw.get("agent")

    @property
    def invocations(self) -> list:
        return self.raw.get("invocations", [])

    @property
    def summary(self) -> dict:
        return self.raw.get("summary", {})

    def invocation(self, invocation_id: str) -> dict:
        """The invocation with this id (the skill, the agent of a fan-out, the step id)."""
        for entry in self.invocations:
            if entry.get("id") == invocation_id:
                return entry
        raise KeyError(f"round {self.round_id!r} has no invocation {invocation_id!r}")


@dataclass(frozen=True)
class Turn:
    """A turn document (§5.18); `streamed` is the reply's pieces as they came (STREAM)."""

    raw: dict
    streamed: list = field(default_factory=list)

    @property
    def reply(self):
        return self.raw.get("reply")

    @property
    def agent(self) -> str:
        return self.raw.get("agent", "")

    @property
    def calls(self) -> list:
        return self.raw.get("calls", [])

    @property
    def states(self) -> list:
        return self.raw.get("states", [])
