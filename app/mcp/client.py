"""Talking to one MCP server (the official `mcp` SDK's clients: streamable HTTP, or the older HTTP+SSE transport as
a fallback): list its tools, call one.

The fallback is the one the MCP specification describes for backwards compatibility: when the server answers the
streamable handshake (its `initialize` POST) with a 4xx that says "not here" (404, 405, 400...), the same URL is
opened as an SSE stream (GET) whose first event names where to POST. An auth refusal (401/403), a rate limit, a
server that is down or that times out, is not a transport question: no second try.

Every connection goes to the address app/outbound checked: the host is resolved once (`resolve`) and a transport
pinned to that address carries every request (the Host header and TLS SNI keep the name), so no DNS rebinding can
swap it between the check and the connection. No redirect leaves the server's origin (the SDK's own rule), no
proxy comes from the environment, every exchange is bounded in time and a call's output in size.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from app.outbound.addresses import AllowedHosts, IpAddress, OutboundRefused, check_url, resolve


class McpFailed(Exception):
    """The server could not be reached, refused, answered garbage or took too long; the message says which (and
    names no header). `execution`: the tool ran and said it failed (rather than the exchange failing)."""

    def __init__(self, message: str, *, execution: bool = False) -> None:
        super().__init__(message)
        self.execution = execution


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None


#: Answers to the streamable handshake that do not send a client to the SSE transport: the server is there and
#: speaks it, but refuses this client (auth, rate) or did not answer in time.
_NO_FALLBACK = frozenset({401, 403, 407, 408, 429})


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request to `address` (checked), whatever its URL's host says: the name stays in Host and SNI."""

    def __init__(self, address: IpAddress, host: str) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False, retries=0)
        self._address = address
        self._host = host
        #: The status of the first answer to each method (a POST: the streamable handshake; a GET: the SSE stream).
        self.first: dict[str, int] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self._host:
            raise httpx2.ConnectError(f"refused a request to another host ({request.url.host})", request=request)
        literal = f"[{self._address}]" if isinstance(self._address, ipaddress.IPv6Address) else str(self._address)
        request.url = request.url.copy_with(host=literal)
        if request.url.scheme == "https":
            request.extensions["sni_hostname"] = self._host
        response = await self._inner.handle_async_request(request)
        self.first.setdefault(request.method, response.status_code)
        return response

    @property
    def wants_sse(self) -> bool:
        """The handshake was answered with a 4xx that says this URL does not speak streamable HTTP."""
        status = self.first.get("POST")
        return status is not None and 400 <= status < 500 and status not in _NO_FALLBACK

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _session(
    url: str, headers: dict[str, str], allowed: AllowedHosts, timeout_s: float
) -> AsyncIterator[ClientSession]:
    """An initialised session with the server at `url`: streamable HTTP, else (see the module's doc) SSE."""
    try:
        target = check_url(url, allowed)
        address = await resolve(target, allowed)
    except OutboundRefused as error:
        raise McpFailed(str(error)) from None
    async with AsyncExitStack() as stack:
        yield await _connect(stack, url, headers, _Pinning(address, target.host), timeout_s)


@dataclass(frozen=True, slots=True)
class _Pinning:
    """The checked address a connection goes to, and the host name its requests keep."""

    address: IpAddress
    host: str

    def client(self, headers: dict[str, str], timeout_s: float) -> tuple[httpx2.AsyncClient, _PinnedTransport]:
        transport = _PinnedTransport(self.address, self.host)
        client = httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(timeout_s), transport=transport, trust_env=False
        )
        return client, transport


async def _connect(
    stack: AsyncExitStack, url: str, headers: dict[str, str], pinning: _Pinning, timeout_s: float
) -> ClientSession:
    """Streamable HTTP first; SSE when its handshake was answered "not here". The session's exits go on `stack`."""
    http, streamable = pinning.client(headers, timeout_s)
    try:
        return await _initialize(stack, http, streamable_http_client(url, http_client=http), timeout_s)
    except (Exception, BaseExceptionGroup):
        handshake = streamable.first.get("POST")
        if not streamable.wants_sse:
            if handshake is not None and handshake >= 400:  # the SDK says only "an error response"
                raise McpFailed(f"The MCP server answered the handshake with HTTP {handshake}.") from None
            raise
    http, sse = pinning.client(headers, timeout_s)

    def pinned(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        return http  # the SDK's own client options (no headers, its timeouts) give way to ours

    streams = sse_client(url, timeout=timeout_s, sse_read_timeout=timeout_s, httpx_client_factory=pinned)
    try:
        return await _initialize(stack, None, streams, timeout_s)
    except (Exception, BaseExceptionGroup):
        stream = sse.first.get("GET")
        if stream is None or 200 <= stream < 300:
            raise
        raise McpFailed(
            f"The URL speaks neither MCP transport: the streamable HTTP handshake was answered {handshake}, "
            f"the SSE stream {stream}."
        ) from None


async def _initialize(
    stack: AsyncExitStack,
    http: httpx2.AsyncClient | None,
    streams: AbstractAsyncContextManager[tuple[Any, Any]],
    timeout_s: float,
) -> ClientSession:
    """A session over `streams` (and `http`, entered first when the transport does not enter it), initialised;
    its exits handed to `stack` once it is, else every part of it closed."""
    async with AsyncExitStack() as attempt:
        if http is not None:
            await attempt.enter_async_context(http)
        read, write = await attempt.enter_async_context(streams)
        session = await attempt.enter_async_context(ClientSession(read, write, read_timeout_seconds=timeout_s))
        await session.initialize()
        stack.push_async_exit(attempt.pop_all())
        return session


def _describe(error: BaseException) -> str:
    if isinstance(error, McpFailed):
        return str(error)
    if isinstance(error, TimeoutError):
        return "The MCP server did not answer in time."
    if isinstance(error, BaseExceptionGroup):
        return _describe(error.exceptions[0])
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


async def list_tools(url: str, headers: dict[str, str], *, allowed: AllowedHosts, timeout_s: float) -> list[ListedTool]:
    """The server's tools (every page). McpFailed when it cannot be listed."""
    try:
        async with asyncio.timeout(timeout_s), _session(url, headers, allowed, timeout_s) as session:
            tools: list[ListedTool] = []
            cursor: str | None = None
            while True:
                page = await session.list_tools(params={"cursor": cursor} if cursor else None)  # type: ignore[arg-type]
                for tool in page.tools:
                    annotations = (
                        tool.annotations.model_dump(mode="json", exclude_none=True) if tool.annotations else None
                    )
                    tools.append(ListedTool(tool.name, tool.description, dict(tool.input_schema), annotations))
                cursor = page.next_cursor
                if not cursor:
                    return tools
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # the SDK raises groups from its task group
        if not isinstance(error, Exception | BaseExceptionGroup):
            raise
        raise McpFailed(f"Error retrieving tool list from MCP server: {_describe(error)}") from None


def _output_text(result: Any) -> str:
    """A call's content as text: text blocks joined; other blocks (and structured content alone) as JSON."""
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else json.dumps(block.model_dump(mode="json"), ensure_ascii=False))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


async def call_tool(
    url: str,
    headers: dict[str, str],
    name: str,
    arguments: dict[str, Any],
    *,
    allowed: AllowedHosts,
    timeout_s: float,
    max_output_bytes: int,
) -> str:
    """The tool's output as text. McpFailed when the call fails (the tool's own error included), takes longer
    than `timeout_s` or says more than `max_output_bytes`."""
    try:
        async with asyncio.timeout(timeout_s), _session(url, headers, allowed, timeout_s) as session:
            result = await session.call_tool(name, arguments)
    except asyncio.CancelledError:
        raise
    except BaseException as error:
        if not isinstance(error, Exception | BaseExceptionGroup):
            raise
        if isinstance(error, TimeoutError):
            raise McpFailed(f"The MCP tool '{name}' did not answer within {timeout_s:g} s.") from None
        raise McpFailed(f"The MCP tool '{name}' failed: {_describe(error)}") from None
    output = _output_text(result)
    if len(output.encode()) > max_output_bytes:
        raise McpFailed(f"The MCP tool '{name}' returned more than {max_output_bytes} bytes.")
    if result.is_error:
        raise McpFailed(output or f"The MCP tool '{name}' failed.", execution=True)
    return output
