"""CURVE keys (PROTOCOL §12.1): the options every socket to a coordinator with keys sets before it connects.

A key is given as its 40 Z85 characters or as the path of a file holding them (`skillbus keygen NAME` writes
`NAME.pub` and `NAME.key`); `server_key` is the coordinator's public key, `key` this peer's secret key (its
public key is derived from it). Without either argument, SKILLBUS_SERVER_KEY and SKILLBUS_KEY are read, as the
`skillbus` command line reads them.
"""

from __future__ import annotations

import os

import zmq

_Z85 = set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


def read_key(value, what: str) -> bytes:
    """A Z85 key given as itself (40 characters, no file of that name) or as the path of a file holding it."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if len(value) == 40 and set(value) <= _Z85 and not os.path.exists(value):
        text = value
    else:
        try:
            with open(value, "rb") as handle:
                text = handle.read().decode("utf-8", errors="replace").strip()
        except OSError as error:
            raise ValueError(f"{what}: cannot read {value!r}: {error.strerror}") from error
        if len(text) != 40 or not set(text) <= _Z85:
            raise ValueError(f"{what}: {value} holds no CURVE key (one line of 40 Z85 characters)")
    return text.encode()


def curve_options(server_key=None, key=None) -> dict:
    """The socket options of a CURVE client of the coordinator, or {} without keys. `server_key` and `key` go
    together; when both are None, SKILLBUS_SERVER_KEY and SKILLBUS_KEY are read instead."""
    if server_key is None and key is None:
        server_key, key = os.environ.get("SKILLBUS_SERVER_KEY") or None, os.environ.get("SKILLBUS_KEY") or None
    if server_key is None and key is None:
        return {}
    if server_key is None or key is None:
        raise ValueError("keys: server_key (the coordinator's public key) and key (this peer's secret key) "
                         "go together; one was given without the other")
    secret = read_key(key, "key")
    try:
        public = zmq.curve_public(secret)
    except zmq.ZMQError as error:
        raise ValueError(f"key: not a CURVE secret key: {error}") from error
    return {zmq.CURVE_SERVERKEY: read_key(server_key, "server_key"), zmq.CURVE_SECRETKEY: secret,
            zmq.CURVE_PUBLICKEY: public}
