"""JSON as Skillbus reads and writes it (PROTOCOL §2).

The bus and the Swift peers read strictly and write one canonical spelling. The registry digest
(§8.4) hashes that spelling, so this module writes exactly the same bytes, and it refuses what the
Swift reader refuses, so a Python worker judges a parameters frame as a Swift worker would.
"""

from __future__ import annotations

import json
import math
import unicodedata

MAX_DEPTH = 128
_TWO_POW_53 = float(2**53)
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def dumps(value) -> str:
    """Compact JSON with sorted keys, raw UTF-8 and Skillbus's number spelling (§2 "Writing")."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(item) for item in value) + "]"
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {type(key).__name__} {key!r}")
        return "{" + ",".join(_string(k) + ":" + dumps(value[k]) for k in sorted(value)) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def encode(value) -> bytes:
    """`dumps` as the UTF-8 bytes of a frame."""
    return dumps(value).encode("utf-8")


def _number(value) -> str:
    try:
        x = float(value)  # every number on the wire is a double
    except OverflowError:
        raise ValueError(f"the integer {value} is too large for JSON (beyond a double)") from None
    if math.isnan(x) or math.isinf(x):
        return "null"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    text = repr(x)  # shortest round-trip digits; agrees with Skillbus except above 2^53 (below)
    if abs(x) > _TWO_POW_53 and "e" not in text:
        whole = text.lstrip("-").split(".")[0]
        digits = whole.rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = ("-" if x < 0 else "") + f"{mantissa}e+{len(whole) - 1:02d}"
    return text


def _string(text: str) -> str:
    parts = ['"']
    for ch in text:
        escaped = _ESCAPES.get(ch)
        if escaped is None and ch < " ":
            escaped = f"\\u{ord(ch):04x}"  # backspace and form feed too: never \b or \f
        parts.append(escaped or ch)
    parts.append('"')
    return "".join(parts)


def loads(data: bytes | str):
    """Parses one document strictly (§2 "Reading"); raises ValueError saying what is wrong."""
    try:
        # Decoded here: json.loads would guess UTF-16 or UTF-32 for bytes.
        text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        value = json.loads(text, object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant)
        _check(value, 0)
    except UnicodeError as error:
        raise ValueError(f"not valid UTF-8 or a lone surrogate: {error}") from None
    except RecursionError:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON at character {error.pos}: {error.msg}") from None
    return value


def _object_without_duplicates(pairs):
    seen, result = set(), {}
    for key, value in pairs:
        normal = unicodedata.normalize("NFC", key)  # canonically equivalent keys are one key
        if normal in seen:
            raise ValueError(f"the key '{key}' occurs twice")
        seen.add(normal)
        result[key] = value
    return result


def _no_constant(name):
    raise ValueError(f"'{name}' is not JSON")


def _check(value, depth: int) -> None:
    """What json.loads lets through: depth, lone surrogates, numbers beyond a double."""
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, float):
        if math.isinf(value):
            raise ValueError("a number is too large for a double")
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            raise ValueError("a number is too large for a double") from None
    elif isinstance(value, (list, dict)):
        if depth + 1 > MAX_DEPTH:
            raise ValueError(f"nesting deeper than {MAX_DEPTH}")
        items = value.values() if isinstance(value, dict) else value
        for key in value if isinstance(value, dict) else ():
            key.encode("utf-8")
        for item in items:
            _check(item, depth + 1)


def type_name(value) -> str:
    """The JSON type as §5.3 names it: integer for a whole number, number otherwise."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if float(value).is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
