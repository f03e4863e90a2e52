#!/usr/bin/env python3
"""A Skillbus peer in Python, written from docs/PROTOCOL.md alone (wire protocol v2).

Four roles:

  worker  python3 skillbus_peer.py worker --coordinator tcp://127.0.0.1:5555 --name py-worker
          Registers `py.reverse` (text -> reversed text), `py.fail` (always fails with
          `skill_failed`) and `py.count` (emits 1 … n as partial output: one OUTPUT before its
          RESULT), heartbeats, serves INVOKE with RESULT, honours CANCEL, reports STATE,
          re-registers when the bus forgets it, and on SIGTERM/SIGINT cancels what runs, sends
          DISCONNECT and exits 0. Prints `python worker ready` once the first WELCOME arrived.

  client  python3 skillbus_peer.py client --coordinator tcp://127.0.0.1:5555 SKILL [key=value ...]
                                           [--timeout SECONDS]
          Sends one REQUEST and prints one JSON line
          {"status": "ok"|"error", "agent": ..., "result": ..., "error": ...}.
          Exit status: 0 ok, 1 error reply (REPLY error, bus ERROR, or an undecodable reply),
          3 no answer within timeout + 1 s. `key=value` passes a string; `key:=JSON` passes a JSON
          value (e.g. `count:=3`).

  replica python3 skillbus_peer.py replica --coordinator tcp://127.0.0.1:5555
                                           --feed tcp://127.0.0.1:5556
                                           [--until-agents a,b,c] [--timeout SECONDS]
          Holds a registry replica (§8.3): subscribes to `registry.` on the feed, asks the bus for a
          SNAPSHOT, catches up and follows the numbered updates, resyncing on gaps, on another epoch
          and on a heartbeat ahead of it. Once synced with exactly the agents of --until-agents (or
          synced at all, without it) prints one JSON line
          {"epoch": ..., "seq": ..., "digest": ..., "agents": [entries sorted by name]}
          (digest per §8.4) and exits 0; exit 3 when that did not happen within --timeout (20 s).

  round   python3 skillbus_peer.py round --coordinator tcp://127.0.0.1:5555
                                          (--plan FILE
                                           | --fanout SKILL [--agents a,b] [--aggregate all|first|majority]
                                           | --invoke SKILL) [key=value ...]
                                          [--round-id ID] [--session ID] [--timeout SECONDS]
          Sends one ROUND (§3.1, §3.5) and prints its round document (§5.14) as one line of JSON,
          exactly the bytes the bus sent. --plan FILE holds the value of "plan" (the object with
          `steps` and `onFailure`, like configs/plans/*.json); --fanout and --invoke take the skill
          and its parameters (`key=value` strings, `key:=JSON` values, as for client). Defaults are
          left out of the body (agents "all", aggregate "all"). The round id defaults to a new
          lower-case UUID; sending the same body again with the same --round-id returns the same
          document (§3.5.8). Exit status: 0 document status ok, 1 document status error (or a bus
          ERROR, or an undecodable answer: nothing on stdout then, the reason on stderr), 3 no
          answer within timeout + 1 s.

Keys (§12): when SKILLBUS_SERVER_KEY (the coordinator's public key, or its file) and SKILLBUS_KEY
(this peer's secret key file, NAME.key) are set, every socket connects over CURVE.

Section numbers (§) refer to docs/PROTOCOL.md. Its field numbers are those of v2 too; v2 changes only how
the fields travel (`pack` and `unpack` below).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import math
import os
import queue
import random
import signal
import socket
import sys
import threading
import time
import unicodedata
import uuid

import zmq

CLIENT = b"SKB2C"
WORKER = b"SKB2W"
V1_HEADERS = (b"SKB1C", b"SKB1W")
MAX_DEPTH = 128
STATES = {"idle", "thinking", "selectingSkill", "executingSkill", "streaming", "completed", "failed"}


def read_key(value: str) -> bytes:
    """A Z85 key given as itself or as the path of a file holding it (one line, 40 characters)."""
    if len(value) == 40 and not os.path.exists(value):
        return value.encode()
    with open(value, "rb") as handle:
        return handle.read().strip()


def secure(sock: zmq.Socket) -> zmq.Socket:
    """CURVE client options from SKILLBUS_SERVER_KEY and SKILLBUS_KEY (§12.1), when both are set."""
    server, own = os.environ.get("SKILLBUS_SERVER_KEY"), os.environ.get("SKILLBUS_KEY")
    if server and own:
        secret = read_key(own)
        sock.curve_serverkey = read_key(server)
        sock.curve_secretkey = secret
        sock.curve_publickey = zmq.curve_public(secret)
    return sock


def log(role: str, text: str) -> None:
    print(f"[{role}] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Framing, v2: frame 0 is the envelope (the header, then fields 1 .. F-1, each with its length),
# and fields F, F+1, ... follow as frames of their own
# ---------------------------------------------------------------------------------------------

# F by header and command, one table per direction; None: every field is in the envelope.
TO_BUS = {
    CLIENT: {b"REQUEST": 7, b"ROUND": 6, b"QUERY": 5, b"ASK": 7, b"SKILLS": None, b"SNAPSHOT": None,
             b"AGENTS": None, b"CANCEL": None, b"APPROVE": None},
    WORKER: {b"READY": 2, b"RESULT": 4, b"STATE": 2, b"HEARTBEAT": 3, b"DISCONNECT": None, b"SKILLS": 2,
             b"ANSWER": 4, b"CONTEXT": 2, b"TURNEND": 4, b"STREAM": 3, b"OUTPUT": 4, b"CLAIM": 5,
             b"CALLED": 5, b"RELEASE": None, b"STEP": 3},
}
FROM_BUS = {
    CLIENT: {b"REPLY": 7, b"SKILLS": 3, b"ERROR": 3, b"ENTRY": 3, b"SNAPSHOT": 3, b"AGENTS": 3,
             b"ROUND": 4, b"ANSWER": 5, b"TURN": 5, b"STREAM": 3, b"PROGRESS": 5, b"CONFIRM": 5,
             b"OUTPUT": 5, b"CANCELLED": 3},
    WORKER: {b"WELCOME": 2, b"INVOKE": 7, b"CANCEL": None, b"HEARTBEAT": None, b"ERROR": 2, b"QUERY": 3,
             b"TURN": 6},
}


def pack(fields: list[bytes], table: dict) -> list[bytes]:
    """The frames of a message given as its numbered fields (field 0 the header, 1 the command)."""
    first = table[fields[0]][fields[1]]
    split = len(fields) if first is None else min(first, len(fields))
    envelope = bytearray(fields[0])
    for field in fields[1:split]:
        envelope += bytes([len(field)]) if len(field) < 255 else b"\xff" + len(field).to_bytes(4, "big")
        envelope += field
    return [bytes(envelope), *fields[split:]]


def unpack(frames: list[bytes], table: dict) -> list[bytes]:
    """The numbered fields of a message (field 0 the header); ValueError when it is not v2 as `table`
    has it: another header, a truncated envelope, an unknown command or fields split at the wrong place."""
    envelope = frames[0] if frames else b""
    header = envelope[:5]
    if header not in table:
        names = " or ".join(h.decode() for h in table)
        hint = " (wire protocol v1)" if envelope in V1_HEADERS else ""
        raise ValueError(f"header {envelope[:16]!r}{hint} is not {names}")
    fields, at = [header], 5
    while at < len(envelope):
        size, at = envelope[at], at + 1
        if size == 0xFF:
            if at + 4 > len(envelope):
                raise ValueError(f"truncated envelope: the length of field {len(fields)} is cut short")
            size, at = int.from_bytes(envelope[at:at + 4], "big"), at + 4
        if at + size > len(envelope):
            raise ValueError(f"truncated envelope: field {len(fields)} has {size} bytes, "
                             f"{len(envelope) - at} are left")
        fields.append(envelope[at:at + size])
        at += size
    if len(fields) < 2:
        raise ValueError("truncated envelope: no command")
    command = fields[1]
    if command not in table[header]:
        raise ValueError(f"unknown command {command[:32]!r}")
    first, after = table[header][command], len(frames) - 1
    # Frames may follow only an envelope that ends just before field F.
    if (after and len(fields) != first) or (not after and first is not None and len(fields) > first):
        where = "no field travels as a frame" if first is None else f"fields {first} on travel as frames"
        raise ValueError(f"wrong split: in {command.decode(errors='replace')} {where}; got fields 0 to "
                         f"{len(fields) - 1} in the envelope and {after} frame(s) after it")
    return fields + frames[1:]


# ---------------------------------------------------------------------------------------------
# JSON as Skillbus writes and reads it (§2)
# ---------------------------------------------------------------------------------------------

def _whole_numbers_as_integers(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers_as_integers(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers_as_integers(v) for k, v in value.items()}
    return value


def dump_json(value) -> bytes:
    """Compact, sorted keys, raw UTF-8, 3.0 written as 3, no NaN/Infinity (§2 "Writing")."""
    return json.dumps(_whole_numbers_as_integers(value), separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False, allow_nan=False).encode("utf-8")


def _no_duplicates(pairs):
    """Keys that are canonically equivalent (the same after NFC) count as the same key (§2)."""
    obj, seen = {}, set()
    for key, value in pairs:
        normal = unicodedata.normalize("NFC", key)
        if normal in seen:
            raise ValueError(f"duplicate key '{key}'")
        seen.add(normal)
        obj[key] = value
    return obj


def _reject_constant(name):
    raise ValueError(f"'{name}' is not JSON")


def _check_tree(value, depth: int = 0) -> None:
    """At most 128 nested arrays/objects (scalars add no level), no lone surrogates, no number
    whose double is infinite — a float or an integer literal alike (§2 "Reading")."""
    if isinstance(value, str):
        value.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    elif isinstance(value, bool):
        pass
    elif isinstance(value, float) and math.isinf(value):
        raise ValueError("number out of range")
    elif isinstance(value, int):
        try:
            float(value)  # Skillbus holds every number as a double
        except OverflowError:
            raise ValueError("number out of range") from None
    elif isinstance(value, (list, dict)):
        if depth + 1 > MAX_DEPTH:
            raise ValueError(f"nesting deeper than {MAX_DEPTH}")
        for key in value if isinstance(value, dict) else ():
            key.encode("utf-8")
        for item in value.values() if isinstance(value, dict) else value:
            _check_tree(item, depth + 1)


def parse_json(data: bytes):
    """Strict RFC 8259 parse of one frame; raises ValueError on anything Skillbus would refuse."""
    try:
        text = data.decode("utf-8")  # explicit: json.loads(bytes) would also guess UTF-16/32
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
        _check_tree(value)
    except (UnicodeError, RecursionError) as exc:
        raise ValueError(str(exc)) from None
    return value


def error_object(code: str, message: str, details=None) -> dict:
    err = {"code": code, "message": message}
    if details is not None:
        err["details"] = details
    return err


def normalise_error(value) -> dict:
    """A reader meeting an object without code → internal, without message → "no message given" (§5.6)."""
    if not isinstance(value, dict):
        return error_object("malformed_message", "error payload is not a JSON object")
    err = dict(value)
    if not isinstance(err.get("code"), str):
        err["code"] = "internal"
    if not isinstance(err.get("message"), str):
        err["message"] = "no message given"
    return err


def is_result_form(value) -> bool:
    """The three result forms of §5.5."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if kind == "text":
        return isinstance(value.get("text"), str)
    if kind == "json":
        return "json" in value
    if kind == "attachment":
        return all(isinstance(value.get(k), str) for k in ("name", "mediaType", "base64"))
    return False


# ---------------------------------------------------------------------------------------------
# Parameter validation (§5.3)
# ---------------------------------------------------------------------------------------------

def json_type_name(value) -> str:
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


def type_accepts(type_name: str, value) -> bool:
    actual = json_type_name(value)
    if type_name == "any":
        return actual != "null"
    if type_name == "number":
        return actual in ("integer", "number")
    return actual == type_name


def validate_parameters(skill: dict, params: dict) -> tuple[dict, list[str]]:
    """Returns (parameters with defaults inserted, problems)."""
    fields = skill.get("parameters", [])
    declared = [f["name"] for f in fields]
    out, problems = dict(params), []
    for field in fields:
        name, type_name = field["name"], field["type"]
        if name in params:
            if not type_accepts(type_name, params[name]):
                problems.append(f"parameter '{name}' must be {type_name}, "
                                f"got {json_type_name(params[name])}")
        elif field.get("required", True):
            problems.append(f"missing required parameter '{name}' ({type_name})")
        elif "default" in field:
            out[name] = field["default"]
    expected = ", ".join(declared) if declared else "none"
    for key in sorted(k for k in params if k not in declared):
        problems.append(f"unknown parameter '{key}' (expected: {expected})")
    return out, problems


# ---------------------------------------------------------------------------------------------
# The two skills
# ---------------------------------------------------------------------------------------------

class SkillError(Exception):
    """A Skillbus error raised by a skill: becomes RESULT error with this code (§4.10 step 8)."""

    def __init__(self, code: str, message: str, details=None):
        super().__init__(message)
        self.error = error_object(code, message, details)


class Cancelled(Exception):
    """The invocation was cancelled (CANCEL from the bus, or worker shutdown)."""


class Invocation:
    def __init__(self, invocation_id: bytes, skill: str, deadline_ms: int):
        self.id = invocation_id
        self.skill = skill
        self.deadline = time.monotonic() + deadline_ms / 1000  # informative only (§4.9)
        self.cancel = threading.Event()
        self.parts: list[dict] = []  # partial output (§3.9, §5.19), sent as one OUTPUT before the RESULT

    def emit(self, text: str) -> None:
        self.parts.append({"type": "text", "text": text})


SKILL_DESCRIPTORS = [
    {"identifier": "py.reverse", "displayName": "Reverse (Python)",
     "description": "Returns the text it is given, reversed.",
     "parameters": [{"name": "text", "type": "string", "required": True,
                     "description": "Text to reverse"}]},
    {"identifier": "py.fail", "displayName": "Fail (Python)",
     "description": "Always fails with skill_failed.", "parameters": []},
    {"identifier": "py.count", "displayName": "Count (Python)",
     "description": "Emits 1 … n as partial output, then says how far it counted.",
     "parameters": [{"name": "n", "type": "integer", "required": True,
                     "description": "How far to count"}]},
]


def make_skills(reverse_delay: float):
    def reverse(params: dict, inv: Invocation) -> dict:
        # The optional delay exists only to make CANCEL/timeout observable in tests.
        if reverse_delay > 0 and inv.cancel.wait(reverse_delay):
            raise Cancelled()
        return {"type": "text", "text": params["text"][::-1]}

    def fail(params: dict, inv: Invocation) -> dict:
        raise SkillError("skill_failed", "py.fail always fails")

    def count(params: dict, inv: Invocation) -> dict:
        n = int(params["n"])
        for i in range(1, n + 1):
            inv.emit(str(i))
        return {"type": "text", "text": f"counted to {n}"}

    return {"py.reverse": reverse, "py.fail": fail, "py.count": count}


# ---------------------------------------------------------------------------------------------
# Worker (§4)
# ---------------------------------------------------------------------------------------------

class Worker:
    READY_BACKOFF_MIN, READY_BACKOFF_MAX = 1.0, 32.0
    SHUTDOWN_GRACE = 2.0  # seconds to wait for cancelled invocations before DISCONNECT

    def __init__(self, endpoint: str, name: str, capacity: int, heartbeat_ms: int,
                 reverse_delay: float):
        self.name, self.capacity, self.heartbeat_ms = name, capacity, heartbeat_ms
        self.descriptors = {d["identifier"]: d for d in SKILL_DESCRIPTORS}
        self.skills = make_skills(reverse_delay)

        self.ctx = zmq.Context()
        self.sock = secure(self.ctx.socket(zmq.DEALER))
        self.sock.setsockopt(zmq.LINGER, 200)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 1000)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 32000)
        self.sock.connect(endpoint)

        # One wake-up pipe for both signals (set_wakeup_fd writes the signal number) and
        # finished skills (their threads write a 0 byte). The poller watches it with the socket.
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.wake_r.fileno(), zmq.POLLIN)

        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=capacity)
        self.finished: queue.Queue = queue.Queue()
        self.running: dict[bytes, Invocation] = {}

        self.registered = False
        self.awaiting_welcome = False
        self.announced = False
        self.bus_heartbeat_ms = heartbeat_ms
        self.last_state = {"state": "idle"}   # the STATE last sent (None: send the current one)
        self.current_skill = ""                # the skill of the invocation that started last
        self.ready_backoff = self.READY_BACKOFF_MIN
        now = time.monotonic()
        self.next_ready = now          # when to (re)send READY while not registered
        self.next_heartbeat = now
        self.last_heard = now
        self.shutdown_deadline = None  # set on SIGTERM

    # -- sending ---------------------------------------------------------------------------------
    def send(self, *fields: bytes) -> None:
        """Sends fields 1, 2, ... (the command first) of a worker message."""
        try:
            self.sock.send_multipart(pack([WORKER, *fields], TO_BUS), flags=zmq.NOBLOCK)
        except zmq.Again:
            log(self.name, f"dropped {fields[0].decode()}: send queue full")

    def send_ready(self) -> None:
        body = {"name": self.name, "capacity": self.capacity, "heartbeatMs": self.heartbeat_ms,
                "skills": SKILL_DESCRIPTORS}
        self.send(b"READY", dump_json(body))
        self.awaiting_welcome = True
        self.next_ready = time.monotonic() + self.ready_backoff
        self.ready_backoff = min(self.ready_backoff * 2, self.READY_BACKOFF_MAX)

    def send_state(self, state: dict) -> None:
        if state != self.last_state:
            self.last_state = state
            self.send(b"STATE", dump_json(state))

    def send_result(self, invocation_id: bytes, status: str, payload: dict) -> None:
        self.send(b"RESULT", invocation_id, status.encode(), dump_json(payload))

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> int:
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        # A parent may start us with these blocked (a thread pool's mask is inherited): unblock them.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)  # the byte on the wake-up pipe does the work
        try:
            while True:
                now = time.monotonic()
                if self.shutdown_deadline is not None and (
                        not self.running or now >= self.shutdown_deadline):
                    break
                events = dict(self.poller.poll(self.poll_timeout_ms(now)))
                if self.wake_r.fileno() in events:
                    self.on_wake()
                if self.sock in events:
                    self.drain_socket()
                self.on_timers()
            self.send(b"DISCONNECT")
            log(self.name, "sent DISCONNECT")
            return 0
        finally:
            signal.set_wakeup_fd(-1)
            for inv in self.running.values():
                inv.cancel.set()
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.sock.close()  # LINGER 200 ms lets DISCONNECT go out
            self.ctx.term()
            self.wake_r.close()
            self.wake_w.close()

    def poll_timeout_ms(self, now: float) -> int:
        due = [self.next_heartbeat if self.registered else self.next_ready]
        if self.shutdown_deadline is not None:
            due.append(self.shutdown_deadline)
        return max(0, math.ceil((min(due) - now) * 1000))

    def on_wake(self) -> None:
        try:
            data = self.wake_r.recv(4096)
        except BlockingIOError:
            data = b""
        if any(b in (signal.SIGTERM, signal.SIGINT) for b in data) and self.shutdown_deadline is None:
            log(self.name, f"signal received: cancelling {len(self.running)} invocation(s), leaving")
            self.shutdown_deadline = time.monotonic() + self.SHUTDOWN_GRACE
            for inv in self.running.values():
                inv.cancel.set()
        while True:
            try:
                inv, status, payload, failure = self.finished.get_nowait()
            except queue.Empty:
                break
            self.finish(inv, status, payload, failure)

    def drain_socket(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self.last_heard = time.monotonic()
            self.on_message(frames)

    def on_timers(self) -> None:
        now = time.monotonic()
        if self.shutdown_deadline is not None:
            return
        if not self.registered:
            if now >= self.next_ready:
                self.send_ready()
            return
        if now >= self.next_heartbeat:
            self.send(b"HEARTBEAT")
            self.next_heartbeat = now + self.heartbeat_ms / 1000
            silent_for = now - self.last_heard
            if silent_for > 3 * max(self.bus_heartbeat_ms, 10) / 1000:  # §4.7: bus presumed lost
                log(self.name, f"bus silent for {silent_for:.1f} s: registering again")
                self.registered = False
                self.ready_backoff = self.READY_BACKOFF_MIN
                self.send_ready()

    # -- incoming messages -----------------------------------------------------------------------
    def on_message(self, frames: list[bytes]) -> None:
        try:
            fields = unpack(frames, FROM_BUS)
        except ValueError as exc:
            log(self.name, f"ignored a message: {exc}")
            return
        if fields[0] != WORKER:
            log(self.name, f"ignored message with header {fields[0]!r}")
            return
        command, expected = fields[1], {b"WELCOME": 3, b"INVOKE": 8, b"CANCEL": 3,
                                        b"HEARTBEAT": 2, b"ERROR": 3, b"QUERY": 4}.get(fields[1])
        if expected is None or (len(fields) != expected and command != b"HEARTBEAT"):
            log(self.name, f"ignored malformed {command[:16]!r} with {len(fields)} fields")
            return
        if command == b"WELCOME":
            self.on_welcome(fields[2])
        elif command == b"INVOKE":
            self.on_invoke(*fields[2:])
        elif command == b"CANCEL":
            inv = self.running.get(fields[2])
            if inv is not None:  # unknown or finished ids are ignored (§4.9)
                log(self.name, f"CANCEL {fields[2].decode(errors='replace')}")
                inv.cancel.set()
        elif command == b"ERROR":
            self.on_error(fields[2])
        elif command == b"QUERY":
            # This peer keeps no context store: every question about it is answered unsupported (§3.6).
            self.send(b"ANSWER", fields[2], b"error", dump_json(
                {"code": "unsupported", "message": f"agent '{self.name}' keeps no context store"}))
        # HEARTBEAT: last_heard was refreshed already.

    def on_welcome(self, body: bytes) -> None:
        try:
            welcome = parse_json(body)
            self.bus_heartbeat_ms = int(welcome.get("heartbeatMs", self.heartbeat_ms))
        except (ValueError, TypeError, AttributeError):
            welcome = {}
        self.registered, self.awaiting_welcome = True, False
        self.ready_backoff = self.READY_BACKOFF_MIN
        # A registration resets the bus's view to idle (§4.5): state the current one again (§4.10).
        self.last_state = None
        self.send_state({"skill": self.current_skill, "state": "executingSkill"} if self.running
                        else {"state": "idle"})
        self.next_heartbeat = time.monotonic() + self.heartbeat_ms / 1000
        for refused in welcome.get("refused", []):
            log(self.name, f"skill refused: {refused}")
        log(self.name, f"registered; accepted {welcome.get('accepted')}, "
                       f"bus heartbeat {self.bus_heartbeat_ms} ms")
        if not self.announced:
            self.announced = True
            print("python worker ready", flush=True)

    def on_error(self, body: bytes) -> None:
        try:
            err = normalise_error(parse_json(body))
        except ValueError:
            err = error_object("internal", "undecodable ERROR body")
        code = err["code"]
        if code == "not_registered":
            # ERROR carries no correlation (§4.2). Bus replies arrive in order, so a
            # not_registered that arrives while our READY is unanswered refers to a message sent
            # before that READY: answering it with another READY would re-register needlessly.
            if not self.awaiting_welcome:
                log(self.name, "bus says not registered: sending READY")
                self.registered = False
                self.ready_backoff = self.READY_BACKOFF_MIN
                self.send_ready()
        elif code in ("name_taken", "invalid_registration"):
            log(self.name, f"registration refused ({code}): {err['message']}; "
                           f"retrying in {self.next_ready - time.monotonic():.0f} s")
            self.awaiting_welcome = False  # next_ready (with back-off) was set by send_ready
        else:
            log(self.name, f"bus ERROR {code}: {err['message']}")

    def on_invoke(self, inv_id: bytes, round_id: bytes, session: bytes, skill_frame: bytes,
                  deadline_frame: bytes, params_frame: bytes) -> None:
        def refuse(code: str, message: str, details=None) -> None:
            self.send_result(inv_id, "error", error_object(code, message, details))

        skill = skill_frame.decode("utf-8", errors="replace")
        try:
            deadline_ms = int(deadline_frame)
        except ValueError:
            deadline_ms = 0
        # §4.10 steps 1-6: nothing runs, no STATE.
        if self.shutdown_deadline is not None:
            return refuse("agent_lost", f"agent '{self.name}' is shutting down")
        # The wording is the error table of §4.10, byte for byte (the reason after "valid JSON: "
        # is this parser's own).
        if len(self.running) >= self.capacity:
            return refuse("busy", f"agent '{self.name}' is at capacity ({self.capacity})")
        if skill not in self.skills:
            offered = ", ".join(sorted(self.skills)) or "none"
            return refuse("unknown_skill", f"agent '{self.name}' does not offer '{skill}' (offers: {offered})")
        try:
            params = parse_json(params_frame)
        except ValueError as exc:
            return refuse("invalid_parameters", f"parameters of '{skill}' are not valid JSON: {exc}")
        if not isinstance(params, dict):
            return refuse("invalid_parameters", f"parameters of '{skill}' must be a JSON object, "
                                                f"got {json_type_name(params)}")
        params, problems = validate_parameters(self.descriptors[skill], params)
        if problems:
            return refuse("invalid_parameters",
                          f"invalid parameters for '{skill}': " + "; ".join(problems), problems)
        # Step 7+: run it on a pool thread; the main thread keeps the socket.
        inv = Invocation(inv_id, skill, deadline_ms)
        self.running[inv_id] = inv
        self.current_skill = skill
        self.send_state({"skill": skill, "state": "executingSkill"})
        self.pool.submit(self.execute, inv, params)

    # -- skill execution (pool threads) ----------------------------------------------------------
    def execute(self, inv: Invocation, params: dict) -> None:
        try:
            outcome = ("ok", self.skills[inv.skill](params, inv), None)
        except Cancelled:
            outcome = ("error", error_object("cancelled", f"'{inv.skill}' was cancelled"), "cancelled")
        except SkillError as exc:
            reason = "cancelled" if exc.error["code"] == "cancelled" else exc.error["message"]
            outcome = ("error", exc.error, reason)
        except Exception as exc:  # noqa: BLE001 - any other failure is skill_failed (§4.10 step 10)
            message = f"'{inv.skill}' failed: {exc}"
            outcome = ("error", error_object("skill_failed", message), message)
        self.finished.put((inv, *outcome))
        try:
            self.wake_w.send(b"\0")
        except OSError:
            pass  # the pipe is full: the main loop will wake anyway

    def finish(self, inv: Invocation, status: str, payload: dict, failure: str | None) -> None:
        """Order on the wire: RESULT → (STATE failed) → (STATE idle) (§4.10)."""
        self.running.pop(inv.id, None)
        if inv.parts:
            # OUTPUT: invocation id, how many parts came before (none: this is the only batch), parts (§4.1).
            self.send(b"OUTPUT", inv.id, b"0", dump_json(inv.parts))
        self.send_result(inv.id, status, payload)
        if failure is not None:
            self.send_state({"reason": failure, "state": "failed"})
        if not self.running:
            self.send_state({"state": "idle"})
        elif failure is not None:
            self.send_state({"skill": self.current_skill, "state": "executingSkill"})  # §4.10 rule 4


# ---------------------------------------------------------------------------------------------
# Client (§3)
# ---------------------------------------------------------------------------------------------

_request_counter = itertools.count(1)


def new_request_id() -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    n, out = random.getrandbits(40), ""
    while n:
        n, d = divmod(n, 36)
        out = digits[d] + out
    return f"{out or '0'}-{next(_request_counter)}"


def exchange(endpoint: str, fields: list[bytes], answers: dict[bytes, int],
             wait_s: float) -> list[bytes] | None:
    """Sends the message `fields` (field 2 is the request id) on a fresh DEALER and returns the
    fields of the first answer carrying that request id whose command is in `answers` (command ->
    field count) or is an ERROR; None when nothing came within `wait_s`."""
    ctx = zmq.Context()
    sock = secure(ctx.socket(zmq.DEALER))
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    rid = fields[2]
    try:
        sock.send_multipart(pack(fields, TO_BUS))
        deadline = time.monotonic() + wait_s
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if not poller.poll(math.ceil(left * 1000)):
                break
            frames = sock.recv_multipart()
            if len(frames) >= 3 and frames[0] in V1_HEADERS and frames[1] == b"ERROR":
                # A v1 bus answers in v1 form, without our request id (§10); this socket is ours alone.
                return [CLIENT, b"ERROR", rid, frames[-1]]
            try:
                answer = unpack(frames, FROM_BUS)
            except ValueError as exc:
                log("client", f"ignored a message: {exc}")
                continue
            if len(answer) < 3 or answer[0] != CLIENT or answer[2] != rid:
                continue  # not ours
            if answers.get(answer[1]) == len(answer) or (answer[1] == b"ERROR" and len(answer) == 4):
                return answer
            log("client", f"ignored {answer[1][:16]!r} with {len(answer)} fields for our request id")
        return None
    finally:
        sock.close()
        ctx.term()


def bus_error(fields: list[bytes]) -> dict:
    """The error object of an ERROR answer."""
    try:
        return normalise_error(parse_json(fields[3]))
    except ValueError:
        return error_object("malformed_message", "undecodable ERROR from the bus")


def request(endpoint: str, skill: str, params: dict, timeout_ms: int,
            session: str = "") -> tuple[int, dict]:
    """Sends one REQUEST; returns (exit status, output object)."""
    fields = [CLIENT, b"REQUEST", new_request_id().encode(), str(uuid.uuid4()).encode(), session.encode(),
              skill.encode(), str(timeout_ms).encode(), dump_json(params)]
    # The bus answers timeout itself at the deadline; the extra second is for that answer.
    answer = exchange(endpoint, fields, {b"REPLY": 8}, timeout_ms / 1000 + 1.0)
    if answer is None:
        return 3, output("error", None, None, error_object(
            "unreachable", f"no answer from {endpoint} within {timeout_ms / 1000 + 1:g} s"))
    if answer[1] == b"ERROR":
        return 1, output("error", None, None, bus_error(answer))
    return decode_reply(answer)


def decode_reply(fields: list[bytes]) -> tuple[int, dict]:
    status = fields[4].decode("utf-8", errors="replace")
    agent = fields[5].decode("utf-8", errors="replace") or None
    try:
        payload = parse_json(fields[7])
    except ValueError as exc:
        return 1, output("error", agent, None, error_object(
            "malformed_message", f"reply payload is not JSON: {exc}"))
    if status == "ok":
        if not is_result_form(payload):
            return 1, output("error", agent, None, error_object(
                "malformed_message", "reply payload is not a result object", payload))
        return 0, output("ok", agent, payload, None)
    if status == "error":
        return 1, output("error", agent, None, normalise_error(payload))
    return 1, output("error", agent, None, error_object(
        "malformed_message", f"reply status '{status}' is neither ok nor error"))


def output(status: str, agent, result, error) -> dict:
    return {"status": status, "agent": agent, "result": result, "error": error}


def parse_assignments(items: list[str]) -> dict:
    """`key=value` → string value; `key:=JSON` → JSON value."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value or key:=JSON, got '{item}'")
        if key.endswith(":"):
            params[key[:-1]] = parse_json(value.encode())
        else:
            params[key] = value
    return params


# ---------------------------------------------------------------------------------------------
# Rounds (§3.5)
# ---------------------------------------------------------------------------------------------

def round_body(shape: str, skill_or_plan, params: dict | None = None, agents: list[str] | None = None,
               aggregate: str | None = None) -> dict:
    """The ROUND body of §3.5.1: an object with exactly one key naming the shape. Keys left at
    their default (params {}, agents "all", aggregate "all") are left out; the bus fills them in."""
    if shape == "plan":
        return {"plan": skill_or_plan}  # the plan object as given (a file's whole content)
    inner = {"skill": skill_or_plan}
    if params:
        inner["params"] = params
    if shape == "fanout":
        if agents is not None:
            inner["agents"] = agents
        if aggregate is not None:
            inner["aggregate"] = aggregate
    return {shape: inner}


class RoundFailed(Exception):
    """No round document: a bus ERROR (exit 1), an undecodable answer (1) or no answer (3)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.exit_code = code


def send_round(endpoint: str, body: dict, round_id: str, timeout_ms: int,
               session: str = "") -> tuple[bytes, dict]:
    """Sends one ROUND (§3.1, 7 fields) and waits for the ROUND answer with its request id (§3.2,
    5 fields). Returns (document bytes as sent by the bus, parsed document)."""
    fields = [CLIENT, b"ROUND", new_request_id().encode(), round_id.encode(), session.encode(),
              str(timeout_ms).encode(), dump_json(body)]
    # One deadline for the whole round; the bus answers by then (§3.5.6): wait 1 s more.
    answer = exchange(endpoint, fields, {b"ROUND": 5}, timeout_ms / 1000 + 1.0)
    if answer is None:
        raise RoundFailed(3, f"unreachable: no ROUND answer from {endpoint} within "
                             f"{timeout_ms / 1000 + 1:g} s")
    if answer[1] == b"ERROR":
        raise RoundFailed(1, f"bus refused the ROUND message: ERROR {canonical_json(bus_error(answer))}")
    if answer[3] != round_id.encode():
        log("round", f"answer names round {answer[3][:64]!r}, sent {round_id!r}")
    try:
        return answer[4], parse_json(answer[4])
    except ValueError as exc:
        raise RoundFailed(1, f"round document is not JSON: {exc}") from None


def run_round(endpoint: str, body: dict, round_id: str, timeout_ms: int, session: str) -> int:
    try:
        raw, document = send_round(endpoint, body, round_id, timeout_ms, session)
    except RoundFailed as exc:
        print(f"[round] {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    # The bus writes the document compact (§5.14), so its bytes are one line; JSON allows
    # whitespace around tokens, so fall back to our own compact writing if a newline slipped in.
    line = raw.strip()
    if b"\n" in line or b"\r" in line:
        line = canonical_json(document).encode("utf-8")
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()
    status = document.get("status") if isinstance(document, dict) else None
    if status == "ok":
        return 0
    if status == "error":
        err = normalise_error(document.get("error"))
        log("round", f"round {document.get('round')!r} failed: {err['code']}: {err['message']}")
        return 1
    log("round", f"round document without a status of ok or error: {status!r}")
    return 1


# ---------------------------------------------------------------------------------------------
# Registry replica (§8)
# ---------------------------------------------------------------------------------------------

_CANON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TWO_POW_53 = float(2 ** 53)


def _canon_number(value) -> str:
    """A number spelled as Skillbus spells an IEEE double (§2 "Numbers", rules 1-3)."""
    try:
        x = float(value)  # every number is a double on the wire; big ints lose precision
    except OverflowError:
        raise ValueError("number out of range") from None
    if math.isnan(x) or math.isinf(x):
        return "null"  # rule 1
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))  # rule 2 (int(-0.0) == 0)
    # Rule 3: Python's repr is the shortest round-trip digit string and already agrees with
    # Skillbus below 1e-4 (exponent form) and from 1e-4 up to 2^53 (plain form, at least one
    # digit after the point). Above 2^53 Python stays plain up to 1e16; Skillbus switches.
    text = repr(x)
    if abs(x) > _TWO_POW_53 and "e" not in text:
        sign = "-" if x < 0 else ""
        whole, _, _fraction = text.lstrip("-").partition(".")  # the fraction is "0" here
        exponent = len(whole) - 1
        digits = whole.rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = f"{sign}{mantissa}e+{exponent:02d}"
    return text


def _canon_string(text: str) -> str:
    out = ['"']
    for ch in text:
        escaped = _CANON_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")  # \u0008 and \u000c too, never \b or \f
        else:
            out.append(ch)  # raw UTF-8: no escapes for non-ASCII, DEL, U+2028 or "/"
    out.append('"')
    return "".join(out)


def canonical_json(value) -> str:
    """JSON exactly as Skillbus writes it (§2 "Writing"): compact, keys sorted by code point."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return _canon_number(value)
    if isinstance(value, str):
        return _canon_string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_canon_string(key) + ":" + canonical_json(value[key])
                              for key in sorted(value)) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def registry_digest(entries: dict) -> str:
    """FNV-1a 64 over each entry's canonical JSON plus 0x0A, agents in name order (§8.4)."""
    h = FNV_OFFSET_BASIS
    for name in sorted(entries):
        for byte in canonical_json(entries[name]).encode("utf-8") + b"\n":
            h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def is_valid_name(value) -> bool:
    """Agent name / skill identifier: 1-128 bytes of A-Z a-z 0-9 . _ - (§2 "Identifiers")."""
    return isinstance(value, str) and 1 <= len(value) <= 128 and all(c in _NAME_CHARS for c in value)


def whole_number(value):
    """An "integer" in the §2 sense (2, 2.0, 2e0) as a Python int, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    if abs(value) >= 9e15:
        return None
    return int(value)


def is_valid_entry(entry) -> bool:
    """§5.10: a valid agent name, an integer capacity ≥ 1, a skills array (of descriptors)."""
    if not isinstance(entry, dict) or not is_valid_name(entry.get("agent")):
        return False
    capacity = whole_number(entry.get("capacity"))
    skills = entry.get("skills")
    if capacity is None or capacity < 1 or not isinstance(skills, list):
        return False
    return all(isinstance(d, dict) and is_valid_name(d.get("identifier")) for d in skills)


class SnapshotFailed(Exception):
    """Rule 7 of §8.3: the attempt is abandoned and retried after a back-off."""


class Replica:
    """A read-only copy of the bus's registry, kept by the Clone algorithm of §8.3."""

    ROLE = "replica"
    SNAPSHOT_WAIT = 3.0                      # seconds for a summary before the attempt fails
    RETRY_MIN, RETRY_MAX = 1.0, 32.0         # rule 7 back-off
    QUEUE_LIMIT = 100_000                    # updates kept while not synced

    def __init__(self, coordinator: str, feed: str):
        self.ctx = zmq.Context()
        # Rule 1: subscribe to the registry topics before the snapshot is asked for.
        self.sub = secure(self.ctx.socket(zmq.SUB))
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"registry.")
        self.sub.connect(feed)
        self.bus = secure(self.ctx.socket(zmq.DEALER))
        self.bus.setsockopt(zmq.LINGER, 0)
        self.bus.connect(coordinator)
        self.poller = zmq.Poller()
        self.poller.register(self.sub, zmq.POLLIN)
        self.poller.register(self.bus, zmq.POLLIN)

        self.entries: dict[str, dict] = {}
        self.epoch: str | None = None
        self.seq = 0
        self.synced = False
        self.queue: list[dict] = []          # registry.update bodies received while not synced
        self.snapshots_loaded = 0

        # The snapshot attempt in flight (rid is None when there is none).
        self.rid: bytes | None = None
        self.snap_entries: dict[str, dict] = {}
        self.snap_count = 0
        self.snap_deadline = 0.0
        self.retry_at = time.monotonic()     # when the next attempt may start
        self.retry_delay = self.RETRY_MIN

    def close(self) -> None:
        self.sub.close()
        self.bus.close()
        self.ctx.term()

    def position(self) -> dict:
        return {"epoch": self.epoch, "seq": self.seq, "digest": registry_digest(self.entries)}

    # -- snapshot (rules 2, 3, 4, 7) --------------------------------------------------------------
    def start_snapshot(self) -> None:
        self.rid = new_request_id().encode()
        self.snap_entries, self.snap_count = {}, 0
        self.snap_deadline = time.monotonic() + self.SNAPSHOT_WAIT
        self.bus.send_multipart(pack([CLIENT, b"SNAPSHOT", self.rid], TO_BUS))
        log(self.ROLE, f"asked for a snapshot ({self.rid.decode()}), {len(self.queue)} update(s) queued")

    def snapshot_failed(self, why: str) -> None:
        self.rid = None
        self.retry_at = time.monotonic() + self.retry_delay
        log(self.ROLE, f"snapshot failed: {why}; retrying in {self.retry_delay:g} s")
        self.retry_delay = min(self.retry_delay * 2, self.RETRY_MAX)

    def on_bus_message(self, frames: list[bytes]) -> None:
        try:
            fields = unpack(frames, FROM_BUS)
        except ValueError as exc:
            log(self.ROLE, f"ignored a message from the bus: {exc}")
            return
        if self.rid is None or len(fields) < 3 or fields[0] != CLIENT or fields[2] != self.rid:
            return  # not the attempt in flight (e.g. the tail of an abandoned one)
        command = fields[1]
        try:
            if command == b"ERROR":
                body = fields[3] if len(fields) == 4 else b"{}"
                try:
                    err = normalise_error(parse_json(body))
                except ValueError:
                    err = error_object("malformed_message", "undecodable ERROR")
                raise SnapshotFailed(f"bus ERROR {err['code']}: {err['message']}")
            if len(fields) != 4 or command not in (b"ENTRY", b"SNAPSHOT"):
                raise SnapshotFailed(f"unexpected {command[:16]!r} with {len(fields)} fields")
            try:
                body = parse_json(fields[3])
            except ValueError as exc:
                raise SnapshotFailed(f"{command.decode()} body is not JSON: {exc}") from None
            if command == b"ENTRY":
                if not is_valid_entry(body):
                    raise SnapshotFailed(f"unreadable ENTRY {fields[3][:200]!r}")
                self.snap_count += 1
                self.snap_entries[body["agent"]] = body
            else:
                self.load_snapshot(body)
        except SnapshotFailed as exc:
            self.snapshot_failed(str(exc))

    def load_snapshot(self, summary) -> None:
        if not isinstance(summary, dict):
            raise SnapshotFailed("summary is not a JSON object")
        epoch, seq, agents = summary.get("epoch"), whole_number(summary.get("seq")), \
            whole_number(summary.get("agents"))
        if not isinstance(epoch, str) or seq is None or seq < 0 or agents is None or agents < 0:
            raise SnapshotFailed(f"incomplete summary {summary}")
        if agents != self.snap_count or agents != len(self.snap_entries):
            raise SnapshotFailed(f"summary says {agents} agent(s), got {self.snap_count} ENTRY "
                                 f"message(s) for {len(self.snap_entries)} agent(s)")
        # Rule 3: replace everything.
        self.entries, self.epoch, self.seq, self.synced = self.snap_entries, epoch, seq, True
        self.rid, self.snap_entries, self.retry_delay = None, {}, self.RETRY_MIN
        self.snapshots_loaded += 1
        log(self.ROLE, f"snapshot loaded: epoch {epoch}, seq {seq}, {agents} agent(s) "
                       f"{sorted(self.entries)}")
        # Rule 4: catch up with the queued updates of this epoch that are newer than the snapshot.
        pending = sorted((u for u in self.queue if u["epoch"] == epoch and u["seq"] > seq),
                         key=lambda u: u["seq"])
        dropped = len(self.queue) - len(pending)
        self.queue = []
        if pending or dropped:
            log(self.ROLE, f"catching up: {len(pending)} queued update(s) to apply, {dropped} dropped")
        for index, update in enumerate(pending):
            self.on_update(update)
            if not self.synced:  # a gap: this update and every later one wait for the next snapshot
                self.queue.extend(pending[index + 1:])
                break

    # -- feed (rules 5, 6, 8) ---------------------------------------------------------------------
    def on_feed_message(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return
        try:
            body = parse_json(frames[1])
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if frames[0] == b"registry.update":
            update = self.readable_update(body)
            if update is None:
                log(self.ROLE, f"ignored unreadable registry.update {frames[1][:200]!r}")
            elif self.synced:
                self.on_update(update)
            else:
                self.enqueue(update)
        elif frames[0] == b"registry.heartbeat":
            epoch, seq = body.get("epoch"), whole_number(body.get("seq"))
            if isinstance(epoch, str) and seq is not None and seq >= 0:
                self.on_heartbeat(epoch, seq)
        # Other registry.* topics (a later revision) are ignored.

    @staticmethod
    def readable_update(body: dict):
        """Rule 8: only epoch, seq, agent and entry matter; None when the update is unreadable."""
        epoch, seq, agent = body.get("epoch"), whole_number(body.get("seq")), body.get("agent")
        if not isinstance(epoch, str) or seq is None or seq < 1 or not isinstance(agent, str):
            return None
        if "entry" not in body:
            return None
        entry = body["entry"]
        if entry is not None and (not is_valid_entry(entry) or entry["agent"] != agent):
            return None
        return {"epoch": epoch, "seq": seq, "agent": agent, "entry": entry}

    def enqueue(self, update: dict) -> None:
        self.queue.append(update)
        if len(self.queue) > self.QUEUE_LIMIT:
            del self.queue[:len(self.queue) // 2]  # a gap this causes is repaired like any other
            log(self.ROLE, "update queue full: dropped the older half")

    def desync(self, why: str) -> None:
        self.synced = False
        self.retry_at = time.monotonic()  # take a new snapshot at once
        self.retry_delay = self.RETRY_MIN
        log(self.ROLE, f"resync: {why}")

    def on_update(self, update: dict) -> None:
        """Rule 5, while synced."""
        if update["epoch"] != self.epoch:
            self.enqueue(update)
            self.desync(f"update of epoch {update['epoch']} while holding {self.epoch} "
                        f"(coordinator restarted)")
        elif update["seq"] <= self.seq:
            pass  # old or duplicate
        elif update["seq"] == self.seq + 1:
            agent, entry = update["agent"], update["entry"]
            if entry is None:
                self.entries.pop(agent, None)
            else:
                self.entries[agent] = entry
            self.seq = update["seq"]
            log(self.ROLE, f"applied seq {self.seq}: {agent} "
                           f"{'removed' if entry is None else 'set'}; agents {sorted(self.entries)}")
        else:
            self.enqueue(update)
            self.desync(f"gap: update seq {update['seq']} while holding seq {self.seq}")

    def on_heartbeat(self, epoch: str, seq: int) -> None:
        """Rule 6."""
        if not self.synced:
            if self.rid is None and time.monotonic() < self.retry_at:
                log(self.ROLE, "registry heartbeat while waiting to retry: trying at once")
                self.retry_at = time.monotonic()
        elif epoch != self.epoch:
            self.desync(f"heartbeat of epoch {epoch} while holding {self.epoch} (coordinator restarted)")
        elif seq > self.seq:
            self.desync(f"heartbeat announces seq {seq} while holding seq {self.seq} (update lost)")
        elif seq < self.seq:
            log(self.ROLE, f"heartbeat announces seq {seq}, below the replica's {self.seq}")

    # -- main loop --------------------------------------------------------------------------------
    def follow(self, until: set[str] | None, timeout: float) -> dict | None:
        """Runs until synced with exactly the agents `until` (or synced at all when None).
        Returns the final state, or None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if self.synced and (until is None or set(self.entries) == until):
                return {"epoch": self.epoch, "seq": self.seq,
                        "digest": registry_digest(self.entries),
                        "agents": [self.entries[name] for name in sorted(self.entries)]}
            now = time.monotonic()
            if now >= deadline:
                return None
            if not self.synced:
                if self.rid is None and now >= self.retry_at:
                    self.start_snapshot()
                elif self.rid is not None and now >= self.snap_deadline:
                    self.snapshot_failed(f"no summary within {self.SNAPSHOT_WAIT:g} s")
            wake = [deadline]
            if not self.synced:
                wake.append(self.snap_deadline if self.rid is not None else self.retry_at)
            wait_ms = max(0, math.ceil((min(wake) - time.monotonic()) * 1000))
            events = dict(self.poller.poll(wait_ms))
            # Either order is correct: feed traffic read before the summary is queued (rule 4),
            # and traffic read after it is applied or ignored by its seq (rule 5).
            if self.bus in events:
                self.drain(self.bus, self.on_bus_message)
            if self.sub in events:
                self.drain(self.sub, self.on_feed_message)

    @staticmethod
    def drain(sock, handler) -> None:
        while True:
            try:
                frames = sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            handler(frames)


def run_replica(coordinator: str, feed: str, until: set[str] | None, timeout: float) -> int:
    replica = Replica(coordinator, feed)
    try:
        state = replica.follow(until, timeout)
    finally:
        replica.close()
    if state is None:
        want = "synced" if until is None else f"agents {sorted(until)}"
        have = (f"synced at epoch {replica.epoch} seq {replica.seq} with agents "
                f"{sorted(replica.entries)}" if replica.synced else
                f"not synced ({replica.snapshots_loaded} snapshot(s) loaded, "
                f"holding {sorted(replica.entries)})")
        print(f"[replica] timeout after {timeout:g} s waiting for {want}; {have}",
              file=sys.stderr, flush=True)
        return 3
    log(Replica.ROLE, f"done: epoch {state['epoch']}, seq {state['seq']}, digest {state['digest']}")
    # Entries are written back as Skillbus writes them, i.e. byte for byte as received (§8.4).
    line = ('{"epoch":' + canonical_json(state["epoch"]) + ',"seq":' + canonical_json(state["seq"])
            + ',"digest":' + canonical_json(state["digest"]) + ',"agents":['
            + ",".join(canonical_json(entry) for entry in state["agents"]) + "]}\n")
    sys.stdout.buffer.write(line.encode("utf-8"))
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "skillbus_peer.py {worker,client,replica,round} ... (see --help of each role)"
    if not argv or argv[0] not in ("worker", "client", "replica", "round"):
        print(f"usage: {usage}\n{__doc__}", file=sys.stderr)
        return 2

    if argv[0] == "worker":
        w = argparse.ArgumentParser(prog="skillbus_peer.py worker",
                                    description="serve py.reverse and py.fail")
        w.add_argument("--coordinator", required=True, help="bus endpoint, e.g. tcp://127.0.0.1:5555")
        w.add_argument("--name", required=True, help="agent name (1-128 of A-Za-z0-9._-)")
        w.add_argument("--capacity", type=int, default=4)
        w.add_argument("--heartbeat-ms", type=int, default=1000)
        w.add_argument("--reverse-delay", type=float, default=0.0, metavar="SECONDS",
                       help="make py.reverse take this long (cancellable); for testing CANCEL")
        args = w.parse_args(argv[1:])
        if args.capacity < 1 or args.heartbeat_ms < 10:
            w.error("--capacity must be >= 1 and --heartbeat-ms >= 10")
        return Worker(args.coordinator, args.name, args.capacity, args.heartbeat_ms,
                      args.reverse_delay).run()

    if argv[0] == "replica":
        r = argparse.ArgumentParser(prog="skillbus_peer.py replica",
                                    description="follow the registry (§8) and print where it stands")
        r.add_argument("--coordinator", required=True, help="bus endpoint, e.g. tcp://127.0.0.1:5555")
        r.add_argument("--feed", required=True, help="feed endpoint, e.g. tcp://127.0.0.1:5556")
        r.add_argument("--until-agents", metavar="a,b,c", default=None,
                       help="keep following until the registry holds exactly these agents "
                            "(an empty string means none); default: until synced once")
        r.add_argument("--timeout", type=float, default=20.0, metavar="SECONDS")
        args = r.parse_args(argv[1:])
        if not args.timeout > 0:
            r.error("--timeout must be > 0")
        until = None
        if args.until_agents is not None:
            until = {name.strip() for name in args.until_agents.split(",") if name.strip()}
            bad = sorted(name for name in until if not is_valid_name(name))
            if bad:
                r.error(f"--until-agents: invalid agent name(s) {', '.join(bad)}")
        return run_replica(args.coordinator, args.feed, until, args.timeout)

    if argv[0] == "round":
        return round_command(argv[1:])

    c = argparse.ArgumentParser(prog="skillbus_peer.py client",
                                description="send one REQUEST and print the outcome as JSON")
    c.add_argument("--coordinator", required=True)
    c.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS")
    c.add_argument("--session", default="")
    c.add_argument("skill")
    c.add_argument("params", nargs="*", metavar="key=value")
    args = c.parse_intermixed_args(argv[1:])
    if not args.skill:
        c.error("SKILL must not be empty")
    if not args.timeout > 0:
        c.error("--timeout must be > 0")
    try:
        params = parse_assignments(args.params)
    except ValueError as exc:
        c.error(str(exc))
    timeout_ms = max(1, round(args.timeout * 1000))
    code, result = request(args.coordinator, args.skill, params, timeout_ms, args.session)
    print(json.dumps(result, ensure_ascii=False, sort_keys=True), flush=True)
    return code



def round_command(args_in: list[str]) -> int:
    r = argparse.ArgumentParser(prog="skillbus_peer.py round",
                                description="send one ROUND (§3.5) and print its round document")
    r.add_argument("--coordinator", required=True, help="bus endpoint, e.g. tcp://127.0.0.1:5555")
    shape = r.add_mutually_exclusive_group(required=True)
    shape.add_argument("--plan", metavar="FILE",
                       help='a JSON file holding the value of "plan" ({"steps": [...], "onFailure": ...})')
    shape.add_argument("--fanout", metavar="SKILL", help="run SKILL on several agents")
    shape.add_argument("--invoke", metavar="SKILL", help="run SKILL once")
    r.add_argument("--agents", metavar="a,b",
                   help="fanout only: these agents, in this order (default: every provider)")
    r.add_argument("--aggregate", choices=("all", "first", "majority"),
                   help="fanout only (default all)")
    r.add_argument("--round-id", default=None, metavar="ID",
                   help="default: a new lower-case UUID; the same id and body give the same document")
    r.add_argument("--session", default="")
    r.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                   help="for the whole round (default 15)")
    r.add_argument("params", nargs="*", metavar="key=value",
                   help="--fanout/--invoke parameters: key=value (string) or key:=JSON")
    args = r.parse_intermixed_args(args_in)
    if not args.timeout > 0 or args.timeout > 86_400:
        r.error("--timeout must be > 0 and at most 86400 (one day)")
    if args.fanout is None and (args.agents is not None or args.aggregate is not None):
        r.error("--agents and --aggregate go with --fanout")
    if args.plan is not None and args.params:
        r.error("--plan takes no key=value parameters (they belong in the plan's steps)")
    try:
        params = parse_assignments(args.params)
    except ValueError as exc:
        r.error(str(exc))
    if args.plan is not None:
        try:
            with open(args.plan, "rb") as f:
                plan = parse_json(f.read())
        except OSError as exc:
            r.error(f"--plan: {exc}")
        except ValueError as exc:
            r.error(f"--plan {args.plan}: not JSON: {exc}")
        body = round_body("plan", plan)
    elif args.fanout is not None:
        agents = None
        if args.agents is not None:
            agents = [name.strip() for name in args.agents.split(",") if name.strip()]
            if not agents:
                r.error("--agents needs at least one name (leave it out for every provider)")
        body = round_body("fanout", args.fanout, params, agents, args.aggregate)
    else:
        body = round_body("invoke", args.invoke, params)
    round_id = str(uuid.uuid4()) if args.round_id is None else args.round_id
    timeout_ms = max(1, min(86_400_000, round(args.timeout * 1000)))
    return run_round(args.coordinator, body, round_id, timeout_ms, args.session)


if __name__ == "__main__":
    sys.exit(main())
