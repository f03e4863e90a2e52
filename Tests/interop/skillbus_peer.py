#!/usr/bin/env python3
"""A Skillbus peer in Python, written from docs/PROTOCOL.md alone (wire protocol v1).

Two roles:

  worker  python3 skillbus_peer.py worker --coordinator tcp://127.0.0.1:5555 --name py-worker
          Registers `py.reverse` (text -> reversed text) and `py.fail` (always fails with
          `skill_failed`), heartbeats, serves INVOKE with RESULT, honours CANCEL, reports STATE,
          re-registers when the bus forgets it, and on SIGTERM/SIGINT cancels what runs, sends
          DISCONNECT and exits 0. Prints `python worker ready` once the first WELCOME arrived.

  client  python3 skillbus_peer.py client --coordinator tcp://127.0.0.1:5555 SKILL [key=value ...]
                                           [--timeout SECONDS]
          Sends one REQUEST and prints one JSON line
          {"status": "ok"|"error", "agent": ..., "result": ..., "error": ...}.
          Exit status: 0 ok, 1 error reply (REPLY error, bus ERROR, or an undecodable reply),
          3 no answer within timeout + 1 s. `key=value` passes a string; `key:=JSON` passes a JSON
          value (e.g. `count:=3`).

Section numbers (§) refer to docs/PROTOCOL.md.
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
import uuid

import zmq

CLIENT = b"SKB1C"
WORKER = b"SKB1W"
MAX_DEPTH = 128
STATES = {"idle", "thinking", "selectingSkill", "executingSkill", "streaming", "completed", "failed"}


def log(role: str, text: str) -> None:
    print(f"[{role}] {text}", file=sys.stderr, flush=True)


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
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key '{key}'")
        obj[key] = value
    return obj


def _reject_constant(name):
    raise ValueError(f"'{name}' is not JSON")


def _check_tree(value, depth: int = 1) -> None:
    """Depth ≤ 128, no lone surrogates, no numbers that overflowed to infinity (§2 "Reading")."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH}")
    if isinstance(value, str):
        value.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    elif isinstance(value, float) and math.isinf(value):
        raise ValueError("number out of range")
    elif isinstance(value, list):
        for item in value:
            _check_tree(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            key.encode("utf-8")
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


SKILL_DESCRIPTORS = [
    {"identifier": "py.reverse", "displayName": "Reverse (Python)",
     "description": "Returns the text it is given, reversed.",
     "parameters": [{"name": "text", "type": "string", "required": True,
                     "description": "Text to reverse"}]},
    {"identifier": "py.fail", "displayName": "Fail (Python)",
     "description": "Always fails with skill_failed.", "parameters": []},
]


def make_skills(reverse_delay: float):
    def reverse(params: dict, inv: Invocation) -> dict:
        # The optional delay exists only to make CANCEL/timeout observable in tests.
        if reverse_delay > 0 and inv.cancel.wait(reverse_delay):
            raise Cancelled()
        return {"type": "text", "text": params["text"][::-1]}

    def fail(params: dict, inv: Invocation) -> dict:
        raise SkillError("skill_failed", "py.fail always fails")

    return {"py.reverse": reverse, "py.fail": fail}


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
        self.sock = self.ctx.socket(zmq.DEALER)
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
        self.last_state = {"state": "idle"}
        self.ready_backoff = self.READY_BACKOFF_MIN
        now = time.monotonic()
        self.next_ready = now          # when to (re)send READY while not registered
        self.next_heartbeat = now
        self.last_heard = now
        self.shutdown_deadline = None  # set on SIGTERM

    # -- sending ---------------------------------------------------------------------------------
    def send(self, *frames: bytes) -> None:
        try:
            self.sock.send_multipart([WORKER, *frames], flags=zmq.NOBLOCK)
        except zmq.Again:
            log(self.name, f"dropped {frames[0].decode()}: send queue full")

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
        if len(frames) < 2 or frames[0] != WORKER:
            log(self.name, f"ignored message with header {frames[0][:8]!r}")
            return
        command, expected = frames[1], {b"WELCOME": 3, b"INVOKE": 8, b"CANCEL": 3,
                                        b"HEARTBEAT": 2, b"ERROR": 3}.get(frames[1])
        if expected is None or (len(frames) != expected and command != b"HEARTBEAT"):
            log(self.name, f"ignored malformed {command[:16]!r} with {len(frames)} frames")
            return
        if command == b"WELCOME":
            self.on_welcome(frames[2])
        elif command == b"INVOKE":
            self.on_invoke(*frames[2:])
        elif command == b"CANCEL":
            inv = self.running.get(frames[2])
            if inv is not None:  # unknown or finished ids are ignored (§4.9)
                log(self.name, f"CANCEL {frames[2].decode(errors='replace')}")
                inv.cancel.set()
        elif command == b"ERROR":
            self.on_error(frames[2])
        # HEARTBEAT: last_heard was refreshed already.

    def on_welcome(self, body: bytes) -> None:
        try:
            welcome = parse_json(body)
            self.bus_heartbeat_ms = int(welcome.get("heartbeatMs", self.heartbeat_ms))
        except (ValueError, TypeError, AttributeError):
            welcome = {}
        self.registered, self.awaiting_welcome = True, False
        self.ready_backoff = self.READY_BACKOFF_MIN
        self.last_state = {"state": "idle"}  # the bus resets its view to idle (§4.5)
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
        if len(self.running) >= self.capacity:
            return refuse("busy", f"agent '{self.name}' already runs {self.capacity} invocation(s)")
        if skill not in self.skills:
            return refuse("unknown_skill", f"agent '{self.name}' does not offer skill '{skill}'")
        try:
            params = parse_json(params_frame)
        except ValueError as exc:
            return refuse("invalid_parameters", f"parameters for '{skill}' are not valid JSON: {exc}")
        if not isinstance(params, dict):
            return refuse("invalid_parameters", f"parameters for '{skill}' must be a JSON object, "
                                                f"got {json_type_name(params)}")
        params, problems = validate_parameters(self.descriptors[skill], params)
        if problems:
            return refuse("invalid_parameters",
                          f"invalid parameters for '{skill}': " + "; ".join(problems), problems)
        # Step 7+: run it on a pool thread; the main thread keeps the socket.
        inv = Invocation(inv_id, skill, deadline_ms)
        self.running[inv_id] = inv
        self.send_state({"skill": skill, "state": "executingSkill"})
        self.pool.submit(self.execute, inv, params)

    # -- skill execution (pool threads) ----------------------------------------------------------
    def execute(self, inv: Invocation, params: dict) -> None:
        try:
            outcome = ("ok", self.skills[inv.skill](params, inv), None)
        except Cancelled:
            outcome = ("error", error_object("cancelled", f"'{inv.skill}' was cancelled"), "cancelled")
        except SkillError as exc:
            outcome = ("error", exc.error, exc.error["message"])
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
        self.send_result(inv.id, status, payload)
        if failure is not None:
            self.send_state({"reason": failure, "state": "failed"})
        if not self.running:
            self.send_state({"state": "idle"})


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


def request(endpoint: str, skill: str, params: dict, timeout_ms: int,
            session: str = "") -> tuple[int, dict]:
    """Sends one REQUEST; returns (exit status, output object)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    rid = new_request_id().encode()
    try:
        sock.send_multipart([CLIENT, b"REQUEST", rid, str(uuid.uuid4()).encode(), session.encode(),
                             skill.encode(), str(timeout_ms).encode(), dump_json(params)])
        deadline = time.monotonic() + timeout_ms / 1000 + 1.0  # the bus answers timeout itself
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if not poller.poll(math.ceil(left * 1000)):
                break
            frames = sock.recv_multipart()
            if len(frames) < 3 or frames[0] != CLIENT or frames[2] != rid:
                continue  # not ours
            if frames[1] == b"REPLY" and len(frames) == 8:
                return decode_reply(frames)
            if frames[1] == b"ERROR" and len(frames) == 4:
                try:
                    err = normalise_error(parse_json(frames[3]))
                except ValueError:
                    err = error_object("malformed_message", "undecodable ERROR from the bus")
                return 1, output("error", None, None, err)
        return 3, output("error", None, None, error_object(
            "unreachable", f"no answer from {endpoint} within {timeout_ms / 1000 + 1:g} s"))
    finally:
        sock.close()
        ctx.term()


def decode_reply(frames: list[bytes]) -> tuple[int, dict]:
    status = frames[4].decode("utf-8", errors="replace")
    agent = frames[5].decode("utf-8", errors="replace") or None
    try:
        payload = parse_json(frames[7])
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
# Command line
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "skillbus_peer.py {worker,client} ... (see --help of each role)"
    if not argv or argv[0] not in ("worker", "client"):
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


if __name__ == "__main__":
    sys.exit(main())
