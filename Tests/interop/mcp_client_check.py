#!/usr/bin/env python3
"""Drives `skillbus mcp` as MCP clients do, for the Swift integration test (MCPServerTests).

`sdk` mode uses the official MCP SDK's client over stdio: it launches `skillbus mcp ARGS...` itself. `http`
mode runs the same checks with the SDK's Streamable HTTP client against `skillbus mcp --http` at URL with a
bearer TOKEN. `raw` mode writes JSON-RPC lines to stdio by hand, bad ones included; `raw-http` sends bad
HTTP requests. Each prints one JSON object per line, {"step": ...}, with what it saw; the Swift test
decides what is right. On `{"step": "waiting for worker"}` the test starts a worker and this waits for
notifications/tools/list_changed.

`raw-close` closes standard input while a call runs. `call` mode lists the tools and calls echo once, over stdio, with the SDK's high-level `Client`.

usage: mcp_client_check.py sdk|raw|raw-close|call SKILLBUS_BINARY -- MCP_ARGS...
       mcp_client_check.py http URL TOKEN
       mcp_client_check.py raw-http URL CLIENT_TOKEN READER_TOKEN
"""

import json
import queue
import subprocess
import sys
import threading
import time

import anyio
import httpx2
import mcp_types as types
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def report(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def summary(result):
    """What a test needs of a CallToolResult."""
    return {
        "isError": bool(result.is_error),
        "text": "\n".join(part.text for part in result.content if getattr(part, "type", "") == "text"),
        "structured": result.structured_content,
        "meta": result.meta or {},
    }


async def all_tools(session):
    """Every tool, page after page."""
    tools, cursor, pages = [], None, 0
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            return tools, pages


async def stdio_checks(binary, arguments):
    server = StdioServerParameters(command=binary, args=["mcp", *arguments])
    async with stdio_client(server) as (read, write):
        await checks(read, write)


async def call_check(binary, arguments):
    """The SDK's high-level Client, as most programs use it: its default mode probes the 2026-07-28
    `server/discover` first and falls back to the initialize handshake."""
    async with Client(StdioServerParameters(command=binary, args=["mcp", *arguments])) as client:
        tools = await client.list_tools()
        report("call tools", names=[tool.name for tool in tools.tools], version=client.protocol_version)
        try:
            report("call", **summary(await client.call_tool("echo", {"text": "keyed"})))
        except MCPError as error:
            report("call", refused=str(error))


async def http_checks(url, token):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            await checks(read, write)


async def checks(read, write):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def on_elicitation(context, params):
        report("elicitation", message=params.message)
        return types.ElicitResult(action="accept", content={})

    async with ClientSession(read, write, message_handler=on_message, elicitation_callback=on_elicitation) as session:
        init = await session.initialize()
        report(
            "initialize", version=init.protocol_version, server=init.server_info.name,
            listChanged=bool(init.capabilities.tools and init.capabilities.tools.list_changed))

        tools, pages = await all_tools(session)
        echo = next((tool for tool in tools if tool.name == "echo"), None)
        report(
            "tools", names=[tool.name for tool in tools], pages=pages,
            echoSchema=echo.input_schema if echo else None,
            echoHints=echo.annotations.model_dump(by_alias=True, exclude_none=True) if echo and echo.annotations else None)

        report("waiting for worker")
        with anyio.fail_after(20):
            await changed.wait()
        tools, _ = await all_tools(session)
        report("list_changed", names=[tool.name for tool in tools])

        report("text", **summary(await session.call_tool("echo", {"text": "hello"})))
        report("json", **summary(await session.call_tool("math.eval", {"expression": "(1 + 2) * 3"})))
        report("invalid", **summary(await session.call_tool("math.eval", {"expr": "1", "extra": True})))
        report("failed", **summary(await session.call_tool("math.eval", {"expression": "1 +"})))

        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "message": message})

        result = await session.call_tool(
            "text.lines", {"text": "one\ntwo\nthree", "delayMs": 300}, progress_callback=on_progress)
        report("progress", progress=progress, **summary(result))

        # The sleeper runs one invocation at a time: the short sleep after each one that was given up on
        # finishes in time only when the long one was cancelled on the bus.
        with anyio.move_on_after(1):
            await session.call_tool("sleep", {"ms": 30000})
        report("cancelled")
        quick = await session.call_tool("sleep", {"ms": 10}, meta={"skillbus/timeoutMs": 5000})
        report("after cancel", **summary(quick))
        try:
            await session.call_tool("sleep", {"ms": 30000}, read_timeout_seconds=1)
            report("client timeout", raised=False)
        except MCPError as error:
            report("client timeout", raised=True, message=str(error))
        quick = await session.call_tool("sleep", {"ms": 20}, meta={"skillbus/timeoutMs": 5000})
        report("after timeout", **summary(quick))

        report("agent", **summary(await session.call_tool("ask.sayer", {"message": "say hi"})))

        first = summary(await session.call_tool("echo", {"text": "retried"}))
        again = summary(await session.call_tool("echo", {"text": "retried"}))
        named = summary(await session.call_tool("echo", {"text": "named"}, meta={"skillbus/round": "mcp-named-1"}))
        report("retry", first=first, again=again, named=named)

        report("confirmed", **summary(await session.call_tool("file.write", {"path": "mcp.txt", "text": "from mcp"})))


def raw_checks(binary, arguments):
    process = subprocess.Popen(
        [binary, "mcp", *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    answers = queue.Queue()
    threading.Thread(target=lambda: [answers.put(line) for line in process.stdout], daemon=True).start()

    def send(line, expect_answer=True):
        process.stdin.write(line + "\n")
        process.stdin.flush()
        if expect_answer:
            report("raw", sent=line, answer=json.loads(answers.get(timeout=20)))

    send("{nope")
    send('{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}))
    send('{"jsonrpc":"2.0","method":"notifications/initialized"}', expect_answer=False)
    send('{"jsonrpc":"2.0","id":3,"method":"no/such"}')
    send('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"no.such.tool"}}')
    send('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":[1]}}')
    send('{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{"txt":"x"}}}')
    send('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file.write",'
         '"arguments":{"path":"raw.txt","text":"x"}}}')
    send('[{"jsonrpc":"2.0","id":8,"method":"ping"}]')
    send('{"jsonrpc":"2.0","id":9,"method":"ping"}')
    process.stdin.close()
    report("raw exit", code=process.wait(timeout=20))


def raw_close_check(binary, arguments):
    """A client that closes standard input while a call runs: the server stops, and cancels the call."""
    process = subprocess.Popen([binary, "mcp", *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}) + "\n")
    process.stdin.flush()
    process.stdout.readline()
    process.stdin.write('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":30000}}}\n')
    process.stdin.flush()
    report("raw close", state="calling")
    coordinator = arguments[arguments.index("--coordinator") + 1]
    running = 0
    deadline = time.monotonic() + 10
    while running == 0 and time.monotonic() < deadline:  # until the sleep is under way on its worker
        listing = subprocess.run([binary, "agents", "--json", "--coordinator", coordinator], capture_output=True, text=True)
        agents = json.loads(listing.stdout or "{}").get("agents", [])
        running = sum(agent.get("inFlight", 0) for agent in agents)
    report("raw close", state="running", inFlight=running)
    started = time.monotonic()
    process.stdin.close()
    code = process.wait(timeout=20)
    report("raw close", state="exited", code=code, seconds=round(time.monotonic() - started, 2))


def raw_http_checks(url, client_token, reader_token):
    """Bad requests to the HTTP endpoint: each gets the status (and JSON-RPC error) that says what was wrong."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw-http", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}

    def post(name, body, token=client_token, session=None, **headers):
        sent = {**accept, **headers}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if session:
            sent["Mcp-Session-Id"] = session
        content = body if isinstance(body, str) else json.dumps(body)
        response = httpx2.post(url, content=content, headers=sent, timeout=20)
        answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
        report("raw-http", name=name, status=response.status_code, answer=answer,
               session=response.headers.get("mcp-session-id"))
        return response

    post("no token", initialize, token=None)
    post("wrong token", initialize, token="not-the-token-at-all")
    post("foreign origin", initialize, Origin="https://evil.example")
    post("no session", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    post("unknown session", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session="nope")
    session = post("initialize", initialize, Origin="http://localhost:3000").headers["mcp-session-id"]
    post("not json", "{nope", session=session)
    post("bad version", {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session=session,
         **{"MCP-Protocol-Version": "1999-01-01"})
    post("initialized", {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session)
    post("tools/list", {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, session=session)
    reader = post("reader initialize", initialize, token=reader_token).headers["mcp-session-id"]
    post("reader list", {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, token=reader_token, session=reader)
    post("reader call", {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"}}}, token=reader_token, session=reader)
    post("another token's session", {"jsonrpc": "2.0", "id": 9, "method": "ping"}, token=reader_token, session=session)
    post("bad initialize", {"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": {}})
    post("call accepting only JSON", {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"}}}, session=session, Accept="application/json")
    resume_check(url, client_token, session)
    response = httpx2.get(url, headers={"Authorization": f"Bearer {client_token}", "Mcp-Session-Id": session,
                                        "Accept": "application/json"}, timeout=20)
    report("raw-http", name="get without event-stream", status=response.status_code)
    response = httpx2.delete(url, headers={"Authorization": f"Bearer {client_token}", "Mcp-Session-Id": session},
                             timeout=20)
    report("raw-http", name="delete", status=response.status_code)
    post("after delete", {"jsonrpc": "2.0", "id": 7, "method": "ping"}, session=session)


def sse_events(response):
    """(id, data) of each event of a stream, until the server closes it."""
    event_id, data = None, []
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line == "":
            if event_id is not None or data:
                yield event_id, "\n".join(data)
            event_id, data = None, []


def resume_check(url, token, session):
    """A call's stream that the server closes early (--http-stream-limit) is resumed with Last-Event-ID."""
    headers = {"Authorization": f"Bearer {token}", "Mcp-Session-Id": session,
               "Accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 40, "method": "tools/call", "params": {
        "name": "text.lines", "arguments": {"text": "a\nb\nc\nd", "delayMs": 250}, "_meta": {"progressToken": 1}}}
    before, after, last = [], [], None
    with httpx2.stream("POST", url, json=call, headers=headers, timeout=20) as response:
        for event_id, data in sse_events(response):
            last = event_id or last
            if data:
                before.append(json.loads(data))
    with httpx2.stream("GET", url, headers={**headers, "Last-Event-ID": last}, timeout=20) as response:
        for event_id, data in sse_events(response):
            if data:
                after.append(json.loads(data))
    report("resume", before=before, after=after, lastEventID=last)


def main():
    mode = sys.argv[1]
    if mode == "http":
        anyio.run(http_checks, sys.argv[2], sys.argv[3])
    elif mode == "raw-http":
        raw_http_checks(*sys.argv[2:5])
    else:
        binary = sys.argv[2]
        arguments = sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:]
        if mode == "sdk":
            anyio.run(stdio_checks, binary, arguments)
        elif mode == "call":
            anyio.run(call_check, binary, arguments)
        elif mode == "raw-close":
            raw_close_check(binary, arguments)
        else:
            raw_checks(binary, arguments)
    report("done")


if __name__ == "__main__":
    main()
