"""Pure logic, no sockets: JSON as Skillbus spells it (§2), schemas (§5.3), results (§5.5), the digest (§8.4)."""

import pytest

from skillbus import Param, Result, SkillbusError, Worker, digest
from skillbus import jsonwire, schema
from skillbus.worker_loop import feed_for


@pytest.mark.parametrize("value, spelled", [
    (3.0, "3"), (-0.0, "0"), (0.25, "0.25"), (0.0001, "0.0001"), (1e-05, "1e-05"), (9.9e-05, "9.9e-05"),
    (1e15, "1000000000000000.0"), (2.0**53, "9007199254740992.0"), (9.5e15, "9.5e+15"), (1.25e16, "1.25e+16"),
    (1e100, "1e+100"), (float("nan"), "null"), ("\b\f\u0001/é\u2028", '"\\u0008\\u000c\\u0001/é\u2028"'),
    ({"b": 1, "a": [True, None]}, '{"a":[true,null],"b":1}'),
])
def test_writes_json_as_skillbus_does(value, spelled):
    assert jsonwire.dumps(value) == spelled


@pytest.mark.parametrize("document", [
    b"", b"1 2", b"NaN", b"+1", b"01", b"1.", b'{"a":1,"a":2}', "{\"\u00e9\":1,\"e\u0301\":2}".encode(),
    b'"\\ud83d"', b"1e400", b"\xef\xbb\xbf1", b"\x0c1", b'"\xc0\xaf"', b"[" * 129 + b"]" * 129, b"[1,]",
])
def test_refuses_what_the_swift_reader_refuses(document):
    with pytest.raises(ValueError):
        jsonwire.loads(document)


@pytest.mark.parametrize("document", [b"[" * 128 + b"1" + b"]" * 128, b'"\\ud83d\\ude00"', b"1e-400", b' \t\r\n[]\n',
                                      b'{"a":1,"A":2}'])
def test_accepts_what_the_swift_reader_accepts(document):
    jsonwire.loads(document)


def test_validation_reports_every_problem_in_the_documented_order():
    fields = [Param("text", "string"), Param("count", "integer", required=False)]
    _, problems = schema.validate(fields, {"count": 1.5, "txt": "x", "b": True})
    assert "; ".join(problems) == (
        "missing required parameter 'text' (string); parameter 'count' must be integer, got number; "
        "unknown parameter 'b' (expected: text, count); unknown parameter 'txt' (expected: text, count)")


def test_validation_fills_in_defaults_and_accepts_whole_numbers_as_integers():
    fields = [Param("n", "integer"), Param("scale", "number", required=False, default=2)]
    values, problems = schema.validate(fields, {"n": 3.0})
    assert problems == [] and values == {"n": 3.0, "scale": 2}
    assert schema.validate([], {"x": None})[1] == ["unknown parameter 'x' (expected: none)"]
    assert schema.validate([Param("v", "any")], {"v": None})[1] == ["parameter 'v' must be any, got null"]


@pytest.mark.parametrize("make, says", [
    (lambda: Param("x", "str"), "type 'str' is not one of"),
    (lambda: Param("", "string"), "non-empty name"),
    (lambda: Param("x", "integer", required=False, default="1"), "is not integer"),
    (lambda: Param("x", "string", required=False, default=None), "accepted by no type"),
    (lambda: schema.descriptor("bad id", []), "skill identifier 'bad id' is invalid"),
    (lambda: schema.descriptor("ok", [Param("a"), Param("a")]), "parameter 'a' is declared twice"),
    (lambda: schema.descriptor("ok", [], concurrency=0), "concurrency must be"),
    (lambda: Worker("no spaces"), "agent name 'no spaces' is invalid"),
    (lambda: Worker("w", capacity=0), "capacity must be"),
])
def test_bad_declarations_are_refused_with_a_message_naming_the_problem(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_a_skill_function_must_take_its_declared_parameters():
    worker = Worker("w")
    with pytest.raises(ValueError, match=r"shout\(\) takes no parameter 'text'"):
        @worker.skill("shout", params={"text": "string"})
        def shout(words):
            return words
    with pytest.raises(ValueError, match="clashes with the invocation context"):
        @worker.skill("ctx", params={"context": "string"})
        def ctx(context):
            return ""

    @worker.skill("fine", params={"text": "string"})
    def fine(text):
        return text
    with pytest.raises(ValueError, match="declared twice"):
        worker.skill("fine")(fine)


def test_results_read_and_write_the_three_forms():
    assert Result.from_value("hi").to_json() == {"type": "text", "text": "hi"}
    assert Result.from_value({"a": 1}).to_json() == {"type": "json", "json": {"a": 1}}
    attachment = Result.attachment("a.txt", "text/plain", b"hi")
    assert attachment.to_json()["base64"] == "aGk=" and Result.from_json(attachment.to_json()).data == b"hi"
    with pytest.raises(ValueError, match="not a result form"):
        Result.from_json({"type": "picture"})


def test_error_objects_without_code_or_message_read_as_the_protocol_says():
    error = SkillbusError.from_object({"details": 1})
    assert (error.code, error.message, error.details) == ("internal", "no message given", 1)
    assert SkillbusError("busy", "full").to_object() == {"code": "busy", "message": "full"}


def test_digest_matches_the_documented_values():
    echo = {"agent": "alpha", "capacity": 2, "skills": [{"description": "Returns the text it is given.",
            "displayName": "Echo", "identifier": "echo", "parameters": [
                {"description": "Text to return", "name": "text", "required": True, "type": "string"}]}]}
    assert digest({}) == "cbf29ce484222325"
    assert digest({"alpha": echo}) == "a37cf87c43fd4a4b"
    assert digest({"alpha": echo, "beta": {"agent": "beta", "capacity": 1, "skills": []}}) == "f6c61fb0400e47c5"


def test_a_wildcard_feed_host_is_replaced_by_the_bus_host():
    assert feed_for("tcp://10.0.0.5:5555", "tcp://0.0.0.0:5556") == "tcp://10.0.0.5:5556"
    assert feed_for("tcp://10.0.0.5:5555", "tcp://127.0.0.1:5556") == "tcp://127.0.0.1:5556"
    assert feed_for("ipc:///tmp/bus", "ipc:///tmp/feed") == "ipc:///tmp/feed"


@pytest.mark.parametrize("payload, text", [
    (b'{"text":"hi","type":"text"}', "hi"), ('{"text":"é ☃","type":"text"}'.encode(), "é ☃"),
    (b'{"text":"","type":"text"}', ""),
    (b'{"text":"a\\"b","type":"text"}', None),  # an escape: read in full
    (b'{"text":"a\\u0000","type":"text"}', None), (b'{"text":"a\x01","type":"text"}', None),
    (b'{"text":"\xff","type":"text"}', None), (b'{"text":"a","type":"text","x":1}', None),
    (b'{"text":"a","b":"c","type":"text"}', None), (b'{"json":"a","type":"json"}', None),
])
def test_a_plain_text_result_is_read_without_parsing_and_anything_else_is_left_to_loads(payload, text):
    assert jsonwire.text_result(payload) == text


@pytest.mark.parametrize("text", ["", "plain", 'q"uote', "back\\slash", "\b\f\n\r\t\x00\x1f\x7f", "é\u2028☃😀",
                                  "\\b", "x\bx\\fy\f"])
def test_strings_are_written_as_the_character_by_character_writer_writes_them(text):
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    expected = '"' + "".join(escapes.get(c) or (f"\\u{ord(c):04x}" if c < " " else c) for c in text) + '"'
    assert jsonwire.dumps(text) == expected
    assert jsonwire.loads(jsonwire.encode(text)) == text


@pytest.mark.parametrize("document, says", [
    (b'{"a":[1e309]}', "too large for a double"), (b"-1e999", "too large for a double"),
    (b"[" + b"9" * 400 + b"]", "too large for a double"), (b'{"k":"\\udc00"}', "lone surrogate"),
    (b'{"\\ud800":1}', "lone surrogate"),
])
def test_numbers_and_surrogates_are_judged_wherever_they_are(document, says):
    with pytest.raises(ValueError, match=says):
        jsonwire.loads(document)


@pytest.mark.parametrize("document", [
    b'{"durationMs":0.5,"error":null,"invocations":[{"id":"a","result":{"text":"hi","type":"text"}}],"round":"r",'
    b'"shape":"fanout","status":"ok","summary":{"executions":1,"totalMs":0.5}}',
    '{"result":{"json":[1,-2.25,1e+100,true,false,null,"é ☃ \\u0000"],"type":"json"}}'.encode(),
])
def test_a_document_the_bus_wrote_reads_as_the_strict_reader_reads_it(document):
    assert jsonwire.loads_canonical(document) == jsonwire.loads(document)


@pytest.mark.parametrize("document, says", [
    (b'{"a":NaN}', "not JSON"), (b'{"a":', "invalid JSON"), (b'{"a":"\xff"}', "not valid UTF-8"),
])
def test_a_document_the_bus_wrote_is_still_refused_when_it_is_not_json(document, says):
    with pytest.raises(ValueError, match=says):
        jsonwire.loads_canonical(document)
