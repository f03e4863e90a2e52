"""A turn (ASK, §3.7) to a Swift agent with the rules planner of configs/local.json, whose skill call
lands on a Python worker."""

import ast
import json
import operator

import pytest

from skillbus import Param, Progress, TurnFailed, Worker

from conftest import REPO

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def arithmetic(node):
    """+ - * / on numbers, nothing else."""
    if isinstance(node, ast.Expression):
        return arithmetic(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](arithmetic(node.left), arithmetic(node.right))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")


def thinker_config(tmp_path):
    """The worker config of a Swift agent with alpha's rules planner from configs/local.json."""
    local = json.loads((REPO / "configs" / "local.json").read_text())
    alpha = next(w for w in local["workers"] if w["name"] == "alpha")
    path = tmp_path / "thinker.json"
    path.write_text(json.dumps({"version": 1, "name": "thinker", "skills": ["echo"], "planner": alpha["planner"]}))
    return str(path)


def test_ask_a_swift_agent_whose_planner_calls_a_python_skill(cluster, start_worker, client, tmp_path):
    worker = Worker("pymath", coordinator=cluster.bus, heartbeat_ms=200)

    # math.eval's schema as the Swift built-in has it, so the rule's call fits.
    @worker.skill("math.eval", params=[Param("expression", "string")], description="Arithmetic, in Python")
    def evaluate(expression):
        return {"expression": expression, "value": arithmetic(ast.parse(expression, mode="eval"))}

    start_worker(worker)
    cluster.swift_worker("thinker", "--config", thinker_config(tmp_path))

    turn = client.ask("what is 6*7", session="s1")
    assert turn.reply == "6*7 is 42" and turn.agent == "thinker"
    assert [(c["skill"], c["agent"], c["status"]) for c in turn.calls] == [("math.eval", "pymath", "ok")]
    assert [s["state"] for s in turn.states][-2:] == ["streaming", "completed"]

    call = client.start_ask("what is (1+2)*3", progress=True)
    events = list(call.events())
    assert call.result().reply == "(1+2)*3 is 9"
    states = [e.body["state"] for e in events if isinstance(e, Progress) and e.kind == "state"]
    assert states[0] == "thinking" and "executingSkill" in states
    calls = [e.body for e in events if isinstance(e, Progress) and e.kind == "call"]
    assert [(c["skill"], c["agent"], c["parameters"]) for c in calls] == [("math.eval", "pymath", {"expression": "(1+2)*3"})]

    with pytest.raises(TurnFailed) as unknown:
        client.ask("hello", agent="nobody")
    assert unknown.value.code == "unknown_agent"
    with pytest.raises(TurnFailed) as no_planner:
        client.ask("what is 1+1", agent="pymath")
    assert no_planner.value.code == "unsupported"


def test_a_streamed_reply_reaches_the_python_client_piece_by_piece(cluster, client, tmp_path):
    """The openai planner against the scripted chat server of Tests/interop: STREAM before TURN."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"model": "m", "apiKey": None,
                                  "answers": [{"content": ["6*7 ", "is ", "42"], "delayMs": 60}]}))
    server = cluster.python(str(REPO / "Tests" / "interop" / "chat_server.py"), "chat server",
                            str(script), str(tmp_path / "log.jsonl"))
    port = server.wait_for_line(lambda l: l.startswith("listening "), "the port").split()[1]
    config = tmp_path / "talker.json"
    config.write_text(json.dumps({"version": 1, "name": "talker", "skills": ["echo"], "planner": {
        "openai": {"baseURL": f"http://127.0.0.1:{port}/v1", "model": "m", "timeoutSeconds": 10}}}))
    cluster.swift_worker("talker", "--config", str(config))

    call = client.start_ask("what is 6*7")
    pieces = [e for e in call.events() if isinstance(e, str)]
    turn = call.result()
    assert "".join(pieces) == turn.reply == "6*7 is 42"
    assert len(pieces) >= 2 and turn.streamed == pieces  # 60 ms apart: more than one batch of 25 ms
