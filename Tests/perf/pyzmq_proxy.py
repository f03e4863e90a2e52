"""The raw baseline of `make python-bench`: plain pyzmq, no Skillbus.

    python3 pyzmq_proxy.py proxy        a ROUTER (clients) <-> DEALER (workers) proxy, `zmq.proxy`
    python3 pyzmq_proxy.py rep BACKEND  a REP worker doing the echo skill's work

Each binds or connects on 127.0.0.1 with ephemeral ports; the proxy prints
`ready front=ENDPOINT back=ENDPOINT` once bound. `drive(...)` is the load generator: one DEALER
keeping a number of requests in flight. The echo does what a Skillbus `echo` does with the same
request: reads the JSON parameters and answers a text result form as JSON.
"""

from __future__ import annotations

import json
import sys
import time

import zmq

REQUEST_BODY = b'{"text":"hi"}'


def proxy() -> None:
    context = zmq.Context.instance()
    front, back = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    for sock in (front, back):
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.bind("tcp://127.0.0.1:*")
    print(f"ready front={front.getsockopt_string(zmq.LAST_ENDPOINT)} "
          f"back={back.getsockopt_string(zmq.LAST_ENDPOINT)}", flush=True)
    try:
        zmq.proxy(front, back)
    except (KeyboardInterrupt, zmq.ContextTerminated):
        pass


def rep_worker(backend: str) -> None:
    sock = zmq.Context.instance().socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(backend)
    print("ready", flush=True)
    try:
        while True:
            params = json.loads(sock.recv())
            sock.send(json.dumps({"text": params["text"], "type": "text"}, separators=(",", ":")).encode())
    except KeyboardInterrupt:
        pass


def drive(sock, count: int, in_flight: int, timeout_s: float = 30.0) -> float:
    """Sends `count` echo requests through the proxy on a DEALER connected to its front, `in_flight`
    outstanding; returns requests a second."""
    started = time.perf_counter()
    sent = received = 0
    while sent < min(in_flight, count):
        sock.send_multipart([b"", REQUEST_BODY])
        sent += 1
    while received < count:
        if not sock.poll(int(timeout_s * 1000)):
            raise RuntimeError(f"raw proxy: no reply within {timeout_s} s ({received} of {count})")
        frames = sock.recv_multipart()
        if frames[0] != b"" or not frames[1].startswith(b"{"):
            raise RuntimeError(f"raw proxy: unexpected reply {frames!r}")
        received += 1
        if sent < count:
            sock.send_multipart([b"", REQUEST_BODY])
            sent += 1
    return count / (time.perf_counter() - started)


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxy"]:
        proxy()
    elif sys.argv[1:2] == ["rep"] and len(sys.argv) == 3:
        rep_worker(sys.argv[2])
    else:
        sys.exit("usage: pyzmq_proxy.py proxy | rep BACKEND")
