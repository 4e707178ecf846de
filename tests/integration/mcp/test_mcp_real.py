"""The `mcp` tool on the real model (the shipped model, in-process, SQLite) against a real MCP server on loopback:
a forced call whose output reaches the response, streamed well formed and stored."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from app.testing.databases import sqlite_url
from app.testing.mcp_server import tool_server
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        database_url=sqlite_url(tmp_path), n_threads=1, outbound_allowed_hosts="127.0.0.1", _env_file=None
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as http:
            yield http


async def test_a_forced_call_s_output_reaches_the_answer(client: httpx.AsyncClient) -> None:
    async with tool_server() as server:
        tool = {
            "type": "mcp",
            "server_label": "calc",
            "server_url": server.url,
            "allowed_tools": ["add"],
            "require_approval": "never",
        }
        body = {
            "input": "What is 1234 + 4321? Use the add tool, then answer with the number only.",
            "tools": [tool],
            "tool_choice": {"type": "mcp", "server_label": "calc", "name": "add"},
            "temperature": 0,
            "max_output_tokens": 96,
            "stream": True,
        }
        reply = await client.post("/v1/responses", json=body)
        assert reply.status_code == 200, reply.text
        final = assert_well_formed_stream(parse_sse(reply.text))
        kinds = [item["type"] for item in final["output"]]
        assert kinds[:2] == ["mcp_list_tools", "mcp_call"], final["output"]
        call = final["output"][1]
        assert call["status"] == "completed", call
        arguments = json.loads(call["arguments"])
        assert server.calls == [("add", arguments)]
        assert call["output"] == str(arguments["a"] + arguments["b"])
        # The model went on from the result in the same response (not forced again), its prefix reused.
        assert final["status"] == "completed" and kinds[-1] == "message", final["output"]
        assert final["usage"]["input_tokens_details"]["cached_tokens"] > 0
        assert final["usage"]["input_tokens"] > 0
        stored = (await client.get(f"/v1/responses/{final['id']}")).json()
        assert [item["type"] for item in stored["output"]] == kinds
