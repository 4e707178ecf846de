"""A real MCP server (the `mcp` SDK's MCPServer, streamable HTTP or the older HTTP+SSE transport) on a loopback
port, for tests: a few tools, and what the server saw (the method and headers of each request, the calls made, the
calls stopped); its tool list in pages when asked (`page_size`, or pages without end); a hostile mode that answers
one method with a flood (`flood`: a tool output or a description of any size, or without end); and an HTTP server
that speaks neither."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The bytes of a flood sent at a time.
FLOOD_CHUNK = 64 * 1024


@dataclass
class ToolServer:
    url: str
    #: The headers of every HTTP request the server got, in order (lower-case names).
    headers: list[dict[str, str]] = field(default_factory=list)
    #: Each tool call made: (name, arguments).
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: How long the `slow` tool sleeps.
    slow_s: float = 30.0
    #: The method of every HTTP request (a client that closes its session sends DELETE).
    methods: list[str] = field(default_factory=list)
    #: The calls of `slow` that were stopped before they answered (their session ended, say).
    interrupted: int = 0
    #: The tool list in pages of this many tools (None: one page); `endless_pages`: every page names a next one.
    page_size: int | None = None
    endless_pages: bool = False
    #: The cursor of each `tools/list` call, in order (None: the first page).
    list_cursors: list[str | None] = field(default_factory=list)
    #: (method, bytes): that method ("tools/call" or "tools/list") answered with a tool output or a description of
    #: this many bytes, sent a chunk at a time (None bytes: without end, until the client goes).
    flood: tuple[str, int | None] | None = None
    #: The flood's bytes the server sent before the client went (or the flood ended).
    flooded: int = 0
    #: (method, body): that method answered with this body as JSON, whatever it is (a hostile server's garbage).
    garbage: tuple[str, bytes] | None = None


class _Paging:
    """Server middleware: `tools/list` in pages of `state.page_size` (the cursor is the next tool's index)."""

    def __init__(self, state: ToolServer) -> None:
        self.state = state

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/list" or self.state.page_size is None:
            return await call_next(ctx)
        cursor = (ctx.params or {}).get("cursor")
        self.state.list_cursors.append(cursor)
        listed = await call_next(
            replace(ctx, params={key: value for key, value in (ctx.params or {}).items() if key != "cursor"})
        )
        start = int(cursor or 0)
        end = start + self.state.page_size
        every = listed["tools"]  # the result as the wire has it (a dict)
        more = self.state.endless_pages or end < len(every)
        page = {key: value for key, value in listed.items() if key != "nextCursor"}
        page["tools"] = every[:1] if self.state.endless_pages else every[start:end]
        if more:
            page["nextCursor"] = str(end)
        return page


def _tools(state: ToolServer) -> MCPServer:
    server = MCPServer("test-tools", middleware=[_Paging(state)])

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        state.calls.append(("add", {"a": a, "b": b}))
        return str(a + b)

    @server.tool(description="Say something back.")
    def echo(text: str) -> str:
        state.calls.append(("echo", {"text": text}))
        return text

    @server.tool(description="Takes its time.")
    async def slow() -> str:
        state.calls.append(("slow", {}))
        try:
            await asyncio.sleep(state.slow_s)
        except asyncio.CancelledError:
            state.interrupted += 1
            raise
        return "finally"

    @server.tool(description="Always fails.")
    def broken() -> str:
        state.calls.append(("broken", {}))
        raise ValueError("the tool broke")

    return server


class _Recording:
    def __init__(self, app: ASGIApp, state: ToolServer) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.state.headers.append({key.decode().lower(): value.decode() for key, value in scope["headers"]})
            self.state.methods.append(scope["method"])
            if (self.state.flood or self.state.garbage) is not None and scope["method"] == "POST":
                body = await _whole_body(receive)
                request = json.loads(body or b"{}")
                method = request.get("method") if isinstance(request, dict) else None
                if self.state.flood is not None and method == self.state.flood[0]:
                    await self._flood(request, receive, send)
                    return
                if self.state.garbage is not None and method == self.state.garbage[0]:
                    await PlainTextResponse(self.state.garbage[1], media_type="application/json")(scope, receive, send)
                    return
                receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _flood(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        """A JSON-RPC answer to `request` whose one string (a tool's output, or a tool's description) is the flood,
        sent until it is all out or the client has gone (uvicorn's send does not fail once it has)."""
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            await self._send_flood(request, send, gone)
        finally:
            watcher.cancel()

    async def _send_flood(self, request: dict[str, Any], send: Send, gone: asyncio.Event) -> None:
        method, size = self.state.flood or ("", None)
        if method == "tools/call":
            head = {"jsonrpc": "2.0", "id": request.get("id"), "result": {"content": [{"type": "text", "text": "@"}]}}
        else:
            tool = {"name": "big", "description": "@", "inputSchema": {"type": "object"}}
            head = {"jsonrpc": "2.0", "id": request.get("id"), "result": {"tools": [tool]}}
        before, after = json.dumps(head).split('"@"')
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": (before + '"').encode(), "more_body": True})
        left = size
        while (left is None or left > 0) and not gone.is_set():
            chunk = FLOOD_CHUNK if left is None else min(FLOOD_CHUNK, left)
            await send({"type": "http.response.body", "body": b"x" * chunk, "more_body": True})
            await asyncio.sleep(0)  # the watcher's turn
            self.state.flooded += chunk
            left = None if left is None else left - chunk
        await send({"type": "http.response.body", "body": ('"' + after).encode(), "more_body": False})


async def _whole_body(receive: Receive) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The request's body again (already read), then what the connection says next (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


@asynccontextmanager
async def _serving(app: ASGIApp) -> AsyncIterator[int]:
    """Serves `app` on 127.0.0.1 (a free port, yielded) while the block runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    # No log_config and no log_level: uvicorn would reconfigure the process's uvicorn.* loggers (levels, handlers,
    # propagation), and every later test that reads access lines would find none.
    config = uvicorn.Config(app, log_config=None, log_level=None, lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


@asynccontextmanager
async def tool_server(
    transport: Literal["streamable", "sse"] = "streamable", *, extra_tools: int = 0
) -> AsyncIterator[ToolServer]:
    """Serves the tools on 127.0.0.1 (a free port) while the block runs; `.url` is its endpoint (`/mcp`, or the
    SSE stream's `/sse`, whose first event names where messages are POSTed). `extra_tools`: that many more, named
    `tool_0`... (for pages and the tool cap)."""
    state = ToolServer("")
    tools = _tools(state)
    for index in range(extra_tools):
        tools.add_tool(_numbered(index), name=f"tool_{index}", description=f"Tool number {index}.")
    app = tools.streamable_http_app() if transport == "streamable" else tools.sse_app()
    async with _serving(_Recording(app, state)) as port:
        state.url = f"http://127.0.0.1:{port}/{'mcp' if transport == 'streamable' else 'sse'}"
        yield state


def _numbered(index: int) -> Callable[[], str]:
    def tool() -> str:
        return str(index)

    return tool


@asynccontextmanager
async def plain_http_server(status: int = 404) -> AsyncIterator[ToolServer]:
    """An HTTP server that is no MCP server (it answers every request with `status`), recording what it got."""
    state = ToolServer("")

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await PlainTextResponse(f"status {status}", status_code=status)(scope, receive, send)

    async with _serving(_Recording(refuse, state)) as port:
        state.url = f"http://127.0.0.1:{port}/mcp"
        yield state


def closed_port_url() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (a server that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"
