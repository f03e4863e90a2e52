"""The package against a coordinator with keys (PROTOCOL §12): its client, worker and replica speak CURVE."""

from __future__ import annotations

import json
import os
import re

import pytest
import zmq

from conftest import BINARY, Process, wait_until
from skillbus import Client, Param, SkillbusError, Worker


def key_pair(directory, name: str) -> tuple[str, str]:
    """NAME.pub and NAME.key in `directory`, as `skillbus keygen NAME` writes them; returns their paths."""
    public, secret = zmq.curve_keypair()
    paths = (str(directory / f"{name}.pub"), str(directory / f"{name}.key"))
    for path, text in zip(paths, (public, secret)):
        with open(path, "wb") as handle:
            handle.write(text + b"\n")
        os.chmod(path, 0o600)
    return paths


@pytest.fixture
def keyed(tmp_path):
    """A coordinator with keys: a client key, a worker key for the agent `py-keyed`, and the coordinator's own."""
    server_pub, server_key = key_pair(tmp_path, "coordinator")
    client_pub, client_key = key_pair(tmp_path, "client")
    worker_pub, worker_key = key_pair(tmp_path, "worker")
    config = tmp_path / "coordinator.json"
    config.write_text(json.dumps({"version": 1, "bus": "tcp://127.0.0.1:*", "feed": "tcp://127.0.0.1:*",
                                  "heartbeatMs": 200, "security": {"secretKey": server_key, "keys": [
                                      {"name": "alice", "role": "client", "publicKey": client_pub},
                                      {"name": "w", "role": "worker", "agents": ["py-keyed"], "publicKey": worker_pub},
                                  ]}}))
    coordinator = Process([BINARY, "coordinator", "--config", str(config)], name="keyed coordinator",
                          env={"XDG_STATE_HOME": str(tmp_path)})
    try:
        ready = coordinator.wait_for_line(lambda l: l.startswith("skillbus coordinator ready:"), "the ready line")
        yield {"bus": re.search(r"bus=(\S+)", ready).group(1), "server": server_pub, "client": client_key,
               "worker": worker_key, "coordinator": coordinator}
    finally:
        coordinator.stop()


def test_a_keyed_worker_and_client_work_together_and_a_client_without_keys_gets_nothing(keyed):
    worker = Worker("py-keyed", coordinator=keyed["bus"], heartbeat_ms=200, server_key=keyed["server"],
                    key=keyed["worker"])

    @worker.skill("py.echo", params=[Param("text", "string")])
    def echo(text):
        return text

    with worker:
        worker.wait_registered()
        # Its replica follows the registry over the CURVE feed.
        assert worker.replica.wait_for(lambda replica: "py-keyed" in replica.entries())
        with Client(keyed["bus"], timeout=10, server_key=keyed["server"], key=keyed["client"]) as client:
            assert client.request("py.echo", {"text": "over curve"}).value == "over curve"
            assert client.invoke("py.echo", {"text": "in a round"}).result["text"] == "in a round"
            assert [skill["identifier"] for skill in client.skills()] == ["py.echo"]
        # A client without keys never completes the handshake: nothing comes back.
        with Client(keyed["bus"], timeout=1) as stranger:
            with pytest.raises(SkillbusError) as refused:
                stranger.request("py.echo", {"text": "no keys"})
            assert refused.value.code == "unreachable"


def test_a_refused_key_is_named_by_the_client_and_logged_by_the_worker(keyed, tmp_path, capsys):
    _, unknown = key_pair(tmp_path, "stranger")
    with Client(keyed["bus"], timeout=1, server_key=keyed["server"], key=unknown) as client:
        with pytest.raises(SkillbusError) as refused:
            client.request("py.echo", {"text": "who am I"})
    assert refused.value.code == "unreachable"
    assert refused.value.message.endswith(": the coordinator refused this client's key")
    worker = Worker("py-keyed", coordinator=keyed["bus"], heartbeat_ms=200, server_key=keyed["server"],
                    key=unknown, replica=False)
    with worker:
        logged = []
        wait_until(lambda: logged.append(capsys.readouterr().err) or "refused this worker's key" in "".join(logged),
                   "the worker's log of its refused key")
    # Stopped as soon as it started, it leaves the process's other keyed sockets working (their monitors too).
    brief = Worker("py-brief", coordinator=keyed["bus"], server_key=keyed["server"], key=unknown, replica=False)
    brief.start().stop()
    with Client(keyed["bus"], timeout=10, server_key=keyed["server"], key=keyed["client"]) as client:
        assert client.skills() == []


def test_keys_come_in_pairs_and_from_readable_files(keyed, tmp_path):
    with pytest.raises(ValueError, match="go together"):
        Client(keyed["bus"], key=keyed["client"])
    with pytest.raises(ValueError, match="cannot read"):
        Client(keyed["bus"], server_key=str(tmp_path / "missing.pub"), key=keyed["client"])
    (tmp_path / "bad.key").write_text("not a key\n")
    with pytest.raises(ValueError, match="holds no CURVE key"):
        Worker("py-bad", coordinator=keyed["bus"], server_key=keyed["server"], key=str(tmp_path / "bad.key"))
    # The keys themselves (40 Z85 characters) serve as well as their files.
    server = open(keyed["server"]).read().strip()
    secret = open(keyed["client"]).read().strip()
    with Client(keyed["bus"], timeout=10, server_key=server, key=secret) as client:
        assert client.skills() == []
