"""A DEALER that speaks ZMTP 3 itself, over a plain TCP socket (NULL mechanism only).

With pyzmq every message crosses two threads: libzmq's I/O thread reads and writes the network and hands
each message over through a mailbox, so a quick invocation costs a worker four thread wake-ups. This DEALER
reads and writes on the thread that uses it: one wake-up per burst, and a recv and a send system call. It
serves the package's client and worker on `tcp://` without keys; with keys (CURVE), or another transport,
or `SKILLBUS_PY_ENGINE=libzmq`, the package uses pyzmq (`SocketThread`). Only the parts of pyzmq's socket
interface that `SocketThread` uses are here: `fileno()` for its poller, `recv_message()` and `send_message()`
for whole messages, `connect`/`disconnect`/`close`.

What it keeps of libzmq's DEALER: messages sent before the handshake ends wait for it (up to the send
high-water mark, then dropped, as a DEALER sending without blocking drops); a lost connection is made again
after the reconnect interval, doubling up to its maximum; a frame past the message size limit ends the
connection; a PING is answered with PONG. What it does not: several peers, other mechanisms, ZAP.
"""

from __future__ import annotations

import os
import select
import socket
import time

import zmq

_MORE, _LONG, _COMMAND = 0x01, 0x02, 0x04
_GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)
_READY = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
_SHORT_HEADERS = [bytes((0, size)) for size in range(256)]
_SHORT_MORE_HEADERS = [bytes((_MORE, size)) for size in range(256)]
_READ_CHUNK = 256 * 1024
_CONNECT_TIMEOUT_S = 2.0
_FLUSH_WAIT_S = 1.0  # how long a send waits for a full kernel buffer to drain before keeping the rest
_MAX_UNSENT = 64 << 20  # past this much the kernel did not take, new messages are dropped (a peer that stopped)


def wanted(kind: int, endpoint, options: dict) -> bool:
    """Whether this DEALER can serve a socket of `kind` to `endpoint` with `options`: a DEALER to one
    `tcp://` endpoint without keys, unless SKILLBUS_PY_ENGINE=libzmq asks for pyzmq."""
    return (kind == zmq.DEALER and isinstance(endpoint, str) and endpoint.startswith("tcp://")
            and zmq.CURVE_SERVERKEY not in options and os.environ.get("SKILLBUS_PY_ENGINE") != "libzmq")


def _address(endpoint: str) -> tuple[str, int]:
    """`tcp://host:port` (a host name, an IPv4 address or a bracketed IPv6 one) as (host, port)."""
    rest = endpoint[len("tcp://"):]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"cannot connect to {endpoint!r}: not tcp://HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class Dealer:
    """One connection to one ROUTER, made again when it is lost. Used by one thread at a time."""

    def __init__(self, options: dict):
        self._max_frame = options.get(zmq.MAXMSGSIZE, -1)
        self._hwm = options.get(zmq.SNDHWM, 1000) or 1 << 30
        self._reconnect_min = options.get(zmq.RECONNECT_IVL, 100) / 1000
        self._reconnect_max = max(options.get(zmq.RECONNECT_IVL_MAX, 0) / 1000, self._reconnect_min)
        self._linger = options.get(zmq.LINGER, 0) / 1000
        # Polled while there is no connection: never readable (nothing is written to the other end, which stays
        # open), so the poller waits for its other items.
        self._idle_reader, self._idle_writer = socket.socketpair()
        self._endpoint: str | None = None
        self._sock: socket.socket | None = None
        self._greeted = False  # the peer's greeting came
        self._ready = False  # both READYs passed: messages flow
        self._inbox = bytearray()
        self._read_at = 0  # where the next frame starts in `_inbox`
        self._frames: list[bytes] = []  # the message being read
        self._waiting: list[bytes] = []  # encoded messages sent before the handshake ended
        self._unsent = b""  # what the kernel did not take yet
        self._retry_at = 0.0
        self._retry_wait = self._reconnect_min
        # Connections that ended after their handshake, and connects the peer's host refused (nobody listens
        # there): pyzmq's DEALER never says, this one does (`SocketThread`).
        self.closed = 0
        self.refused = 0
        self.refusing = False  # the last connect was refused (none made since)

    # --- the pyzmq-like surface -----------------------------------------------------------------

    def fileno(self) -> int:
        self._reconnect_if_due()
        return (self._sock or self._idle_reader).fileno()

    def next_attempt(self) -> float | None:
        """When the next connect is due (`time.monotonic()`), while there is no connection."""
        return self._retry_at if self._sock is None and self._endpoint is not None else None

    def refusals(self) -> int:
        """Connects refused so far, after trying again if that is due (so a refusal is known before a wait)."""
        self._reconnect_if_due()
        return self.refused

    def connect(self, endpoint: str) -> None:
        _address(endpoint)  # a malformed endpoint fails here, as zmq's connect does
        self._endpoint = endpoint
        self._retry_at, self._retry_wait = 0.0, self._reconnect_min
        self._reconnect_if_due()

    def disconnect(self, endpoint: str) -> None:
        """As libzmq's: what waited for this endpoint's handshake goes with it."""
        if endpoint == self._endpoint:
            self._drop()
            self._waiting = []
            self._endpoint = None

    def close(self, linger: int | None = None) -> None:
        wait = self._linger if linger is None else linger / 1000
        if self._sock is not None and self._unsent and wait > 0:
            self._flush(wait)
        self._drop()
        self._endpoint = None
        self._idle_reader.close()
        self._idle_writer.close()

    def send_message(self, frames: list[bytes]) -> None:
        """Sends one message of `frames` (bytes), or keeps it until the handshake ends; drops it past the
        high-water mark, as a DEALER sending without blocking does."""
        parts = []
        last = len(frames) - 1
        for index, frame in enumerate(frames):
            size = len(frame)
            if size < 256:
                parts.append((_SHORT_MORE_HEADERS if index < last else _SHORT_HEADERS)[size])
            else:
                parts.append(bytes((_LONG | (_MORE if index < last else 0),)) + size.to_bytes(8, "big"))
            parts.append(frame)
        encoded = b"".join(parts)
        if not self._ready:
            self._reconnect_if_due()
            if len(self._waiting) < self._hwm:
                self._waiting.append(encoded)
            return
        if len(self._unsent) < _MAX_UNSENT:
            self._write(encoded)

    def recv_message(self) -> list[bytes]:
        """The next whole message; raises `zmq.Again` when none has come."""
        if self._unsent:
            self._flush(0)
        while True:
            message = self._parse()
            if message is not None:
                return message
            if self._sock is None:
                raise zmq.Again()
            try:
                chunk = self._sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                raise zmq.Again() from None
            except OSError:
                chunk = b""
            if not chunk:
                self._lost()
                raise zmq.Again()
            if self._read_at:
                del self._inbox[:self._read_at]
                self._read_at = 0
            self._inbox += chunk

    # --- the connection -------------------------------------------------------------------------

    def _reconnect_if_due(self) -> None:
        if self._sock is not None or self._endpoint is None or time.monotonic() < self._retry_at:
            return
        try:
            sock = socket.create_connection(_address(self._endpoint), timeout=_CONNECT_TIMEOUT_S)
        except OSError as error:
            if isinstance(error, ConnectionRefusedError):
                self.refused += 1
                self.refusing = True
            self._retry_later()
            return
        self.refusing = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self._sock = sock  # the rest of the connection's state was cleared when the last one ended (`_drop`)
        self._write(_GREETING)

    def _retry_later(self) -> None:
        self._retry_at = time.monotonic() + self._retry_wait
        self._retry_wait = min(2 * self._retry_wait, self._reconnect_max)

    def _lost(self) -> None:
        """The peer closed the connection or broke the protocol: made again after the reconnect interval."""
        if self._ready:
            self.closed += 1
        self._drop()
        self._retry_later()

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._greeted = self._ready = False
        self._inbox.clear()
        self._read_at = 0
        self._frames = []
        self._unsent = b""

    def _write(self, data: bytes) -> None:
        if self._sock is None:
            return
        if self._unsent:
            data = self._unsent + data
            self._unsent = b""
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._lost()
            return
        if sent < len(data):
            self._unsent = data[sent:]
            self._flush(_FLUSH_WAIT_S)

    def _flush(self, wait: float) -> None:
        """Waits up to `wait` seconds for the kernel to take what it did not; keeps the rest for the next send."""
        deadline = time.monotonic() + wait
        while self._unsent and self._sock is not None:
            left = max(0.0, deadline - time.monotonic())
            if not select.select([], [self._sock], [], left)[1]:
                return
            try:
                sent = self._sock.send(self._unsent)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                self._lost()
                return
            self._unsent = self._unsent[sent:]

    # --- reading --------------------------------------------------------------------------------

    def _parse(self) -> list[bytes] | None:
        """Takes the next whole message out of what was read (from `_read_at` on: what came before is taken, and
        cut off only when more is read, so a burst of messages is not moved once per message); handles the
        greeting and commands on the way."""
        inbox = self._inbox
        if not self._greeted:
            if len(inbox) < 64:
                return None
            if inbox[0] != 0xFF or inbox[9] != 0x7F or inbox[10] < 3 or bytes(inbox[12:16]) != b"NULL":
                self._lost()  # not ZMTP 3, or another mechanism (a coordinator with keys)
                return None
            self._read_at = 64
            self._greeted = True
            self._write(bytes((_COMMAND, len(_READY))) + _READY)
        position, end = self._read_at, len(inbox)
        while end - position >= 2 and self._sock is not None:
            flags = inbox[position]
            if flags & _LONG:
                if end - position < 9:
                    break
                size = int.from_bytes(inbox[position + 1:position + 9], "big")
                start = position + 9
            else:
                size = inbox[position + 1]
                start = position + 2
            if 0 <= self._max_frame < size:
                self._lost()
                return None
            if end - start < size:
                break
            body = bytes(inbox[start:start + size])
            position = self._read_at = start + size
            if flags & _COMMAND:
                self._command(body)  # which may end the connection: the loop then stops
                continue
            if not self._ready:
                self._lost()  # a message before the handshake ended
                return None
            self._frames.append(body)
            if not flags & _MORE:
                message, self._frames = self._frames, []
                return message
        return None

    def _command(self, body: bytes) -> None:
        """A command frame: the peer's READY ends the handshake; PING is answered; ERROR or anything unexpected
        before READY ends the connection."""
        name = body[1:1 + body[0]] if body else b""
        if name == b"READY" and not self._ready:
            self._ready = True
            self._retry_wait = self._reconnect_min  # the next loss waits the shortest interval again
            waiting, self._waiting = self._waiting, []
            if waiting:
                self._write(b"".join(waiting))
        elif name == b"PING" and self._ready:
            context = body[7:23]
            pong = b"\x04PONG" + context
            self._write(bytes((_COMMAND, len(pong))) + pong)
        elif not self._ready:
            self._lost()
