#!/usr/bin/env python3
"""A stand-in for a standby coordinator of a group (PROTOCOL §3.11), for the tests of clients and workers that
follow the leader: a ROUTER that answers every client message that expects an answer with
`SKB2C ERROR <request id> <not_leader>` and every READY or SKILLS of a worker with `SKB2W ERROR <not_leader>`,
naming the leader given (`--leader-bus`, `--leader-feed`) or none (`--no-leader`). Other messages (CANCEL,
APPROVE, HEARTBEAT, STATE, RESULT, DISCONNECT, …) are dropped, as a standby drops them.

Prints `fake standby ready: bus=ENDPOINT` once bound, then one line per refusal:
`refused SKB2C ROUND 1x9-8` / `refused SKB2W READY`.
"""

from __future__ import annotations

import argparse
import json
import sys

import zmq

ANSWERED_WORKER = {b"READY", b"SKILLS"}
SILENT_CLIENT = {b"CANCEL", b"APPROVE"}


def envelope_fields(frame: bytes, count: int) -> list[bytes]:
    """The first `count` fields of an envelope (§2.1), the header first; fewer when it holds fewer."""
    fields, i = [frame[:5]], 5
    while i < len(frame) and len(fields) < count:
        n, i = frame[i], i + 1
        if n == 0xFF:
            n, i = int.from_bytes(frame[i:i + 4], "big"), i + 4
        fields.append(frame[i:i + n])
        i += n
    return fields


def pack(fields: list[bytes], split: int) -> list[bytes]:
    envelope = bytearray(fields[0])
    for field in fields[1:split]:
        envelope += bytes([len(field)]) if len(field) < 255 else b"\xff" + len(field).to_bytes(4, "big")
        envelope += field
    return [bytes(envelope)] + list(fields[split:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bus", default="tcp://127.0.0.1:*")
    parser.add_argument("--leader-bus", default=None)
    parser.add_argument("--leader-feed", default="")
    parser.add_argument("--no-leader", action="store_true")
    parser.add_argument("--group", default="g1")
    args = parser.parse_args()
    if args.no_leader or not args.leader_bus:
        leader = None
        words = "coordinator 'fake' is a standby of group '%s'; no leader is known yet" % args.group
    else:
        leader = {"name": "real", "bus": args.leader_bus, "feed": args.leader_feed, "epoch": 1,
                  "since": "2026-12-05T21:00:00.000Z"}
        words = "coordinator 'fake' is a standby of group '%s'; the leader is 'real' at %s (epoch 1)" % (
            args.group, args.leader_bus)
    error = json.dumps({"code": "not_leader", "message": words,
                        "details": {"group": args.group, "epoch": leader and 1, "leader": leader}},
                       separators=(",", ":")).encode()

    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(args.bus)
    print("fake standby ready: bus=%s" % router.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)

    while True:
        frames = router.recv_multipart()
        identity, message = frames[0], frames[1:]
        if not message:
            continue
        if len(message) == 1 and envelope_fields(message[0], 2)[1:] == [b"BATCH"]:
            # A batch (§2.2): each message refused as if it had come alone.
            for inner in envelope_fields(message[0], 32)[2:]:
                refuse(router, identity, [inner], error)
        else:
            refuse(router, identity, message, error)


def refuse(router, identity: bytes, message: list[bytes], error: bytes) -> None:
    """Answers one message as a standby does: `not_leader` to a client's, and to a worker's READY or SKILLS."""
    if len(message[0]) < 6:
        return
    fields = envelope_fields(message[0], 3)
    header, command = fields[0], fields[1] if len(fields) > 1 else b""
    if header == b"SKB2C":
        if command in SILENT_CLIENT:
            return
        request_id = fields[2] if len(fields) > 2 else b""
        router.send_multipart([identity] + pack([b"SKB2C", b"ERROR", request_id, error], 3))
        print("refused SKB2C %s %s" % (command.decode(errors="replace"), request_id.decode(errors="replace")),
              flush=True)
    elif header == b"SKB2W" and command in ANSWERED_WORKER:
        router.send_multipart([identity] + pack([b"SKB2W", b"ERROR", error], 2))
        print("refused SKB2W %s" % command.decode(errors="replace"), flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
