#!/usr/bin/env python3
"""A small MCP server, written with the official SDK's MCPServer (formerly FastMCP) API, that a Skillbus
worker mounts in the integration tests (Tests/SkillbusIntegrationTests/MCPSkillTests.swift).

    fixture_server.py                 MCP over stdio
    fixture_server.py --http          Streamable HTTP on an ephemeral 127.0.0.1 port; prints
                                      "listening on http://127.0.0.1:PORT/mcp" once it accepts connections;
                                      with FIXTURE_TOKEN set, only requests bearing that token get in

FIXTURE_LOG names a file where it appends one line per event (start, each counted call, a cancelled
sleep), so a test can see what the server itself saw."""

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("skillbus-fixture")
WIRE_INODE = os.fstat(1).st_ino
# Tools that return text say so (structured_output=False): otherwise the SDK declares an output schema and
# answers {"result": "..."} as structured content, which a Skillbus worker turns into a JSON result.


def note(line: str) -> None:
    path = os.environ.get("FIXTURE_LOG")
    if path:
        with open(path, "a") as log:
            log.write(line + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True), structured_output=False)
def echo(text: str) -> str:
    """Says the text back (and notes it in the log)."""
    note(f"echo {text}")
    return text


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int = 0) -> dict[str, int]:
    """Adds two integers; the answer is structured."""
    return {"sum": a + b}


@server.tool(structured_output=False)
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise ToolError(f"refused: {reason}")


@server.tool(structured_output=False)
async def countdown(n: int, ctx: Context) -> str:
    """Counts down from n, reporting progress at each step."""
    for step in range(n):
        await ctx.report_progress(step + 1, n, f"{n - step}...")
        await asyncio.sleep(0.05)
    return "liftoff"


@server.tool(structured_output=False)
async def sleep(seconds: float, tag: str = "") -> str:
    """Sleeps; notes in the log when it was cancelled."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note(f"cancelled sleep {tag}")
        raise
    return "slept"


@server.tool(annotations=ToolAnnotations(idempotentHint=True), structured_output=False)
def count(key: str) -> str:
    """Counts its calls with this key (in the log)."""
    note(f"count {key}")
    return f"counted {key}"


@server.tool(structured_output=False)
def crash() -> str:
    """Ends the server's process at once, as a crash would."""
    note("crash")
    os._exit(3)


@server.tool(annotations=ToolAnnotations(idempotentHint=True), structured_output=False)
def flaky(key: str) -> str:
    """Crashes the server the first time it is called with this key; answers from then on."""
    marker = os.environ.get("FIXTURE_LOG", "/tmp/skillbus-fixture") + f".flaky-{key}"
    if not os.path.exists(marker):
        open(marker, "w").close()
        note(f"flaky crash {key}")
        os._exit(3)
    return f"steady {key}"


@server.tool(structured_output=False)
def garbage() -> str:
    """Writes something that is no JSON-RPC message on standard output (stdio only)."""
    # The SDK moves the protocol's pipe off fd 1 (so that stray prints cannot corrupt it): find it by its inode.
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.fstat(fd).st_ino == WIRE_INODE:
                os.write(fd, b"this is not JSON\n")
        except OSError:
            pass
    return "wrote garbage"


@server.tool(structured_output=False)
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called `name` (it says hello) and tells the client the tool list changed."""

    def hello() -> str:
        return f"hello from {name}"

    server.add_tool(hello, name=name, description="Added at run time.", structured_output=False)
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


# Over HTTP: once `forget` ran, the next session that sends a request is forgotten, as a restarted
# server forgets its sessions; from then on every request of that session is answered 404.
FORGET = {"next": False, "sessions": set()}


@server.tool(structured_output=False)
def forget() -> str:
    """Over HTTP, makes the server forget the session of the next request it gets."""
    FORGET["next"] = True
    return "will forget"


def forgetting(app):
    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            session = dict(scope["headers"]).get(b"mcp-session-id")
            if session and FORGET["next"] and scope["method"] == "POST":
                FORGET["next"] = False
                FORGET["sessions"].add(session)
                note("forgot a session")
            if session in FORGET["sessions"]:
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b"no such session"})
                return
        await app(scope, receive, send)

    return guarded


def require_token(app, token: str):
    """Refuses every HTTP request without `Authorization: Bearer <token>` (401), as a guarded server would."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            note("refused a request without the token")
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"a bearer token is required"})
            return
        await app(scope, receive, send)

    return guarded


def serve_http() -> None:
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    app = forgetting(app)
    token = os.environ.get("FIXTURE_TOKEN")
    if token:
        app = require_token(app, token)
    config = uvicorn.Config(app, log_level="warning")

    class Announcing(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets=sockets)
            print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)

    asyncio.run(Announcing(config).serve(sockets=[listener]))


if __name__ == "__main__":
    note("start")
    if "--http" in sys.argv:
        serve_http()
    else:
        server.run()
