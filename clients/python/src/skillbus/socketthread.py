"""One ZeroMQ socket, one thread.

A ZeroMQ socket is not thread-safe, so every socket of this package is created, polled, used and
closed by one thread of its own. Other threads hand it frames through a locked outbox and wake it
through a socket pair that it polls beside the ZeroMQ socket.
"""

from __future__ import annotations

import collections
import socket
import sys
import threading
import time
import uuid

import zmq

from . import wire, zmtp

_NOBLOCK, _MORE, _RCVMORE = int(zmq.NOBLOCK), int(zmq.NOBLOCK | zmq.SNDMORE), int(zmq.RCVMORE)


class SocketThread:
    """Runs `handler` on a thread that owns one socket.

    The handler's `on_message(frames)` gets every message received; its `before_poll(now)` runs
    before each wait and returns when the thread must look again (a `time.monotonic()` value, or
    None to wait for a message or a wake-up alone). Both run on the owning thread, or on a thread
    that borrowed the socket (below), never on two threads at once.

    Lending: a handler whose `idle()` says True expects no message (a client with no call waiting).
    The owning thread then waits for a wake-up alone and leaves the socket untouched, and a thread about
    to wait for an answer of its own may `borrow()` it: that thread sends and receives itself
    (`serve_until`) and `give_back()`s the socket, so a lone blocking call needs no hand-over between
    threads, each of which costs a thread wake-up. Only one thread holds the socket at any time; the
    lock and the hand-over make the memory barrier libzmq asks for when a socket changes threads.

    The socket: a DEALER to one `tcp://` endpoint without keys is the package's own ZMTP (`zmtp.Dealer`, read and
    written on this thread, no libzmq I/O thread between); any other is pyzmq's. The own DEALER tells the handler's
    `connection_closed(now)`, when it has one, that a connection past its handshake ended, and its
    `connection_refused(now)` that the endpoint's host refused a connect (nobody listens there; it returns whether
    it dealt with that, else it hears it again at the next pass).

    Batching (PROTOCOL §2.2): with `batching`, one-frame messages sent by the thread that holds the socket are held
    until it next waits, and go out batched (the first of them as a batch even alone, which tells the bus that this
    peer reads batches); a batch that arrives is handed to the handler message by message.
    """

    def __init__(self, context: zmq.Context, kind: int, endpoint: str | list[str], handler, *, name: str,
                 options: dict | None = None, subscriptions: list[bytes] = (), refusals: bool = False,
                 batching: bool = False):
        self._handler = handler
        self._batching = batching
        self._held: list[bytes] = []  # one-frame messages waiting for the holder's next wait, to go batched
        self._held_bytes = 0  # what they take in a batch: a full batch goes at once
        self._announce = batching
        # With keys: a monitor of the socket, read by whichever thread holds it, hears a refused key (libzmq tells
        # only a monitor: HANDSHAKE_FAILED_AUTH); `key_refused` then stays True.
        self._watch_refusals = refusals
        self._monitor = None
        self.key_refused = False
        self._outbox: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._stopping = False
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._started = threading.Event()
        self._socket = None  # set on the owning thread once connected
        self._owner = None  # that thread's ident
        self._parked = False  # the owning thread waits for a wake-up alone: the socket may be lent
        self._borrower = None  # the ident of the thread the socket is lent to
        self._returned = threading.Event()  # set when a lent socket comes back
        self._lent_poller = None
        self._failure: BaseException | None = None
        self._setup = (context, kind, dict(options or {}), list(subscriptions))
        self._endpoint = endpoint  # a SUB may be given several: it connects to each
        self._poller = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure

    def send(self, frames: list[bytes]) -> None:
        """Sends one message: at once on the thread that holds the socket (the owner, or a borrower),
        after what other threads queued, to keep their order; else queued for the holder, which is
        woken. Callable from any thread."""
        me = threading.get_ident()
        if self._socket is not None and (me == self._owner and self._borrower is None or me == self._borrower):
            if self._outbox:
                self._flush(self._socket)
            if self._batching and len(frames) == 1:
                self._hold(self._socket, frames[0])
                return
            self._send_held(self._socket)
            self._send_now(self._socket, frames)
            return
        with self._lock:
            if self._stopping:
                return
            self._outbox.append(frames)
        self.wake()

    def borrow(self) -> bool:
        """Takes the socket for this thread if its owner is parked; says whether it did."""
        with self._lock:
            if not self._parked or self._borrower is not None or self._stopping or self._socket is None:
                return False
            self._borrower = threading.get_ident()
            return True

    def serve_until(self, done, deadline: float) -> None:
        """On the borrowing thread: sends what other threads queued and handles what arrives until
        `done()` or the `time.monotonic()` deadline."""
        sock, poller = self._socket, self._lent_poller
        if poller is None:  # one for every borrower: only one holds the socket at a time
            poller = self._lent_poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(self._wake_reader.fileno(), zmq.POLLIN)
            if self._monitor is not None:
                poller.register(self._monitor, zmq.POLLIN)
        while not done():
            if self._outbox:
                self._flush(sock)
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                return
            self._note_connection(sock)
            due = self._sooner(self._handler.before_poll(now), sock)  # what the owner would do before its wait
            if self._outbox:
                self._flush(sock)
            self._send_held(sock)
            if due is not None:
                left = min(left, max(0.0, due - now))
            for item, _ in poller.poll(int(left * 1000) + 1):
                if item is sock or self._zmtp and item == sock.fileno():
                    self._receive(sock)
                elif item is self._monitor:
                    self._read_monitor()
                else:
                    self._drain_wake()

    @property
    def refused_connect(self) -> str:
        """For an `unreachable` error: that nothing listens at the endpoint when the own DEALER's last connect was
        refused, else "" (always on pyzmq's, which does not say)."""
        sock = self._socket
        if not (self._zmtp and sock is not None and sock.refusing):
            return ""
        return f": nothing listens at {self._endpoint} (the connection is refused: is the coordinator running?)"

    def _sooner(self, due: float | None, sock) -> float | None:
        """`due`, or the own DEALER's next connect when that comes first (a refusal is then known at once)."""
        attempt = sock.next_attempt() if self._zmtp else None
        return due if attempt is None else attempt if due is None else min(due, attempt)

    def _note_connection(self, sock) -> None:
        """Tells the handler, before each wait, what the own DEALER learnt since the last one (pyzmq's says nothing):
        a connection past its handshake ended (`connection_closed`); connects were refused (`connection_refused`,
        after trying again when that is due, so a refusal is known before the wait; told again at the next pass
        until the handler says it dealt with them). What is seen is noted before the handler runs: it may open a
        new socket."""
        if not self._zmtp:
            return
        if sock.closed != self._closed_seen:
            self._closed_seen = sock.closed
            closed = getattr(self._handler, "connection_closed", None)
            if closed is not None:
                closed(time.monotonic())
            if sock is not self._socket:
                return
        if sock.refusals() == self._refused_seen:
            return
        seen, self._refused_seen = self._refused_seen, sock.refused
        refused = getattr(self._handler, "connection_refused", None)
        if refused is not None and not refused(time.monotonic()):
            self._refused_seen = seen

    def give_back(self) -> None:
        """Returns a borrowed socket to its owner. The owner, still parked, is woken only when it has
        something to do (messages queued, calls waiting, stopping): a thread making one blocking call
        after another borrows the socket each time without waking it."""
        if self._outbox:
            self._flush(self._socket)
        self._send_held(self._socket)
        with self._lock:
            self._borrower = None
            needed = bool(self._outbox) or self._stopping or not self._handler.idle()
        self._returned.set()
        if needed:
            self.wake()

    def retarget(self, endpoint: str) -> None:
        """Connects the socket to `endpoint` instead of the one it had (a client moving to another coordinator of
        a group). Only on the thread that holds the socket: from the handler's `on_message` or `before_poll`."""
        sock = self._socket
        try:
            sock.disconnect(self._endpoint)
        except zmq.ZMQError:
            pass  # never connected, or gone already
        sock.connect(endpoint)
        self._endpoint = endpoint
        self._announce = self._batching  # a new connection: the bus learns again that this peer reads batches

    def reopen(self, endpoint: str) -> None:
        """Closes the socket and opens a new one with the same options to `endpoint` (a worker moving to another
        coordinator of a group): nothing queued for the peer left is sent, and nothing it sent is read. Only on the
        owning thread of a socket that is never lent, from the handler's `on_message` or `before_poll`."""
        with self._lock:
            self._outbox.clear()
        self._held.clear()
        self._held_bytes = 0
        self._announce = self._batching  # a new connection: the bus learns again that this peer reads batches
        self._poller.unregister(self._socket)
        if self._monitor is not None:
            self._poller.unregister(self._monitor)
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
        self._socket.close(linger=0)
        self._socket = self._open(endpoint)
        self._poller.register(self._socket, zmq.POLLIN)
        if self._monitor is not None:
            self._poller.register(self._monitor, zmq.POLLIN)
        self._endpoint = endpoint

    def wake(self) -> None:
        """Makes the owning thread run `before_poll` again soon; callable from any thread."""
        try:
            self._wake_writer.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    def stop(self, timeout: float = 5.0) -> None:
        """Sends what is queued, closes the socket on its thread and waits for that thread."""
        with self._lock:
            self._stopping = True
        self.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _open(self, endpoint: str | list[str]):
        context, kind, options, subscriptions = self._setup
        if zmtp.wanted(kind, endpoint, options):
            sock = zmtp.Dealer(options)
            sock.connect(endpoint)
            # pyzmq's poller names a polled object that is not one of its sockets by its descriptor (`_zmtp`).
            self._zmtp, self._send_now, self._read_message = True, zmtp.Dealer.send_message, zmtp.Dealer.recv_message
            self._closed_seen = self._refused_seen = 0
            return sock
        self._zmtp, self._send_now, self._read_message = False, self._send_zmq, self._read_zmq
        sock = context.socket(kind)
        try:
            for option, value in options.items():
                sock.setsockopt(option, value)
            for prefix in subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
            if self._watch_refusals:  # before connecting, so that no event is missed
                # An address of its own: pyzmq's default names the socket's descriptor, which a later socket
                # reuses while the closed one's monitor may still hold that address.
                self._monitor = sock.get_monitor_socket(
                    zmq.EVENT_HANDSHAKE_FAILED_AUTH, addr=f"inproc://skillbus-refusals-{uuid.uuid4().hex}")
            for each in [endpoint] if isinstance(endpoint, str) else endpoint:
                sock.connect(each)
        except zmq.ZMQError as error:
            sock.close(linger=0)
            raise ValueError(f"cannot connect to {endpoint!r}: {error}") from error
        return sock

    def _run(self) -> None:
        try:
            sock = self._open(self._endpoint)
        except ValueError as error:
            self._failure = error
            self._started.set()
            return
        self._owner, self._socket = threading.get_ident(), sock
        self._started.set()
        poller = self._poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_reader.fileno(), zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        parked_poller = zmq.Poller()  # the wake-up alone: no use of the socket
        parked_poller.register(self._wake_reader.fileno(), zmq.POLLIN)
        idle = getattr(self._handler, "idle", None)
        try:
            while True:
                if self._outbox:
                    self._flush(self._socket)
                if self._stopping:
                    with self._lock:
                        if not self._outbox:
                            break
                self._note_connection(self._socket)
                due = self._sooner(self._handler.before_poll(time.monotonic()), self._socket)
                if self._outbox:
                    self._flush(self._socket)  # before_poll may have queued messages
                self._send_held(self._socket)
                timeout = None if due is None else max(0, int((due - time.monotonic()) * 1000) + 1)
                if idle is not None:
                    with self._lock:
                        self._parked = not self._outbox and not self._stopping and idle()
                    if self._parked:
                        self._wait_parked(parked_poller, timeout)
                        continue
                for item, _ in poller.poll(timeout):
                    if item is self._socket or self._zmtp and item == self._socket.fileno():
                        self._receive(self._socket)
                    elif item is self._monitor:
                        self._read_monitor()
                    else:
                        self._drain_wake()
        finally:
            sock, self._socket = self._socket, None
            if self._monitor is not None:
                # Stopped before either socket closes (as zmq_socket_monitor asks): a socket closed while it
                # still monitored left later CURVE sockets of the same context unable to reach the bus.
                sock.disable_monitor()
                self._monitor.close(linger=0)
            sock.close()
            self._wake_reader.close()
            self._wake_writer.close()

    def _wait_parked(self, parked_poller, timeout) -> None:
        """Waits for a wake-up without touching the socket; then, if it is lent, for its return (the
        wake-up byte is left for the borrower, which sends what it announced)."""
        parked_poller.poll(timeout)
        while True:
            with self._lock:
                if self._borrower is None:
                    self._parked = False  # from here on the socket is this thread's again
                    break
                self._returned.clear()
            self._returned.wait()
        self._drain_wake()

    def _flush(self, sock) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    break
                frames = self._outbox.popleft()
            if self._batching and len(frames) == 1:
                self._hold(sock, frames[0])
            else:
                self._send_held(sock)
                self._send_now(sock, frames)
        self._send_held(sock)

    def _hold(self, sock, message: bytes) -> None:
        """Holds a one-frame message for the next batch, and sends a batch as soon as it is full: during a long burst
        of reads (a client submitting as answers come) the peer then works on the first batches while this thread
        makes the next, instead of everything waiting for the burst's end."""
        size = len(message) + 5  # its length prefix in the batch's envelope
        if self._held and self._held_bytes + size > wire.BATCH_ROOM:
            self._send_held(sock)
        self._held.append(message)
        self._held_bytes += size
        if len(self._held) >= wire.BATCH_MESSAGES:
            self._send_held(sock)

    def _send_held(self, sock) -> None:
        """Sends the messages held for a batch, batched (`wire.batches`)."""
        held = self._held
        if not held:
            return
        self._held = []
        self._held_bytes = 0
        if len(held) == 1 and not self._announce:
            self._send_now(sock, held)  # a lone message goes as it is: the common case at one in flight
            return
        for frame in wire.batches(held, self._announce):
            self._send_now(sock, [frame])
        self._announce = False

    @staticmethod
    def _read_zmq(sock) -> list[bytes]:
        frames = [sock.recv(_NOBLOCK)]
        while sock.getsockopt(_RCVMORE):
            frames.append(sock.recv(_NOBLOCK))
        return frames

    @staticmethod
    def _send_zmq(sock, frames: list[bytes]) -> None:
        # Frame by frame with plain-int flags: send_multipart spends more on its flag arithmetic than on sending.
        try:
            for frame in frames[:-1]:
                sock.send(frame, _MORE)
            sock.send(frames[-1], _NOBLOCK)
        except zmq.Again:
            pass  # at the high-water mark, as the bus does (PROTOCOL §1): dropped, never blocking
        except zmq.ZMQError:
            pass  # e.g. a SUB socket cannot send; nothing to do

    def _receive(self, sock) -> None:
        """Handles every message waiting; called when the socket is readable."""
        # Until a recv finds nothing: that failure costs about three ZMQ_EVENTS checks, and messages come
        # in bursts (under load, about 5 per wake-up at a worker and dozens at a busy client).
        while True:
            try:
                frames = self._read_message(sock)
            except zmq.Again:
                self._send_held(sock)  # the burst's answers, at once: before the handler's before_poll
                return
            try:
                if self._batching and len(frames) == 1 and wire.is_batch(frames[0]):
                    for message in wire.split_batch(frames[0]):
                        self._handler.on_message([message])
                        if sock is not self._socket:
                            return
                else:
                    self._handler.on_message(frames)
            except Exception as error:  # one bad message must not end the thread that serves the rest
                print(f"skillbus: {self._thread.name}: a message failed: {error!r}", file=sys.stderr, flush=True)
            if sock is not self._socket:
                return  # the handler reopened it: what the old one holds is for nobody

    def _read_monitor(self) -> None:
        """Every event the monitor holds; the only one it is asked for is a refused key."""
        while True:
            try:
                self._monitor.recv_multipart(_NOBLOCK)
            except zmq.Again:
                return
            self.key_refused = True

    def _drain_wake(self) -> None:
        # One read takes every pending wake-up byte but when more than 4096 are pending; the poll then
        # wakes again at once for the rest, so no second read is needed to find the pipe empty.
        try:
            self._wake_reader.recv(4096)
        except (BlockingIOError, OSError):
            pass
