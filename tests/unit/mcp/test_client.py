"""The MCP client against a real server on loopback (streamable HTTP, or SSE as the fallback): the address checked
and pinned, bounds kept, failures reported as McpFailed (never raised past it); and a request's mcp tools parsed and
redacted."""

from __future__ import annotations

import pytest

from app.mcp.client import McpFailed, call_tool, list_tools
from app.mcp.servers import McpServer, McpSetup, parse_request_servers, redacted
from app.outbound.addresses import AllowedHosts
from app.secrets.sealer import ContentSealer
from app.testing.mcp_server import plain_http_server, tool_server

LOOPBACK = AllowedHosts.parse("127.0.0.1")


async def test_lists_and_calls_through_the_checked_address() -> None:
    async with tool_server() as server:
        named = server.url.replace("127.0.0.1", "localhost")
        tools = await list_tools(named, {"x-test": "1"}, allowed=AllowedHosts.parse("localhost"), timeout_s=5)
        assert {tool.name for tool in tools} == {"add", "echo", "slow", "broken"}
        output = await call_tool(
            named,
            {},
            "add",
            {"a": 1, "b": 2},
            allowed=AllowedHosts.parse("localhost"),
            timeout_s=5,
            max_output_bytes=100,
        )
        assert output == "3"
        assert all(request["host"].startswith("localhost:") for request in server.headers), "the name kept in Host"
        assert server.headers[0]["x-test"] == "1"


async def test_a_refused_address_is_never_connected_to() -> None:
    async with tool_server() as server:
        with pytest.raises(McpFailed, match="not public"):
            await list_tools(server.url, {}, allowed=AllowedHosts(), timeout_s=5)
        with pytest.raises(McpFailed, match="not public"):
            await call_tool(server.url, {}, "add", {}, allowed=AllowedHosts(), timeout_s=5, max_output_bytes=9)
        assert server.headers == []


async def test_bounds_fail_the_call_not_the_caller() -> None:
    async with tool_server() as server:
        server.slow_s = 5
        with pytest.raises(McpFailed, match=r"within 0\.3 s"):
            await call_tool(server.url, {}, "slow", {}, allowed=LOOPBACK, timeout_s=0.3, max_output_bytes=100)
        with pytest.raises(McpFailed, match="more than 10 bytes"):
            await call_tool(
                server.url, {}, "echo", {"text": "x" * 11}, allowed=LOOPBACK, timeout_s=5, max_output_bytes=10
            )
        with pytest.raises(McpFailed) as failed:
            await call_tool(server.url, {}, "broken", {}, allowed=LOOPBACK, timeout_s=5, max_output_bytes=100)
        assert failed.value.execution


async def test_a_server_that_speaks_only_sse_is_used_through_the_sse_client() -> None:
    async with tool_server("sse") as server:
        named = server.url.replace("127.0.0.1", "localhost")
        allowed = AllowedHosts.parse("localhost")
        tools = await list_tools(named, {"x-test": "1"}, allowed=allowed, timeout_s=5)
        assert {tool.name for tool in tools} == {"add", "echo", "slow", "broken"}
        # The streamable handshake (a POST to the stream's URL) was refused; then the stream, then its messages.
        assert server.methods[:2] == ["POST", "GET"] and set(server.methods[2:]) == {"POST"}
        assert all(request["host"].startswith("localhost:") for request in server.headers), "the name kept in Host"
        assert all(request.get("x-test") == "1" for request in server.headers), "the headers on every request"
        output = await call_tool(named, {}, "add", {"a": 1, "b": 2}, allowed=allowed, timeout_s=5, max_output_bytes=9)
        assert output == "3" and server.calls == [("add", {"a": 1, "b": 2})]


async def test_the_sse_fallback_keeps_the_guard_and_the_bounds() -> None:
    async with tool_server("sse") as server:
        with pytest.raises(McpFailed, match="not public"):
            await list_tools(server.url, {}, allowed=AllowedHosts(), timeout_s=5)
        assert server.headers == []
        server.slow_s = 5
        with pytest.raises(McpFailed, match=r"within 0\.5 s"):
            await call_tool(server.url, {}, "slow", {}, allowed=LOOPBACK, timeout_s=0.5, max_output_bytes=100)
        with pytest.raises(McpFailed, match="more than 10 bytes"):
            await call_tool(
                server.url, {}, "echo", {"text": "x" * 11}, allowed=LOOPBACK, timeout_s=5, max_output_bytes=10
            )


async def test_a_server_that_speaks_neither_transport_fails_clearly() -> None:
    async with plain_http_server() as server:
        with pytest.raises(McpFailed, match=r"neither MCP transport.*answered 404, the SSE stream 404"):
            await list_tools(server.url, {"authorization": "Bearer secret"}, allowed=LOOPBACK, timeout_s=5)
        assert server.methods == ["POST", "GET"]
    # A refusal of this client (auth) is not a transport question: no second try, and no header in the message.
    async with plain_http_server(401) as server:
        with pytest.raises(McpFailed) as failed:
            await list_tools(server.url, {"authorization": "Bearer secret"}, allowed=LOOPBACK, timeout_s=5)
        assert "401" in str(failed.value) and "secret" not in str(failed.value)
        assert server.methods == ["POST"]


def test_request_servers_are_parsed_sealed_and_redacted() -> None:
    sealer = ContentSealer([b"k" * 32])
    tools = [
        {"type": "function", "name": "f"},
        {
            "type": "mcp",
            "server_label": "s",
            "server_url": "http://127.0.0.1:1/mcp",
            "headers": {"Authorization": "Bearer t"},
            "allowed_tools": {"tool_names": ["a"], "read_only": True},
        },
    ]
    (server,) = parse_request_servers(tools, allowed_hosts="127.0.0.1", sealer=sealer, tenant="ten")
    assert server.sealed_headers is not None and "Bearer" not in server.sealed_headers
    assert server.headers(sealer, "ten") == {"Authorization": "Bearer t"}
    assert server.tool_names == ["a"] and server.read_only
    assert redacted(tools[1])["headers"] == {"Authorization": "<redacted>"}
    setup = McpSetup(servers=[server], tools={"a": "s"}, prompt={"messages": []}, max_calls=3)
    assert McpSetup.from_payload(setup.to_payload()) == setup
    assert McpSetup.from_payload(setup.to_payload()).server("s") == McpServer(
        "s", "http://127.0.0.1:1/mcp", server.sealed_headers, ["a"], True
    )
