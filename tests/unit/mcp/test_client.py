"""The MCP client against a real server on loopback (streamable HTTP, or SSE as the fallback): the address checked
and pinned, bounds kept, failures reported as McpFailed (never raised past it); and a request's mcp tools parsed and
redacted."""

from __future__ import annotations

import logging

import pytest

from app.errors import InvalidRequest
from app.mcp.client import ListBounds, McpFailed, call_tool, list_tools
from app.mcp.servers import McpServer, McpSetup, parse_request_servers, redacted
from app.outbound.addresses import AllowedHosts
from app.secrets.sealer import ContentSealer
from app.testing.mcp_server import plain_http_server, tool_server

LOOPBACK = AllowedHosts.parse("127.0.0.1:*")


async def test_lists_and_calls_through_the_checked_address() -> None:
    async with tool_server() as server:
        named = server.url.replace("127.0.0.1", "localhost")
        tools = await list_tools(named, {"x-test": "1"}, allowed=AllowedHosts.parse("localhost:*"), timeout_s=5)
        assert {tool.name for tool in tools} == {"add", "echo", "slow", "broken"}
        output = await call_tool(
            named,
            {},
            "add",
            {"a": 1, "b": 2},
            allowed=AllowedHosts.parse("localhost:*"),
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
        allowed = AllowedHosts.parse("localhost:*")
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
    (server,) = parse_request_servers(tools, allowed_hosts="127.0.0.1:*", sealer=sealer, tenant="ten")
    assert server.sealed_headers is not None and "Bearer" not in server.sealed_headers
    assert server.headers(sealer, "ten") == {"Authorization": "Bearer t"}
    assert server.tool_names == ["a"] and server.read_only
    assert redacted(tools[1])["headers"] == {"Authorization": "<redacted>"}
    setup = McpSetup(servers=[server], tools={"a": "s"}, prompt={"messages": []}, max_calls=3)
    assert McpSetup.from_payload(setup.to_payload()) == setup
    assert McpSetup.from_payload(setup.to_payload()).server("s") == McpServer(
        "s", "http://127.0.0.1:1/mcp", server.sealed_headers, ["a"], True
    )


async def test_a_server_that_pages_its_tool_list_is_listed_whole() -> None:
    """A real MCPServer whose `tools/list` pages (3 tools a page): every page is asked for with the cursor the last
    one named. Before, a paging server failed for everyone: the cursor went to the SDK as a dict."""
    async with tool_server(extra_tools=10) as server:
        server.page_size = 3
        tools = await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=5)
    assert len(tools) == 14 and len({tool.name for tool in tools}) == 14
    assert {f"tool_{index}" for index in range(10)} <= {tool.name for tool in tools}
    assert server.list_cursors == [None, "3", "6", "9", "12"]


async def test_a_tool_list_past_its_pages_or_tools_fails_that_listing() -> None:
    async with tool_server(extra_tools=10) as server:
        server.page_size, server.endless_pages = 1, True
        with pytest.raises(McpFailed, match="goes on past 4 pages"):
            await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=5, bounds=ListBounds(max_pages=4))
        assert len(server.list_cursors) == 4
        server.page_size, server.endless_pages = 5, False
        with pytest.raises(McpFailed, match="more than 12 tools"):
            await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=5, bounds=ListBounds(max_tools=12))
        assert (
            len(await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=5, bounds=ListBounds(max_tools=14))) == 14
        )


async def test_answers_without_end_are_cut_while_they_are_read() -> None:
    """A tool output, and a tool description, that never end: refused once their bytes pass the bound, as they are
    read (before, the SDK read an answer whole: a 100 MB output raised the server's memory by 434 MB first, and
    one without end was read until the call's timeout)."""
    async with tool_server() as server:
        server.flood = ("tools/call", None)
        with pytest.raises(McpFailed, match="'echo' returned more than 1000 bytes"):
            await call_tool(
                server.url, {}, "echo", {"text": "x"}, allowed=LOOPBACK, timeout_s=30, max_output_bytes=1000
            )
        server.flood = ("tools/list", None)
        with pytest.raises(McpFailed, match="sent more than 65536 bytes"):
            await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=30, bounds=ListBounds(max_bytes=65536))
        # A long output within the bound still arrives whole (a tool the server does not list: no output schema).
        server.flood = ("tools/call", 5000)
        output = await call_tool(server.url, {}, "unlisted", {}, allowed=LOOPBACK, timeout_s=30, max_output_bytes=5000)
        assert output == "x" * 5000


async def test_the_sse_transport_reads_through_the_same_budget() -> None:
    """The older transport's answers come on its long-lived stream: counted there alike (here a real tool's long
    answer, 200 KB for a cap of 1,000 bytes, refused once about 70 KB of it has arrived)."""
    async with tool_server("sse") as server:
        with pytest.raises(McpFailed, match="'echo' returned more than 1000 bytes"):
            await call_tool(
                server.url, {}, "echo", {"text": "y" * 200_000}, allowed=LOOPBACK, timeout_s=30, max_output_bytes=1000
            )
        assert (
            await call_tool(server.url, {}, "add", {"a": 1, "b": 2}, allowed=LOOPBACK, timeout_s=30, max_output_bytes=9)
            == "3"
        )


async def test_a_hostile_servers_answer_is_one_log_line_and_never_shown_back(caplog: pytest.LogCaptureFixture) -> None:
    """Garbage where a JSON-RPC answer should be: the SDK logs it (with a traceback quoting the body, before); here
    one line per record, and the client's message names the failure without the body."""
    body = b'{"not": "json-rpc", "secret": "db-banner-\\n-line two"}'
    async with tool_server() as server:
        server.garbage = ("tools/call", body)
        with caplog.at_level(logging.DEBUG, logger="mcp"), pytest.raises(McpFailed) as failed:
            await call_tool(server.url, {}, "echo", {"text": "x"}, allowed=LOOPBACK, timeout_s=5, max_output_bytes=99)
        server.garbage = ("tools/list", body)
        with pytest.raises(McpFailed) as listing:
            await list_tools(server.url, {}, allowed=LOOPBACK, timeout_s=5)
    for message in (str(failed.value), str(listing.value)):
        assert "not valid MCP" in message and "secret" not in message and "banner" not in message
    records = [record for record in caplog.records if record.name.startswith("mcp")]
    assert any("Error parsing JSON response" in record.getMessage() for record in records)
    for record in records:
        assert record.exc_info is None and "\n" not in record.getMessage(), record.getMessage()
        assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "url",
    ["https://mcp.example.com/mcp\r\nX-Injected: 1", "https://mcp.example.com/\x00", "https://mcp.example.com/\tx"],
)
def test_a_server_url_with_control_characters_is_a_400_naming_it(url: str) -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "mcp", "server_label": "s", "server_url": url}]
    with pytest.raises(InvalidRequest) as refused:
        parse_request_servers(tools, allowed_hosts="", sealer=ContentSealer([b"k" * 32]), tenant="ten")
    assert refused.value.param == "tools[1].server_url" and refused.value.code == "invalid_url"
    assert "control characters" in refused.value.message
