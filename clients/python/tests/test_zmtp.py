"""The package's own ZMTP DEALER (`skillbus.zmtp`) against libzmq's ROUTER (pyzmq) and against peers that break
the protocol: messages both ways, the handshake, reconnecting, PING, the size limit, and when it is used."""

import contextlib
import select
import socket
import threading
import time

import pytest
import zmq

from skillbus import zmtp


def pump(dealer: zmtp.Dealer, wait: float = 0.01) -> list[list[bytes]]:
    """What the socket thread does when woken: wait for the descriptor, then read until nothing is left (the
    handshake happens on the way)."""
    select.select([dealer.fileno()], [], [], wait)
    messages = []
    try:
        while True:
            messages.append(dealer.recv_message())
    except zmq.Again:
        return messages


def received(dealer: zmtp.Dealer, count: int = 1, timeout: float = 5.0) -> list[list[bytes]]:
    messages, deadline = [], time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        messages += pump(dealer, 0.05)
    assert len(messages) == count, f"{len(messages)} of {count} messages within {timeout} s"
    return messages


def router_receive(router, dealer: zmtp.Dealer, send: bytes | None = None, timeout: float = 5.0) -> list[bytes]:
    """The next message at the ROUTER, the dealer served meanwhile (and sending `send` again each time, as a
    worker sends its READY again while it waits)."""
    deadline = time.monotonic() + timeout
    while not router.poll(10):
        assert time.monotonic() < deadline, "the ROUTER got nothing"
        if send is not None:
            dealer.send_message([send])
        pump(dealer)
    return router.recv_multipart()


@contextlib.contextmanager
def connected(endpoint: str, options: dict | None = None):
    """A dealer connecting to `endpoint`, closed at the end."""
    dealer = zmtp.Dealer(options or {})
    dealer.connect(endpoint)
    try:
        yield dealer
    finally:
        dealer.close()


def greeted(router, dealer: zmtp.Dealer) -> bytes:
    """Says hello through the dealer; returns the identity the ROUTER gave its connection."""
    dealer.send_message([b"hello"])
    identity, _ = router_receive(router, dealer)
    return identity


@pytest.fixture
def bound():
    """A libzmq ROUTER on 127.0.0.1 and its endpoint."""
    context = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}"
    sock.close(linger=0)
    context.term()


def test_messages_cross_both_ways_with_libzmq_and_those_sent_before_the_handshake_wait_for_it(bound):
    router, endpoint = bound
    with connected(endpoint) as dealer:
        # Sent at once, before the ROUTER's greeting was read: kept until the handshake ends.
        long_frame = bytes(range(256)) * 300
        dealer.send_message([b"first"])
        dealer.send_message([b"", b"two frames, one empty", long_frame])
        identity, first = router_receive(router, dealer)
        assert first == b"first"
        assert router_receive(router, dealer) == [identity, b"", b"two frames, one empty", long_frame]
        router.send_multipart([identity, b"back", b"x" * 255, b"y" * 256])
        router.send_multipart([identity, b""])
        assert received(dealer, 2) == [[b"back", b"x" * 255, b"y" * 256], [b""]]
        with pytest.raises(zmq.Again):
            dealer.recv_message()


def test_a_burst_read_in_one_piece_comes_out_whole_and_in_order(bound):
    router, endpoint = bound
    with connected(endpoint) as dealer:
        identity = greeted(router, dealer)
        # Fewer than the ROUTER's high-water mark of 1000, past which it drops what it sends.
        sent = [[b"m%d" % number, b"x" * (number % 300)] for number in range(900)]
        for message in sent:
            router.send_multipart([identity, *message])
        assert received(dealer, len(sent)) == sent


def test_a_lost_connection_is_made_again_and_messages_flow_on(bound):
    router, endpoint = bound
    context = zmq.Context.instance()
    with connected(endpoint, {zmq.RECONNECT_IVL: 20}) as dealer:
        dealer.send_message([b"before"])
        identity, body = router_receive(router, dealer)
        assert body == b"before"
        router.close()  # the peer goes: the dealer sees the end of its stream
        assert pump(dealer, 0.3) == []
        again = context.socket(zmq.ROUTER)
        again.setsockopt(zmq.LINGER, 0)
        again.bind(endpoint)
        try:
            assert router_receive(again, dealer, send=b"after")[1] == b"after"
        finally:
            again.close()


def test_a_refused_connect_is_counted_and_tried_again_until_someone_listens():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens on the port now
    with connected(f"tcp://127.0.0.1:{port}", {zmq.RECONNECT_IVL: 20}) as dealer:
        assert dealer.refusals() == 1 and dealer.closed == 0  # the connect in `connect` itself
        deadline = time.monotonic() + 5
        while dealer.refusals() < 2:
            assert time.monotonic() < deadline, "no second connect"
            time.sleep(0.005)
        context = zmq.Context.instance()
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(f"tcp://127.0.0.1:{port}")
        try:
            assert router_receive(router, dealer, send=b"at last")[1] == b"at last"
            refused = dealer.refusals()
            assert dealer.refusals() == refused  # connected: no more refusals
        finally:
            router.close()


def test_libzmq_heartbeats_are_answered_so_the_connection_stays():
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.HEARTBEAT_IVL, 30)  # before the bind: its listener copies the options
    router.setsockopt(zmq.HEARTBEAT_TIMEOUT, 120)
    endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        with connected(endpoint) as dealer:
            identity = greeted(router, dealer)
            quiet_until = time.monotonic() + 0.6  # five heartbeat timeouts: an unanswered PING would end it
            while time.monotonic() < quiet_until:
                assert pump(dealer, 0.02) == []
            dealer.send_message([b"still here"])
            assert router_receive(router, dealer) == [identity, b"still here"]  # the same connection, the same identity
    finally:
        router.close()


def test_a_frame_past_the_size_limit_ends_the_connection_and_it_comes_back(bound):
    router, endpoint = bound
    with connected(endpoint, {zmq.MAXMSGSIZE: 1000, zmq.RECONNECT_IVL: 20}) as dealer:
        identity = greeted(router, dealer)
        router.send_multipart([identity, b"z" * 1001])
        router.send_multipart([identity, b"lost with the connection"])
        with pytest.raises(AssertionError):
            received(dealer, 1, timeout=0.3)
        new_identity, body = router_receive(router, dealer, send=b"again")
        assert body == b"again" and new_identity != identity


class RawPeer:
    """A TCP server that answers a connection with the bytes it is given, then holds it open."""

    def __init__(self, answer: bytes):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        self.answer = answer
        self._held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            self._held.append(connection)
            connection.sendall(self.answer)

    def close(self):
        self.server.close()
        for connection in self._held:
            connection.close()


@pytest.mark.parametrize("answer, what", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(64), "not ZMTP"),
    (b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\x01" + bytes(31), "a CURVE server"),
    (b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32) + b"\x00\x05hello", "a message first"),
    (b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32) + b"\x04\x06\x05ERROR", "ERROR"),
])
def test_a_peer_that_breaks_the_handshake_is_left_and_tried_again_later(answer, what):
    peer = RawPeer(answer)
    try:
        with connected(peer.endpoint, {zmq.RECONNECT_IVL: 30}) as dealer:
            dealer.send_message([b"kept until a handshake ends"])
            with pytest.raises(AssertionError):
                received(dealer, 1, timeout=0.3)
            assert dealer._sock is None or not dealer._ready, what
            deadline = time.monotonic() + 5
            while peer.connections < 2 and time.monotonic() < deadline:
                pump(dealer)
            assert peer.connections >= 2, f"{what}: no second attempt"
    finally:
        peer.close()


def test_the_own_engine_serves_a_dealer_to_one_tcp_endpoint_without_keys(monkeypatch):
    monkeypatch.delenv("SKILLBUS_PY_ENGINE", raising=False)
    assert zmtp.wanted(zmq.DEALER, "tcp://127.0.0.1:5555", {zmq.LINGER: 0})
    assert zmtp.wanted(zmq.DEALER, "tcp://[::1]:5555", {})
    assert not zmtp.wanted(zmq.DEALER, "tcp://127.0.0.1:5555", {zmq.CURVE_SERVERKEY: b"k" * 32})
    assert not zmtp.wanted(zmq.DEALER, "ipc:///tmp/bus", {})
    assert not zmtp.wanted(zmq.SUB, "tcp://127.0.0.1:5555", {})
    assert not zmtp.wanted(zmq.SUB, ["tcp://127.0.0.1:5555"], {})
    monkeypatch.setenv("SKILLBUS_PY_ENGINE", "libzmq")
    assert not zmtp.wanted(zmq.DEALER, "tcp://127.0.0.1:5555", {})
    with pytest.raises(ValueError, match="not tcp://HOST:PORT"):
        zmtp.Dealer({}).connect("tcp://nohost")


def test_ipv6_loopback_is_reached_when_the_machine_has_it():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.IPV6, 1)
    router.setsockopt(zmq.LINGER, 0)
    try:
        port = router.bind_to_random_port("tcp://[::1]")
    except zmq.ZMQError:
        router.close()
        pytest.skip("no IPv6 loopback")
    try:
        with connected(f"tcp://[::1]:{port}") as dealer:
            dealer.send_message([b"over IPv6"])
            assert router_receive(router, dealer)[1] == b"over IPv6"
    finally:
        router.close()
