"""Wire v2 framing, no bus: the envelope byte for byte, long fields, and what a receiver refuses."""

import json
import threading

import pytest
import zmq

from skillbus import Client, SkillbusError, wire
from skillbus.wire import BUS_TO_CLIENT, BUS_TO_WORKER, CLIENT_TO_BUS, WORKER_TO_BUS, WireError


def test_the_example_request_is_packed_byte_for_byte():
    frames = CLIENT_TO_BUS.pack(b"REQUEST", b"r1", b"", b"", b"echo", b"", b'{"text":"hi"}')
    assert frames == [b"SKB2C" + b"\x07REQUEST" + b"\x02r1" + b"\x00" + b"\x00" + b"\x04echo" + b"\x00",
                      b'{"text":"hi"}']
    assert CLIENT_TO_BUS.unpack(frames) == [b"SKB2C", b"REQUEST", b"r1", b"", b"", b"echo", b"", b'{"text":"hi"}']


@pytest.mark.parametrize("size, prefix", [
    (254, b"\xfe"), (255, b"\xff\x00\x00\x00\xff"), (300, b"\xff\x00\x00\x01\x2c"),
])
def test_a_field_of_254_bytes_has_one_length_byte_and_longer_ones_five(size, prefix):
    long_id = b"i" * size
    frames = WORKER_TO_BUS.pack(b"RESULT", long_id, b"ok", b'{"text":"","type":"text"}')
    assert frames[0] == b"SKB2W" + b"\x06RESULT" + prefix + long_id + b"\x02ok"
    assert frames[1:] == [b'{"text":"","type":"text"}']
    assert WORKER_TO_BUS.unpack(frames)[2] == long_id


def test_commands_with_no_opaque_field_travel_in_the_envelope_alone():
    assert CLIENT_TO_BUS.pack(b"CANCEL", b"r1", b"round-7") == [b"SKB2C\x06CANCEL\x02r1\x07round-7"]
    assert WORKER_TO_BUS.pack(b"DISCONNECT") == [b"SKB2W\x0aDISCONNECT"]
    assert BUS_TO_WORKER.unpack([b"SKB2W\x06CANCEL\x02i7"]) == [b"SKB2W", b"CANCEL", b"i7"]


def test_fewer_fields_than_the_first_frame_mean_no_frame_after_the_envelope():
    assert WORKER_TO_BUS.pack(b"HEARTBEAT", b"200") == [b"SKB2W\x09HEARTBEAT\x03200"]
    position = b'{"digest":"cbf29ce484222325","epoch":"e1","seq":0}'
    assert WORKER_TO_BUS.pack(b"HEARTBEAT", b"200", position) == [b"SKB2W\x09HEARTBEAT\x03200", position]
    assert WORKER_TO_BUS.unpack([b"SKB2W\x09HEARTBEAT"]) == [b"SKB2W", b"HEARTBEAT"]


def test_every_opaque_field_is_a_frame_of_its_own():
    frames = CLIENT_TO_BUS.pack(b"ASK", b"a1", b"round", b"", b"", b"5000", b"what is 6*7", b"progress")
    assert frames[1:] == [b"what is 6*7", b"progress"]
    frames = WORKER_TO_BUS.pack(b"CALLED", b"t1", b"c1", b"echo", b"{}", b"ok", b'{"text":"","type":"text"}')
    assert frames[0] == b"SKB2W\x06CALLED\x02t1\x02c1\x04echo" and len(frames) == 4


@pytest.mark.parametrize("envelope, says", [
    (b"SKB2C\x05REPLY\x02r1\x05", "a truncated envelope: field 3 announces 5 bytes, 0 follow"),
    (b"SKB2C\x05REP", "a truncated envelope: field 1 announces 5 bytes, 3 follow"),
    (b"SKB2C\x05REPLY\xff\x00\x01", "a truncated envelope: field 2 has 2 of the 4 bytes of its length"),
    (b"SKB2C", "an envelope without a command"),
])
def test_a_truncated_envelope_is_refused_naming_the_field(envelope, says):
    with pytest.raises(WireError) as refused:
        BUS_TO_CLIENT.unpack([envelope, b"{}"])
    assert (refused.value.code, refused.value.message) == ("malformed_message", says)


@pytest.mark.parametrize("direction, frames, says", [
    (CLIENT_TO_BUS, [b"SKB2C\x07REQUEST\x02r1\x00\x00\x04echo\x00\x02{}", b"x"],
     "REQUEST carries fields 0-6 in its envelope and the rest as frames; "
     "got 8 field(s) in the envelope and 1 frame(s) after it"),
    (CLIENT_TO_BUS, [b"SKB2C\x07REQUEST\x02r1\x00\x00\x04echo", b"", b"{}"],
     "REQUEST carries fields 0-6 in its envelope and the rest as frames; got 6 field(s) in the envelope and 2 frame(s) after it"),
    (BUS_TO_WORKER, [b"SKB2W\x06CANCEL", b"i7"], "CANCEL travels in its envelope alone, got 1 frame(s) after it"),
])
def test_a_split_other_than_the_table_s_is_refused(direction, frames, says):
    with pytest.raises(WireError) as refused:
        direction.unpack(frames)
    assert (refused.value.code, refused.value.message) == ("malformed_message", says)
    assert refused.value.fields[:2] == [direction.header, frames[0][6:6 + frames[0][5]]]


def test_a_message_folded_into_one_frame_unpacks_as_its_frames_do():
    # §2.1: every field in the envelope, the opaque ones too (a long one with the 0xFF form).
    document = b"{" + b" " * 300 + b"}"
    for direction, fields in ((CLIENT_TO_BUS, [b"REQUEST", b"r1", b"", b"", b"echo", b"", b"{}"]),
                              (BUS_TO_CLIENT, [b"ROUND", b"r1", b"round", document]),
                              (BUS_TO_CLIENT, [b"ERROR", b"r1", b"{}"])):
        folded = wire.envelope(direction.header, fields)
        assert direction.unpack([folded]) == direction.unpack(direction.pack(*fields)) == [direction.header, *fields]


def test_a_v1_message_is_recognised_and_kept_as_its_fields():
    v1 = [b"SKB1C", b"ERROR", b"", b'{"code":"unsupported_protocol","message":"no"}']
    with pytest.raises(WireError) as refused:
        BUS_TO_CLIENT.unpack(v1)
    assert refused.value.code == "unsupported_protocol"
    assert refused.value.message == "a v1 message (header SKB1C); this peer speaks SKB2C"
    assert refused.value.fields == v1
    with pytest.raises(WireError, match=r"a v1 message \(header SKB1W\); this peer speaks SKB2W"):
        BUS_TO_WORKER.unpack([b"SKB1W", b"WELCOME", b"{}"])
    with pytest.raises(WireError, match=r"a message with header b'SKB2W' \(this peer speaks SKB2C\)"):
        BUS_TO_CLIENT.unpack([b"SKB2W\x05ERROR", b"{}"])


def test_an_unknown_command_is_passed_on_whole_for_the_receiver_to_skip():
    assert BUS_TO_CLIENT.unpack([b"SKB2C\x05NEWER\x02r1", b"x"]) == [b"SKB2C", b"NEWER", b"r1", b"x"]
    with pytest.raises(ValueError, match="no client -> bus command"):
        CLIENT_TO_BUS.pack(b"REPLY", b"r1")


def test_every_command_round_trips_with_all_its_fields():
    for direction in (CLIENT_TO_BUS, BUS_TO_CLIENT, WORKER_TO_BUS, BUS_TO_WORKER):
        for command, first in direction.first_frame.items():
            fields = [command] + [f"f{n}".encode() * n for n in range(2, 9)]
            frames = direction.pack(*fields)
            assert len(frames) == (1 if first is None else 1 + 9 - first)
            assert direction.unpack(frames) == [direction.header, *fields]


class StandInBus:
    """A ROUTER that answers whatever a client sends with the given frames."""

    def __init__(self):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def answer(self, make):
        assert self.sock.poll(5000), "the client sent nothing"
        peer, *frames = self.sock.recv_multipart()
        if len(frames) == 1 and wire.is_batch(frames[0]):  # a client's first message is a batch of one (§2.2)
            (message,) = wire.split_batch(frames[0])
            frames = [message]
        fields = CLIENT_TO_BUS.unpack(frames)
        self.sock.send_multipart([peer, *make(fields)])
        return fields

    def close(self):
        self.sock.close()


def test_a_client_gives_up_at_once_when_a_v1_bus_refuses_v2():
    bus = StandInBus()
    refusal = {"code": "unsupported_protocol",
               "message": "protocol 'SKB2C...' is not supported; this bus speaks SKB1C (clients) and SKB1W (workers)"}
    try:
        with Client(bus.endpoint, timeout=30) as client:
            call = client.start_request("echo", {"text": "hi"})
            bus.answer(lambda _: [b"SKB1C", b"ERROR", b"", json.dumps(refusal).encode()])
            with pytest.raises(SkillbusError) as refused:
                call.result(timeout=5)
            assert refused.value.code == "unsupported_protocol"
            assert refused.value.message == f"the bus speaks v1 (SKB1C), not SKB2C: {refusal['message']}"
    finally:
        bus.close()


def test_a_client_fails_the_call_whose_answer_has_the_wrong_split():
    bus = StandInBus()
    try:
        with Client(bus.endpoint, timeout=30) as client:
            call = client.start_request("echo", {"text": "hi"})
            # The payload inside the envelope and a frame after it as well: neither split of §2.1.
            bus.answer(lambda f: [wire.envelope(wire.CLIENT, [b"REPLY", f[2], b"", b"ok", b"a", b"1", b"{}"]), b"x"])
            with pytest.raises(SkillbusError) as refused:
                call.result(timeout=5)
            assert refused.value.code == "malformed_message"
            assert refused.value.message.startswith("REPLY carries fields 0-6 in its envelope and the rest as frames")
    finally:
        bus.close()


def test_the_bus_answers_a_peer_that_folds_in_one_frame_and_others_in_the_table_s_split(cluster):
    """§2.1: the bus reads both forms, and answers folded once a peer has folded a message of its own."""
    cluster.swift_worker("swifty", "--skills", "echo")

    def request(sock, request_id, folded):
        fields = [b"REQUEST", request_id, b"", b"", b"echo", b"", b'{"text":"hi"}']
        sock.send_multipart([wire.envelope(wire.CLIENT, fields)] if folded else CLIENT_TO_BUS.pack(*fields))
        assert sock.poll(10_000), "no answer from the bus"
        frames = sock.recv_multipart()
        reply = BUS_TO_CLIENT.unpack(frames)
        assert reply[1:3] == [b"REPLY", request_id] and json.loads(reply[7]) == {"text": "hi", "type": "text"}
        return len(frames)

    folding, splitting = (zmq.Context.instance().socket(zmq.DEALER) for _ in range(2))
    try:
        for sock in (folding, splitting):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(cluster.bus)
        assert request(splitting, b"s1", folded=False) == 2
        assert request(folding, b"f1", folded=True) == 1
        # Per connection, once it folded: its answers stay in one frame.
        assert request(folding, b"f2", folded=False) == 1
        assert request(splitting, b"s2", folded=False) == 2
    finally:
        folding.close()
        splitting.close()


def test_a_batch_holds_folded_messages_byte_for_byte_as_the_bus_writes_one():
    request = wire.CLIENT_TO_BUS.pack(b"REQUEST", b"r1", b"", b"", b"echo", b"", b'{"text":"hi"}', folded=True)[0]
    skills = wire.CLIENT_TO_BUS.pack(b"SKILLS", b"s1", folded=True)[0]
    (frame,) = wire.batches([request, skills])
    assert frame == b"SKB2C\x05BATCH" + bytes([len(request)]) + request + bytes([len(skills)]) + skills
    assert len(frame) == 66  # PROTOCOL §2.2's example
    assert wire.is_batch(frame) and not wire.is_batch(request)
    assert wire.split_batch(frame) == [request, skills]
    assert wire.CLIENT_TO_BUS.unpack([wire.split_batch(frame)[0]])[1:3] == [b"REQUEST", b"r1"]


def test_batches_keep_the_order_and_stay_within_30_messages_and_4096_bytes():
    cancels = [wire.CLIENT_TO_BUS.pack(b"CANCEL", b"r%d" % n)[0] for n in range(35)]
    assert wire.batches(cancels[:1]) == cancels[:1]  # alone as it is
    assert wire.batches(cancels[:1], announce=True) == [b"SKB2C\x05BATCH" + bytes([len(cancels[0])]) + cancels[0]]
    frames = wire.batches(cancels)
    assert [len(wire.split_batch(frame)) for frame in frames] == [30, 5]
    large = b"SKB2C\x04PING" + b"x" * 5000  # too large for a batch: alone, between batches
    mixed = wire.batches([cancels[0], cancels[1], large, cancels[2], cancels[3]])
    assert [wire.is_batch(frame) for frame in mixed] == [True, False, True]
    assert mixed[1] == large and wire.split_batch(mixed[2]) == cancels[2:4]
    assert all(len(frame) <= wire.BATCH_BYTES for frame in mixed if wire.is_batch(frame))


def test_a_batch_that_holds_nothing_or_is_cut_short_is_refused():
    with pytest.raises(wire.WireError, match="BATCH holds no message"):
        wire.split_batch(b"SKB2C\x05BATCH")
    with pytest.raises(wire.WireError, match="field 2 announces 40 bytes, 2 follow"):
        wire.split_batch(b"SKB2C\x05BATCH\x28ab")


def test_a_full_batch_leaves_at_once_while_the_rest_waits_for_the_burst_to_end():
    """A thread that holds messages for a batch sends one as soon as it is full (30 messages): the peer works on
    it while the thread is still busy with its burst; what does not fill a batch goes when the burst ends."""
    from skillbus.socketthread import SocketThread

    peer = zmq.Context.instance().socket(zmq.ROUTER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.bind("tcp://127.0.0.1:*")
    release, thread = threading.Event(), None

    class Handler:
        def on_message(self, frames):  # one message in: 31 out, then busy until released
            for number in range(31):
                thread.send(CLIENT_TO_BUS.pack(b"CANCEL", str(number).encode(), folded=True))
            release.wait(10)

        def before_poll(self, now):
            return None

    thread = SocketThread(zmq.Context.instance(), zmq.DEALER, peer.getsockopt_string(zmq.LAST_ENDPOINT), Handler(),
                          name="test-batching", batching=True)
    try:
        thread.send([b"hello"])
        assert peer.poll(5000)
        identity, _ = peer.recv_multipart()
        peer.send_multipart([identity, b"go"])
        assert peer.poll(5000), "a full batch waited for the burst to end"
        _, first = peer.recv_multipart()
        assert wire.is_batch(first) and len(wire.split_batch(first)) == 30
        release.set()  # the 31st was held: it comes alone, once the handler's burst is over
        assert peer.poll(5000)
        _, last = peer.recv_multipart()
        assert CLIENT_TO_BUS.unpack([last])[2] == b"30"
    finally:
        release.set()
        thread.stop()
        peer.close()
