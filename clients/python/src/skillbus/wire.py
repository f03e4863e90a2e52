"""Wire v2 framing: how the numbered fields of PROTOCOL's tables travel as ZeroMQ frames.

Frame 0 is the envelope: the 5-byte header, then fields 1 .. F-1 (the command first), each one
length-prefixed. Fields F, F+1, ... (parameters, payloads, JSON bodies, free text) follow as frames
of their own. F depends on the direction and the command: the tables below.

Everything else in the package works on the logical field list `[header, command, field 2, ...]`,
numbered as in PROTOCOL's tables, so only this module knows about frames.
"""

from __future__ import annotations

from .errors import SkillbusError

CLIENT = b"SKB2C"
WORKER = b"SKB2W"
V1_CLIENT, V1_WORKER = b"SKB1C", b"SKB1W"
V1_HEADERS = (V1_CLIENT, V1_WORKER)
HEADER_BYTES = 5
LONG = 0xFF  # a length byte of 0xFF: the length follows as 4 bytes, big-endian
_LENGTHS = [bytes((size,)) for size in range(LONG)]  # the one-byte lengths, made once
_LONG_BYTE = bytes((LONG,))


class WireError(SkillbusError):
    """A message that does not unpack. `fields` holds what could be read before the problem (the
    request id, say, so that a client can fail the call it belongs to); for a v1 message, its frames,
    which in v1 are its fields."""

    def __init__(self, code: str, message: str, fields: list[bytes]):
        super().__init__(code, message)
        self.fields = fields


def envelope(header: bytes, fields) -> bytes:
    """Frame 0: the header, then each field as a length (one byte, or 0xFF and four) and its bytes."""
    parts = [header]
    for field in fields:
        size = len(field)
        parts.append(_LENGTHS[size] if size < LONG else _LONG_BYTE + size.to_bytes(4, "big"))
        parts.append(field)
    return b"".join(parts)


def read_envelope(frame: bytes) -> list[bytes]:
    """The fields of an envelope, header first; raises `WireError` when it is cut short."""
    if not isinstance(frame, bytes):
        frame = bytes(frame)  # a zmq.Frame or memoryview: sliced below as bytes
    fields = [frame[:HEADER_BYTES]]
    append = fields.append
    position, end = HEADER_BYTES, len(frame)
    while position < end:
        size = frame[position]
        start = position + 1
        if size == LONG:
            if start + 4 > end:
                raise WireError("malformed_message", f"a truncated envelope: field {len(fields)} has "
                                f"{end - start} of the 4 bytes of its length", fields)
            size = int.from_bytes(frame[start:start + 4], "big")
            start += 4
        position = start + size
        if position > end:
            raise WireError("malformed_message",
                            f"a truncated envelope: field {len(fields)} announces {size} bytes, {end - start} follow",
                            fields)
        append(frame[start:position])
    return fields


class Direction:
    """One direction of one protocol: its header and, per command, F (None: every field in the envelope)."""

    def __init__(self, name: str, header: bytes, first_frame: dict[bytes, int | None]):
        self.name = name
        self.header = header
        self.first_frame = first_frame

    def pack(self, *fields: bytes, folded: bool = False) -> list[bytes]:
        """The frames of a message: `fields` are fields 1, 2, ... (the command first). `folded`: one frame, every
        field in the envelope (§2.1), as peers with keys send them: under CURVE each frame is a box."""
        command = fields[0]
        if command not in self.first_frame:
            raise ValueError(f"{command!r} is no {self.name} command")
        if folded:
            return [envelope(self.header, fields)]
        first = self.first_frame[command]
        split = len(fields) if first is None else min(first - 1, len(fields))  # fields are numbered from 1
        return [envelope(self.header, fields[:split]), *fields[split:]]

    def unpack(self, frames: list[bytes]) -> list[bytes]:
        """The logical fields `[header, command, field 2, ...]` of a received message.

        Raises `WireError`: `unsupported_protocol` for a v1 or foreign header, `malformed_message`
        for a truncated envelope or one whose split into envelope and frames differs from the table.
        """
        if not frames:
            raise WireError("malformed_message", "an empty message", [])
        frame = frames[0]
        if not isinstance(frame, bytes):
            frame = bytes(frame)
        if frame[:HEADER_BYTES] != self.header:
            head = bytes(frame[:HEADER_BYTES])
            if head in V1_HEADERS and len(frame) == HEADER_BYTES:
                raise WireError("unsupported_protocol",
                                f"a v1 message (header {head.decode()}); this peer speaks {self.header.decode()}",
                                [bytes(f) for f in frames])
            raise WireError("unsupported_protocol",
                            f"a message with header {head!r} (this peer speaks {self.header.decode()})", [])
        fields = read_envelope(frame)
        if len(fields) < 2:
            raise WireError("malformed_message", "an envelope without a command", fields)
        opaque = len(frames) - 1
        first = self.first_frame.get(fields[1], _UNKNOWN)
        if first is None:
            if opaque:
                raise WireError("malformed_message",
                                f"{self._name(fields)} travels in its envelope alone, got {opaque} frame(s) after it",
                                fields)
        elif first is not _UNKNOWN and opaque and len(fields) != first:  # no frame after it: folded (§2.1)
            raise WireError("malformed_message",
                            f"{self._name(fields)} carries fields 0-{first - 1} in its envelope and the rest as "
                            f"frames; got {len(fields)} field(s) in the envelope and {opaque} frame(s) after it",
                            fields)
        # A command we do not know passes too: a newer peer may send it (§10), and the caller skips it.
        if opaque:
            fields += [f if isinstance(f, bytes) else bytes(f) for f in frames[1:]]
        return fields

    @staticmethod
    def _name(fields: list[bytes]) -> str:
        return fields[1][:32].decode("utf-8", errors="replace")


_UNKNOWN = object()  # first_frame's answer for a command not in the table

# Batches (§2.2): several folded messages in one frame, each a field of a BATCH envelope.
BATCH_MESSAGES, BATCH_BYTES = 30, 4096
BATCH_ROOM = BATCH_BYTES - 16  # for the messages and their length prefixes: the envelope's head takes the rest
_BATCH_COMMAND = bytes((5,)) + b"BATCH"


def is_batch(frame: bytes) -> bool:
    """Whether a frame is a BATCH (§2.2): its envelope's command is BATCH."""
    return frame[5:11] == _BATCH_COMMAND and len(frame) >= 11


def batches(messages: list[bytes], announce: bool = False) -> list[bytes]:
    """The frames carrying `messages` (each one folded message) in order: batches of at most 30 messages and 4096
    bytes; a message alone as it is, unless `announce` (a batch of one tells the bus that this peer reads them)."""
    frames, start, count, room = [], 0, len(messages), BATCH_ROOM
    while start < count:
        end, size = start, 0
        while end < count and end - start < BATCH_MESSAGES and size + len(messages[end]) + 5 <= room:
            size += len(messages[end]) + 5
            end += 1
        if end - start <= 1 and not (announce and end > start):
            frames.append(messages[start])
            start += 1
        else:
            header = messages[start][:HEADER_BYTES]
            frames.append(envelope(header, [b"BATCH", *messages[start:end]]))
            start = end
    return frames


def split_batch(frame: bytes) -> list[bytes]:
    """The messages of a BATCH frame (`is_batch`), each one frame; raises `WireError` for a malformed one."""
    fields = read_envelope(frame)
    if len(fields) < 3:
        raise WireError("malformed_message", "BATCH holds no message", fields[:2])
    return fields[2:]


# F per command, from the v2 framing's table.
CLIENT_TO_BUS = Direction("client -> bus", CLIENT, {
    b"REQUEST": 7, b"ROUND": 6, b"QUERY": 5, b"ASK": 7,
    b"SKILLS": None, b"SNAPSHOT": None, b"AGENTS": None, b"CANCEL": None, b"APPROVE": None,
})
BUS_TO_CLIENT = Direction("bus -> client", CLIENT, {
    b"REPLY": 7, b"SKILLS": 3, b"ERROR": 3, b"ENTRY": 3, b"SNAPSHOT": 3, b"AGENTS": 3, b"ROUND": 4,
    b"ANSWER": 5, b"TURN": 5, b"STREAM": 3, b"PROGRESS": 5, b"CONFIRM": 5, b"OUTPUT": 5, b"CANCELLED": 3,
})
WORKER_TO_BUS = Direction("worker -> bus", WORKER, {
    b"READY": 2, b"RESULT": 4, b"STATE": 2, b"HEARTBEAT": 3, b"DISCONNECT": None, b"SKILLS": 2,
    b"ANSWER": 4, b"CONTEXT": 2, b"TURNEND": 4, b"STREAM": 3, b"OUTPUT": 4, b"CLAIM": 5, b"CALLED": 5,
    b"RELEASE": None, b"STEP": 3, b"OFFER": 5,
})
BUS_TO_WORKER = Direction("bus -> worker", WORKER, {
    b"WELCOME": 2, b"INVOKE": 7, b"CANCEL": None, b"HEARTBEAT": None, b"ERROR": 2, b"QUERY": 3, b"TURN": 6, b"VERDICT": 6,
})
