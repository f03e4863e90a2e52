"""Skill descriptors and parameter schemas (PROTOCOL §5.2, §5.3), and validation against them."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import jsonwire
from .errors import SkillbusError

TYPES = ("string", "integer", "number", "boolean", "array", "object", "any")
_NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_NO_DEFAULT = object()


def is_identifier(value) -> bool:
    """An agent name or skill identifier: 1-128 bytes of A-Z a-z 0-9 . _ - (§2 "Identifiers")."""
    return isinstance(value, str) and 1 <= len(value) <= 128 and all(c in _NAME_CHARACTERS for c in value)


def accepts(type_: str, value) -> bool:
    """Whether a parameter of `type_` accepts `value` (§5.3 "Type acceptance"); null fits no type."""
    if type_ == "string":
        return isinstance(value, str)
    actual = jsonwire.type_name(value)
    if type_ == "any":
        return actual != "null"
    if type_ == "number":
        return actual in ("integer", "number")
    return actual == type_


@dataclass(frozen=True)
class Param:
    """One parameter field of a skill (§5.3).

    `Param("text", "string")` is required; `Param("count", "integer", required=False, default=1)`
    is optional and filled in when the caller leaves it out.
    """

    name: str
    type: str = "string"
    required: bool = True
    description: str = ""
    default: object = field(default=_NO_DEFAULT, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a parameter needs a non-empty name, got {self.name!r}")
        if self.type not in TYPES:
            raise ValueError(f"parameter '{self.name}': type {self.type!r} is not one of {', '.join(TYPES)}")
        if self.has_default:
            if self.default is None:
                raise ValueError(f"parameter '{self.name}': a default of None is accepted by no type; leave it out")
            if not accepts(self.type, self.default):
                raise ValueError(f"parameter '{self.name}': the default {self.default!r} is not {self.type}")

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def to_json(self) -> dict:
        field_ = {"name": self.name, "type": self.type, "required": self.required, "description": self.description}
        if self.has_default:
            field_["default"] = self.default
        return field_


def descriptor(
    identifier: str,
    params: list[Param],
    *,
    display_name: str | None = None,
    description: str = "",
    concurrency: int | None = None,
    default_timeout_ms: int | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    metadata: dict | None = None,
) -> dict:
    """The skill descriptor of §5.2, checked so that the bus will not refuse it."""
    if not is_identifier(identifier):
        raise ValueError(f"skill identifier {identifier!r} is invalid: use 1-128 of A-Z a-z 0-9 . _ -")
    names = [p.name for p in params]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"skill '{identifier}': parameter '{twice[0]}' is declared twice")
    if concurrency is not None and not (isinstance(concurrency, int) and 1 <= concurrency <= 100_000):
        raise ValueError(f"skill '{identifier}': concurrency must be an integer from 1 to 100000, got {concurrency!r}")
    if default_timeout_ms is not None and not (isinstance(default_timeout_ms, int) and 1 <= default_timeout_ms <= 86_400_000):
        raise ValueError(f"skill '{identifier}': default_timeout_ms must be from 1 to 86400000, got {default_timeout_ms!r}")
    body = {
        "identifier": identifier,
        "displayName": display_name or identifier,
        "description": description,
        "parameters": [p.to_json() for p in params],
    }
    if concurrency is not None:
        body["concurrency"] = concurrency
    if default_timeout_ms is not None:
        body["defaultTimeoutMs"] = default_timeout_ms
    if idempotent:
        body["idempotent"] = True
    if confirm:
        body["confirm"] = True
    if metadata:
        body["metadata"] = metadata
    return body


def validate(params, values: dict) -> tuple[dict, list[str]]:
    """Checks `values` against the fields (§5.3 "Validation"): the values with defaults filled in,
    and every problem found, worded as §5.3 words them (empty when they are valid)."""
    result, problems = dict(values), []
    for p in params:
        if p.name in values:
            if not accepts(p.type, values[p.name]):
                problems.append(f"parameter '{p.name}' must be {p.type}, got {jsonwire.type_name(values[p.name])}")
        elif p.required:
            problems.append(f"missing required parameter '{p.name}' ({p.type})")
        elif p.has_default:
            result[p.name] = p.default
    declared = [p.name for p in params]
    unknown = [k for k in values if k not in declared]
    if unknown:  # the expected list is spelled only when needed
        expected = ", ".join(declared) or "none"
        problems += [f"unknown parameter '{key}' (expected: {expected})" for key in sorted(unknown)]
    return result, problems


def validated(identifier: str, params, values: dict) -> dict:
    """`values` with defaults filled in, or `SkillbusError` `invalid_parameters` worded as §4.10 step 6."""
    checked, problems = validate(params, values)
    if problems:
        raise SkillbusError("invalid_parameters", f"invalid parameters for '{identifier}': " + "; ".join(problems),
                            problems)
    return checked
