#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server for the openai planner's tests.

    python3 chat_server.py SCRIPT.json LOG.jsonl

Prints "listening PORT" once it serves on 127.0.0.1 (an ephemeral port). SCRIPT is
{"model": NAME, "apiKey": KEY or null, "answers": [ANSWER, ...]}: the n-th POST to
.../chat/completions gets the n-th answer. Every request is appended to LOG as one JSON line
({"path", "authorization", "body", "time"}) before it is answered, so the test can check what it sent.

An ANSWER is one of
  {"content": ["piece", ...], "delayMs": 50, "holdBeforeLast": PATH}
      text streamed as server-sent events, one chunk per piece, with a pause between pieces;
      with holdBeforeLast, the last piece waits until the file PATH exists (the test creates it
      once it has seen the first piece, which shows the reply is forwarded while still streaming);
      after 10 s without it, the stream ends with an error event instead
  {"toolCalls": [{"name": N, "arguments": TEXT}, ...]}
      tool calls, each one's arguments sent in three fragments, each event split across two writes
  {"status": 401, "body": {...}, "headers": {...}}   an answer with that status and JSON body
  {"raw": TEXT}                                       a 200 event stream whose body is TEXT as is
  "stallMs": N (beside content, raw or toolCalls)     the stream begins, then stays silent N ms
  {"whole": {"content": TEXT}}                        a non-streamed JSON completion

The server also checks the request as the API defines it (stream true, the script's model, tool
names, every tool message answering a tool call of the assistant message before it) and answers a
violation with 400 and the reason, so that a mistake fails the test with a message that says what.
"""

import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def problems(body, script):
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    if body.get("stream") is not True:
        return "stream must be true"
    if body.get("model") != script.get("model"):
        return "model %r, expected %r" % (body.get("model"), script.get("model"))
    for tool in body.get("tools", []):
        function = tool.get("function", {})
        if tool.get("type") != "function" or not NAME.match(function.get("name", "")):
            return "bad tool %r" % tool
        if function.get("parameters", {}).get("type") != "object":
            return "tool %s: parameters must be an object schema" % function.get("name")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty array"
    open_calls = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return "messages[%d]: a tool message answers no open tool call" % index
            open_calls.discard(message.get("tool_call_id"))
            if not isinstance(message.get("content"), str):
                return "messages[%d]: a tool message's content must be a string" % index
            continue
        if open_calls:
            return "messages[%d]: tool calls %s were not answered" % (index, sorted(open_calls))
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                if call.get("type") != "function" or not NAME.match(call.get("function", {}).get("name", "")):
                    return "messages[%d]: bad tool call %r" % (index, call)
                if not isinstance(call["function"].get("arguments"), str):
                    return "messages[%d]: arguments must be a string" % index
                open_calls.add(call.get("id"))
        elif role in ("system", "user", "assistant"):
            if not isinstance(message.get("content"), str):
                return "messages[%d]: content must be a string" % index
        else:
            return "messages[%d]: unknown role %r" % (index, role)
    if open_calls:
        return "the last tool calls were not answered"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *arguments):
        pass

    def do_POST(self):
        try:
            self.answer()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancelled turn): nothing to answer

    def answer(self):
        server = self.server
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with server.lock:
            number = server.count
            server.count += 1
            with open(server.log_path, "a") as log:
                entry = {"path": self.path, "authorization": self.headers.get("Authorization"), "body": body,
                         "time": time.time()}
                log.write(json.dumps(entry) + "\n")
        script = server.script
        if not self.path.endswith("/chat/completions"):
            return self.json(404, {"error": {"message": "no such path " + self.path}})
        key = script.get("apiKey")
        if key is not None and self.headers.get("Authorization") != "Bearer " + key:
            return self.json(401, {"error": {"message": "wrong or missing API key"}})
        problem = problems(body, script)
        if problem:
            return self.json(400, {"error": {"message": "the scripted server refuses the request: " + problem}})
        answers = script["answers"]
        if number >= len(answers):
            return self.json(500, {"error": {"message": "the script has no answer %d" % number}})
        answer = answers[number]
        if "status" in answer:
            return self.json(answer["status"], answer.get("body", {}), answer.get("headers", {}))
        if "whole" in answer:
            message = {"role": "assistant", "content": answer["whole"].get("content")}
            completion = {"object": "chat.completion", "model": script["model"],
                          "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            return self.json(200, completion)
        self.start_stream()
        if "stallMs" in answer:
            # The answer begins, then nothing comes for a while (a model that is slow to start).
            self.event({"role": "assistant", "content": ""})
            time.sleep(answer["stallMs"] / 1000)
        if "raw" in answer:
            self.chunk(answer["raw"].encode())
        elif "toolCalls" in answer:
            self.event({"role": "assistant", "content": None})
            for index, call in enumerate(answer["toolCalls"]):
                self.event({"tool_calls": [{"index": index, "id": "call_%d_%d" % (number, index), "type": "function",
                                            "function": {"name": call["name"], "arguments": ""}}]}, split=True)
                arguments = call["arguments"]
                third = max(1, len(arguments) // 3)
                for start in range(0, len(arguments), third):
                    piece = arguments[start:start + third]
                    self.event({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, split=True)
            self.event({}, finish="tool_calls")
        else:
            self.event({"role": "assistant", "content": ""})
            pieces = answer["content"]
            for index, piece in enumerate(pieces):
                if index > 0:
                    time.sleep(answer.get("delayMs", 30) / 1000)
                if index == len(pieces) - 1 and answer.get("holdBeforeLast"):
                    deadline = time.time() + 10
                    while not os.path.exists(answer["holdBeforeLast"]) and time.time() < deadline:
                        time.sleep(0.01)
                    if not os.path.exists(answer["holdBeforeLast"]):
                        message = "the client showed no piece of the reply while the answer was still open"
                        self.chunk(("data: " + json.dumps({"error": {"message": message}}) + "\n\n").encode())
                        break
                self.event({"content": piece})
            self.event({}, finish="stop")
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    def json(self, status, value, headers=None):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, text in (headers or {}).items():
            self.send_header(name, str(text))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        """One piece of the chunked body (an empty one ends it), sent at once."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, delta, finish=None, split=False):
        chunk = {"object": "chat.completion.chunk", "model": self.server.script["model"],
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        data = ("data: " + json.dumps(chunk) + "\n\n").encode()
        if split:
            # Half an event now and half a moment later: the client must join lines across reads.
            middle = len(data) // 2
            self.chunk(data[:middle])
            time.sleep(0.005)
            self.chunk(data[middle:])
        else:
            self.chunk(data)


def main():
    script_path, log_path = sys.argv[1], sys.argv[2]
    with open(script_path) as file:
        script = json.load(file)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.script = script
    server.log_path = log_path
    server.lock = threading.Lock()
    server.count = 0
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
