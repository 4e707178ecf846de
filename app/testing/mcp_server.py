"""A real MCP server (the `mcp` SDK's MCPServer, streamable HTTP or the older HTTP+SSE transport) on a loopback
port, for tests: a few tools, and what the server saw (the method and headers of each request, the calls made, the
calls stopped); and an HTTP server that speaks neither."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send


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


def _tools(state: ToolServer) -> MCPServer:
    server = MCPServer("test-tools")

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
        await self.app(scope, receive, send)


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
async def tool_server(transport: Literal["streamable", "sse"] = "streamable") -> AsyncIterator[ToolServer]:
    """Serves the tools on 127.0.0.1 (a free port) while the block runs; `.url` is its endpoint (`/mcp`, or the
    SSE stream's `/sse`, whose first event names where messages are POSTed)."""
    state = ToolServer("")
    tools = _tools(state)
    app = tools.streamable_http_app() if transport == "streamable" else tools.sse_app()
    async with _serving(_Recording(app, state)) as port:
        state.url = f"http://127.0.0.1:{port}/{'mcp' if transport == 'streamable' else 'sse'}"
        yield state


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
