"""Talking to one MCP server (the official `mcp` SDK's clients: streamable HTTP, or the older HTTP+SSE transport as
a fallback): list its tools, call one.

The fallback is the one the MCP specification describes for backwards compatibility: when the server answers the
streamable handshake (its `initialize` POST) with a 4xx that says "not here" (404, 405, 400...), the same URL is
opened as an SSE stream (GET) whose first event names where to POST. An auth refusal (401/403), a rate limit, a
server that is down or that times out, is not a transport question: no second try.

Every connection goes to the address app/outbound checked: the host is resolved once (`resolve`) and a transport
pinned to that address carries every request (the Host header and TLS SNI keep the name), so no DNS rebinding can
swap it between the check and the connection. No redirect leaves the server's origin (the SDK's own rule), no
proxy comes from the environment, and every exchange is bounded in time.

Bounded in size while it is read, too: the SDK reads an answer whole before parsing it (a 100 MB tool output raised
the server's memory by 434 MB before the size check refused it), so the transport counts every byte a session
receives and fails the session the moment its budget is spent: a call's output cap (six times it, as JSON may
escape a byte in six, plus the envelope), or RESPONSES_MCP_MAX_LIST_BYTES for a listing, whose pages and tools are
capped as well. What a server sent is never shown back past a short reason, and the SDK's own log lines about it
are one line each (`quiet_sdk_logs`), never a traceback carrying its body.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from app.outbound.addresses import AllowedHosts, IpAddress, OutboundRefused, check_url, resolve
from app.outbound.client import tls_context


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


#: JSON may write one byte of a tool's output in six (`\u00XX`); the session's handshake and envelope take the rest.
OUTPUT_ENCODING_FACTOR = 6
ENVELOPE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class ListBounds:
    """What a server's tool listing may take: pages (`tools/list` calls), tools, and bytes read in all."""

    max_pages: int = 32
    max_tools: int = 256
    max_bytes: int = 4 * 1024 * 1024


#: The settings' defaults (RESPONSES_MCP_MAX_LIST_*).
DEFAULT_LIST_BOUNDS = ListBounds()


class _AnswerTooLarge(httpx2.StreamError):
    """The session's byte budget is spent (raised inside the SDK's read, which turns it into a failed request)."""


class ByteBudget:
    """The bytes one session may read from its server, counted as they arrive over every response."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.read = 0

    @property
    def spent(self) -> bool:
        return self.read > self.limit

    def take(self, size: int) -> None:
        self.read += size
        if self.spent:
            raise _AnswerTooLarge(f"the MCP server sent more than {self.limit} bytes")


class _CappedStream(httpx2.AsyncByteStream):
    """A response body read through the session's budget: reading stops the moment it is spent."""

    def __init__(self, inner: httpx2.AsyncByteStream, budget: ByteBudget) -> None:
        self._inner = inner
        self._budget = budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._budget.take(len(chunk))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _OneLine(logging.Filter):
    """The SDK logs a server's bad answers with their traceback (a pydantic error quoting the body): as one line,
    the exception named and its message cut short, newlines escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message = f"{message} ({type(error).__name__}: {str(error)[:SDK_LOG_CHARS]})"
        record.msg = message.replace("\r", "\\r").replace("\n", "\\n")[: SDK_LOG_CHARS * 2]
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


#: How much of the SDK's message about a server's answer a log line keeps.
SDK_LOG_CHARS = 200
_ONE_LINE = _OneLine()


def quiet_sdk_logs() -> None:
    """Every `mcp` logger writes one line a record (idempotent; loggers are made when their modules are imported,
    which this module's imports have done)."""
    for name in [name for name in logging.root.manager.loggerDict if name == "mcp" or name.startswith("mcp.")]:
        target = logging.getLogger(name)
        if _ONE_LINE not in target.filters:
            target.addFilter(_ONE_LINE)


#: Answers to the streamable handshake that do not send a client to the SSE transport: the server is there and
#: speaks it, but refuses this client (auth, rate) or did not answer in time.
_NO_FALLBACK = frozenset({401, 403, 407, 408, 429})


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends every request to `address` (checked), whatever its URL's host says: the name stays in Host and SNI."""

    def __init__(self, address: IpAddress, host: str, budget: ByteBudget) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False, retries=0, verify=tls_context())
        self._address = address
        self._host = host
        self._budget = budget
        #: The status of the first answer to each method (a POST: the streamable handshake; a GET: the SSE stream).
        self.first: dict[str, int] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self._host:
            raise httpx2.ConnectError(f"refused a request to another host ({request.url.host})", request=request)
        if self._budget.spent and request.method != "DELETE":  # the session's closing DELETE still goes
            raise httpx2.ConnectError("refused: the session read all it may from this server", request=request)
        literal = f"[{self._address}]" if isinstance(self._address, ipaddress.IPv6Address) else str(self._address)
        request.url = request.url.copy_with(host=literal)
        if request.url.scheme == "https":
            request.extensions["sni_hostname"] = self._host
        response = await self._inner.handle_async_request(request)
        self.first.setdefault(request.method, response.status_code)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(response.stream, self._budget)
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
    url: str, headers: dict[str, str], allowed: AllowedHosts, timeout_s: float, budget: ByteBudget
) -> AsyncIterator[ClientSession]:
    """An initialised session with the server at `url`: streamable HTTP, else (see the module's doc) SSE; every
    byte it reads counted against `budget`."""
    quiet_sdk_logs()
    try:
        target = check_url(url, allowed)
        address = await resolve(target, allowed)
    except OutboundRefused as error:
        raise McpFailed(str(error)) from None
    async with AsyncExitStack() as stack:
        yield await _connect(stack, url, headers, _Pinning(address, target.host, budget), timeout_s)


@dataclass(frozen=True, slots=True)
class _Pinning:
    """The checked address a connection goes to, and the host name its requests keep."""

    address: IpAddress
    host: str
    budget: ByteBudget

    def client(self, headers: dict[str, str], timeout_s: float) -> tuple[httpx2.AsyncClient, _PinnedTransport]:
        transport = _PinnedTransport(self.address, self.host, self.budget)
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
    """Why an exchange failed, in a short line of our own: what the server sent is not quoted (a parse error's text
    carries its body); a JSON-RPC error the server answered keeps its message, cut short."""
    if isinstance(error, McpFailed):
        return str(error)
    if isinstance(error, TimeoutError):
        return "The MCP server did not answer in time."
    if isinstance(error, BaseExceptionGroup):
        return _describe(error.exceptions[0])
    if isinstance(error, MCPError):
        if error.code == types.PARSE_ERROR:
            return "the server's answer is not valid MCP (JSON-RPC)."
        return f"the server answered error {error.code}: {_one_line(error.message)}"
    if isinstance(error, httpx2.ProtocolError | ValidationError):
        return f"the server's answer is not valid ({type(error).__name__})."
    message = _one_line(str(error))
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())[:SDK_LOG_CHARS]


async def list_tools(
    url: str,
    headers: dict[str, str],
    *,
    allowed: AllowedHosts,
    timeout_s: float,
    bounds: ListBounds = DEFAULT_LIST_BOUNDS,
) -> list[ListedTool]:
    """The server's tools, every page (`tools/list` with the cursor each page names), within `bounds`. McpFailed when
    it cannot be listed, or passes a bound (refused whole: a listing cut short would hide tools at random)."""
    budget = ByteBudget(bounds.max_bytes)
    try:
        async with asyncio.timeout(timeout_s), _session(url, headers, allowed, timeout_s, budget) as session:
            return await _every_page(session, bounds)
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # the SDK raises groups from its task group
        if not isinstance(error, Exception | BaseExceptionGroup):
            raise
        if budget.spent:
            raise McpFailed(
                f"Error retrieving tool list from MCP server: it sent more than {bounds.max_bytes} bytes."
            ) from None
        raise McpFailed(f"Error retrieving tool list from MCP server: {_describe(error)}") from None


async def _every_page(session: ClientSession, bounds: ListBounds) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(bounds.max_pages):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        if len(tools) + len(page.tools) > bounds.max_tools:
            raise McpFailed(f"it lists more than {bounds.max_tools} tools.")
        for tool in page.tools:
            annotations = tool.annotations.model_dump(mode="json", exclude_none=True) if tool.annotations else None
            tools.append(ListedTool(tool.name, tool.description, dict(tool.input_schema), annotations))
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise McpFailed(f"its tool list goes on past {bounds.max_pages} pages.")


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
    than `timeout_s` or says more than `max_output_bytes` (the answer's bytes counted as they arrive: a far longer
    one is refused once its first OUTPUT_ENCODING_FACTOR times the cap are read, never read whole)."""
    budget = ByteBudget(max_output_bytes * OUTPUT_ENCODING_FACTOR + ENVELOPE_BYTES)
    try:
        async with asyncio.timeout(timeout_s), _session(url, headers, allowed, timeout_s, budget) as session:
            result = await session.call_tool(name, arguments)
    except asyncio.CancelledError:
        raise
    except BaseException as error:
        if not isinstance(error, Exception | BaseExceptionGroup):
            raise
        if budget.spent:
            raise McpFailed(f"The MCP tool '{name}' returned more than {max_output_bytes} bytes.") from None
        if isinstance(error, TimeoutError):
            raise McpFailed(f"The MCP tool '{name}' did not answer within {timeout_s:g} s.") from None
        raise McpFailed(f"The MCP tool '{name}' failed: {_describe(error)}") from None
    output = _output_text(result)
    if len(output.encode()) > max_output_bytes:
        raise McpFailed(f"The MCP tool '{name}' returned more than {max_output_bytes} bytes.")
    if result.is_error:
        raise McpFailed(output or f"The MCP tool '{name}' failed.", execution=True)
    return output
