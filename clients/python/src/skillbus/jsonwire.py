"""JSON as Skillbus reads and writes it (PROTOCOL §2).

The bus and the Swift peers read strictly and write one canonical spelling. The registry digest
(§8.4) hashes that spelling, so this module writes exactly the same bytes, and it refuses what the
Swift reader refuses, so a Python worker judges a parameters frame as a Swift worker would.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
import unicodedata

MAX_DEPTH = 128
_TWO_POW_53 = float(2**53)
_ONE_E15 = 10**15
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The standard library's string writer (in C), with non-ASCII left raw: the same spelling as ours except
# that it writes backspace and form feed as \b and \f, where we write \u0008 and \u000c.
_write_string = json.encoder.encode_basestring


def dumps(value) -> str:
    """Compact JSON with sorted keys, raw UTF-8 and Skillbus's number spelling (§2 "Writing")."""
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return _number(value)
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


def string_bytes(text: str) -> bytes:
    """A string as JSON, in UTF-8 (a result form's text, say)."""
    return _string(text).encode("utf-8")


def _number(value) -> str:
    if type(value) is int and -_ONE_E15 < value < _ONE_E15:
        return str(value)  # what the double's spelling below gives for it
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
    if "\b" not in text and "\f" not in text:
        return _write_string(text)
    parts = ['"']
    for ch in text:
        escaped = _ESCAPES.get(ch)
        if escaped is None and ch < " ":
            escaped = f"\\u{ord(ch):04x}"  # backspace and form feed too: never \b or \f
        parts.append(escaped or ch)
    parts.append('"')
    return "".join(parts)


_TEXT_RESULT_HEAD, _TEXT_RESULT_TAIL = b'{"text":"', b'","type":"text"}'
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')  # in a JSON string's bytes: anything but plain characters


def text_result(payload: bytes) -> str | None:
    """The text of a text result form (§5.5) written as Skillbus writes it (`{"text":"…","type":"text"}`)
    with no escapes in the text, read without parsing the object; None for anything else, which
    `loads` then reads (and judges) in full."""
    if not (payload.startswith(_TEXT_RESULT_HEAD) and payload.endswith(_TEXT_RESULT_TAIL)):
        return None
    text = payload[len(_TEXT_RESULT_HEAD):-len(_TEXT_RESULT_TAIL)]
    if _NOT_PLAIN.search(text):
        return None
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        return None


def loads(data: bytes | str):
    """Parses one document strictly (§2 "Reading"); raises ValueError saying what is wrong."""
    try:
        # Decoded here: json.loads would guess UTF-16 or UTF-32 for bytes.
        text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
        value = _DECODER.decode(text)  # numbers beyond a double are refused as they are read
        # The rest of the checks walk the whole value, so only for a document that could fail them: one
        # with a \u escape (a lone surrogate) or nested deep enough.
        if "\\u" in text or text.count("[") + text.count("{") > MAX_DEPTH:
            _check(value, 0)
    except UnicodeError as error:
        raise ValueError(f"not valid UTF-8 or a lone surrogate: {error}") from None
    except RecursionError:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON at character {error.pos}: {error.msg}") from None
    return value


def loads_canonical(data: bytes):
    """Parses a document the bus wrote itself in canonical form (a round document, PROTOCOL §5.14): unique
    keys, finite numbers, valid UTF-8, results that already passed its strict reader. `loads`'s checks cannot
    fail on it, so the standard library's C decoder reads it without a Python call per object and number:
    half the time for a fan-out's document. Raises ValueError as `loads` does for text that is not JSON."""
    try:
        return _CANONICAL_DECODER.decode(bytes(data).decode("utf-8"))
    except UnicodeError as error:
        raise ValueError(f"not valid UTF-8: {error}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON at character {error.pos}: {error.msg}") from None


def _object_without_duplicates(pairs):
    result = dict(pairs)
    if len(result) == len(pairs) and "".join(result).isascii():
        return result  # distinct ASCII keys: NFC changes none of them, so none are equivalent
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


def _double(text: str) -> float:
    value = float(text)
    if value in (math.inf, -math.inf):
        raise ValueError("a number is too large for a double")
    return value


def _integer(text: str) -> int:
    value = int(text)
    if len(text) > 300:  # a double holds up to about 1.8e308
        try:
            float(value)
        except OverflowError:
            raise ValueError("a number is too large for a double") from None
    return value


# One decoder for every document: json.loads with options builds a new one per call.
_DECODER = json.JSONDecoder(object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant,
                            parse_float=_double, parse_int=_integer)
# `NaN` and `Infinity` are still refused: the hook runs only when one occurs, so it costs nothing.
_CANONICAL_DECODER = json.JSONDecoder(parse_constant=_no_constant)


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
