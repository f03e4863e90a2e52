"""A Majordomo (ZeroMQ RFC 7, MDP/0.1) broker and worker in Python: the fan-out baseline of `make python-bench`.

    python3 mdp.py broker                    binds a ROUTER on 127.0.0.1 (ephemeral port), prints `ready bus=ENDPOINT`
    python3 mdp.py worker ENDPOINT SERVICE   serves SERVICE with the echo skill's work

Clients and workers share the broker's one ROUTER and are told apart by their first frame after the
empty delimiter: `MDPC01` (client) or `MDPW01` (worker). Client request: "", MDPC01, service, body;
the broker's reply to it: "", MDPC01, service, body. Worker commands: READY (0x01, service), REQUEST
(0x02, client address, "", body), REPLY (0x03, client address, "", body), HEARTBEAT (0x04) and
DISCONNECT (0x05). The broker gives each request to the worker of its service that has been waiting
longest and queues it while none waits. Both sides heartbeat every 2.5 s and drop a peer silent for
three intervals; a worker that loses the broker connects again.

`scatter(sock, service, body, count)` is the client: it sends one request per worker and collects as
many replies, the Majordomo way to run one thing on several workers.
"""

from __future__ import annotations

import collections
import json
import sys
import time

import zmq

CLIENT, WORKER = b"MDPC01", b"MDPW01"
READY, REQUEST, REPLY, HEARTBEAT, DISCONNECT = b"\x01", b"\x02", b"\x03", b"\x04", b"\x05"
HEARTBEAT_S, LIVENESS = 2.5, 3


class Service:
    def __init__(self, name: bytes):
        self.name = name
        self.requests: collections.deque = collections.deque()  # (client address, body frames)
        self.waiting: collections.OrderedDict = collections.OrderedDict()  # worker address -> expiry, oldest first


class Broker:
    def __init__(self, endpoint: str = "tcp://127.0.0.1:*"):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.services: dict[bytes, Service] = {}
        self.workers: dict[bytes, Service] = {}  # every known worker -> the service it serves
        self.expiry: dict[bytes, float] = {}

    def run(self) -> None:
        next_heartbeat = time.monotonic() + HEARTBEAT_S
        while True:
            timeout = max(0.0, next_heartbeat - time.monotonic())
            if self.sock.poll(int(timeout * 1000) + 1):
                while True:
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.on_message(frames)
            now = time.monotonic()
            if now >= next_heartbeat:
                self.purge(now)
                for address, service in self.workers.items():
                    if address in service.waiting:
                        self.sock.send_multipart([address, b"", WORKER, HEARTBEAT])
                next_heartbeat = now + HEARTBEAT_S

    def on_message(self, frames: list[bytes]) -> None:
        if len(frames) < 3 or frames[1] != b"":
            return  # not MDP: dropped
        sender, header = frames[0], frames[2]
        if header == CLIENT and len(frames) >= 5:
            service = self.service(frames[3])
            service.requests.append((sender, frames[4:]))
            self.dispatch(service)
        elif header == WORKER and len(frames) >= 4:
            self.on_worker(sender, frames[3], frames[4:])

    def on_worker(self, sender: bytes, command: bytes, rest: list[bytes]) -> None:
        known = sender in self.workers
        self.expiry[sender] = time.monotonic() + HEARTBEAT_S * LIVENESS
        if command == READY and not known and len(rest) == 1:
            service = self.service(rest[0])
            self.workers[sender] = service
            self.waiting(sender, service)
        elif command == REPLY and known and len(rest) >= 3 and rest[1] == b"":
            service = self.workers[sender]
            self.sock.send_multipart([rest[0], b"", CLIENT, service.name, *rest[2:]])
            self.waiting(sender, service)
        elif command == HEARTBEAT and known:
            pass  # the expiry above is all it does
        elif command == DISCONNECT:
            self.forget(sender)
        else:  # a READY from a known worker, anything from an unknown one, or a malformed command
            if known:
                self.forget(sender)
            self.sock.send_multipart([sender, b"", WORKER, DISCONNECT])

    def service(self, name: bytes) -> Service:
        service = self.services.get(name)
        if service is None:
            service = self.services[name] = Service(name)
        return service

    def waiting(self, address: bytes, service: Service) -> None:
        service.waiting[address] = None
        self.dispatch(service)

    def dispatch(self, service: Service) -> None:
        while service.waiting and service.requests:
            address, _ = service.waiting.popitem(last=False)
            client, body = service.requests.popleft()
            self.sock.send_multipart([address, b"", WORKER, REQUEST, client, b"", *body])

    def forget(self, address: bytes) -> None:
        service = self.workers.pop(address, None)
        self.expiry.pop(address, None)
        if service is not None:
            service.waiting.pop(address, None)

    def purge(self, now: float) -> None:
        for address in [a for a, expiry in self.expiry.items() if expiry < now]:
            self.forget(address)


def worker(endpoint: str, service: bytes) -> None:
    """Serves `service` until interrupted: REQUEST in, REPLY out, heartbeats both ways."""
    context = zmq.Context.instance()
    while True:  # one pass per connection to the broker
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sock.send_multipart([b"", WORKER, READY, service])
        print("ready", flush=True)
        liveness, next_heartbeat = LIVENESS, time.monotonic() + HEARTBEAT_S
        while liveness > 0:
            if sock.poll(int(HEARTBEAT_S * 1000)):
                frames = sock.recv_multipart()
                liveness = LIVENESS
                if len(frames) >= 3 and frames[0] == b"" and frames[1] == WORKER:
                    command = frames[2]
                    if command == REQUEST and len(frames) >= 6 and frames[4] == b"":
                        params = json.loads(frames[5])
                        reply = json.dumps({"text": params["text"], "type": "text"}, separators=(",", ":"))
                        sock.send_multipart([b"", WORKER, REPLY, frames[3], b"", reply.encode()])
                    elif command == DISCONNECT:
                        break
            else:
                liveness -= 1
            if time.monotonic() >= next_heartbeat:
                sock.send_multipart([b"", WORKER, HEARTBEAT])
                next_heartbeat = time.monotonic() + HEARTBEAT_S
        sock.close()
        time.sleep(HEARTBEAT_S)  # the broker is gone or disowned us: connect again after a pause


def scatter(sock, service: bytes, body: bytes, count: int, timeout_s: float = 10.0) -> list[bytes]:
    """Sends `count` requests for `service` on a DEALER and returns the `count` reply bodies."""
    for _ in range(count):
        sock.send_multipart([b"", CLIENT, service, body])
    replies = []
    while len(replies) < count:
        if not sock.poll(int(timeout_s * 1000)):
            raise RuntimeError(f"mdp: {len(replies)} of {count} replies within {timeout_s} s")
        frames = sock.recv_multipart()
        if len(frames) != 4 or frames[:3] != [b"", CLIENT, service]:
            raise RuntimeError(f"mdp: unexpected reply {frames!r}")
        replies.append(frames[3])
    return replies


def scatter_load(sock, service: bytes, count: int, in_flight: int, workers: int, timeout_s: float = 30.0) -> float:
    """Scatters a second: `count` scatters of `workers` requests each, `in_flight` scatters outstanding on
    one DEALER. Each request's body names its scatter (`{"text":"<number>"}`), which the echo sends back,
    so replies are counted per scatter."""
    waiting: dict[bytes, int] = {}  # a scatter's reply text -> replies still to come
    started, sent, done = time.perf_counter(), 0, 0

    def send_scatter(number: int) -> None:
        body = b'{"text":"%d"}' % number
        waiting[b'{"text":"%d","type":"text"}' % number] = workers
        for _ in range(workers):
            sock.send_multipart([b"", CLIENT, service, body])

    while sent < min(in_flight, count):
        send_scatter(sent)
        sent += 1
    while done < count:
        if not sock.poll(int(timeout_s * 1000)):
            raise RuntimeError(f"mdp: {done} of {count} scatters complete within {timeout_s} s")
        frames = sock.recv_multipart()
        if len(frames) != 4 or frames[:3] != [b"", CLIENT, service] or frames[3] not in waiting:
            raise RuntimeError(f"mdp: unexpected reply {frames!r}")
        waiting[frames[3]] -= 1
        if waiting[frames[3]] == 0:
            del waiting[frames[3]]
            done += 1
            if sent < count:
                send_scatter(sent)
                sent += 1
    return count / (time.perf_counter() - started)


if __name__ == "__main__":
    try:
        if sys.argv[1:2] == ["broker"]:
            broker = Broker()
            print(f"ready bus={broker.endpoint}", flush=True)
            broker.run()
        elif sys.argv[1:2] == ["worker"] and len(sys.argv) == 4:
            worker(sys.argv[2], sys.argv[3].encode())
        else:
            sys.exit("usage: mdp.py broker | worker ENDPOINT SERVICE")
    except KeyboardInterrupt:
        pass
