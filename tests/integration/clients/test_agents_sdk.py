"""A real agent client: the OpenAI Agents SDK's hosted tools, `FileSearchTool` and `WebSearchTool`, against the
embedded server and the shipped model. The SDK runs in a virtualenv of its own (it pins websockets below the
version the server's tests use), built once per machine under ~/.cache; the agent is a script run there."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.testing.databases import sqlite_url
from app.testing.servers import ServerProcess
from tests.searxng_stub import SearchStub, search_stub

pytestmark = pytest.mark.integration

AGENTS_PACKAGE = "openai-agents==0.24.0"
AGENTS_VENV = Path.home() / ".cache" / "llama-responses" / "agents-sdk-0.24.0"
TIDES = {
    "url": "https://tides.example.org/pelican-point",
    "title": "Pelican Point tides",
    "content": "High tide at Pelican Point is at 14:05 today.",
}

#: Runs in the SDK's virtualenv: an uploaded file in a store, then one agent a hosted tool, each forced (the model
#: is small); prints what each run's items were, as JSON. 512 output tokens: the SDK raises on a response cut short,
#: and the small model may write past a hundred.
AGENT = r"""
import asyncio, json, sys

from agents import (
    Agent, FileSearchTool, ModelSettings, OpenAIResponsesModel, Runner, WebSearchTool, set_tracing_disabled,
)
from openai import AsyncOpenAI

LIGHTHOUSE = b"Pelican Point lighthouse: the lighthouse keeper is Ada Morrow. The lamp is lit at dusk.\n"


def items(result):
    return [
        {"type": item.type, "raw": item.raw_item.model_dump(mode="json")} for item in result.new_items
    ]


async def main(base_url):
    set_tracing_disabled(True)
    client = AsyncOpenAI(api_key="unused", base_url=base_url + "/v1", max_retries=0, timeout=600)
    model = OpenAIResponsesModel(model=(await client.models.list()).data[0].id, openai_client=client)
    uploaded = await client.files.create(file=("lighthouse.txt", LIGHTHOUSE), purpose="assistants")
    store = await client.vector_stores.create(name="docs")
    attached = await client.vector_stores.files.create_and_poll(
        file_id=uploaded.id, vector_store_id=store.id, poll_interval_ms=100
    )
    assert attached.status == "completed", attached.last_error
    librarian = Agent(
        name="librarian",
        instructions="Answer from the files, in one short sentence.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=512, tool_choice="file_search"),
        tools=[FileSearchTool(vector_store_ids=[store.id], max_num_results=3, include_search_results=True)],
    )
    searcher = Agent(
        name="searcher",
        instructions="Answer from the web, in one short sentence.",
        model=model,
        model_settings=ModelSettings(temperature=0, max_tokens=512, tool_choice="web_search_preview"),
        tools=[WebSearchTool(search_context_size="low")],
    )
    file_run = await Runner.run(librarian, "Who is the lighthouse keeper at Pelican Point?")
    web_run = await Runner.run(searcher, "When is high tide at Pelican Point today?")
    print(json.dumps({"file_id": uploaded.id, "file": items(file_run), "web": items(web_run),
                      "file_answer": file_run.final_output, "web_answer": web_run.final_output}))


asyncio.run(main(sys.argv[1]))
"""


def agents_python() -> Path:
    """The SDK's virtualenv's python, made once per machine; a failed install fails the test (never a skip)."""
    python = AGENTS_VENV / "bin" / "python"
    if not (AGENTS_VENV / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(AGENTS_VENV)], check=True, timeout=300)
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", AGENTS_PACKAGE],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert installed.returncode == 0, f"could not install {AGENTS_PACKAGE}: {installed.stderr[-2000:]}"
        (AGENTS_VENV / ".installed").touch()
    return python


@pytest.fixture(scope="module")
def stub() -> Iterator[SearchStub]:
    with search_stub() as running:
        running.results = [TIDES]
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, stub: SearchStub) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("agents-sdk-server")
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
        "RESPONSES_WEB_SEARCH_SEARXNG_URL": stub.search_url,
        "RESPONSES_VECTOR_INDEX_POLL_S": "0.2",
    }
    running = ServerProcess(env, directory / "server.log").start()
    yield running
    running.stop()


def test_the_agents_sdk_s_file_search_and_web_search_tools_run_on_the_server(
    server: ServerProcess, stub: SearchStub
) -> None:
    python = agents_python()
    ran = subprocess.run(
        [str(python), "-c", AGENT, server.base_url], capture_output=True, text=True, timeout=900, check=False
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    report: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])

    file_calls = [item["raw"] for item in report["file"] if item["raw"]["type"] == "file_search_call"]
    assert len(file_calls) == 1 and file_calls[0]["status"] == "completed", report["file"]
    assert file_calls[0]["queries"] and file_calls[0]["results"], file_calls[0]
    assert file_calls[0]["results"][0]["file_id"] == report["file_id"]
    assert report["file"][-1]["type"] == "message_output_item" and report["file_answer"], report["file"]

    web_calls = [item["raw"] for item in report["web"] if item["raw"]["type"] == "web_search_call"]
    assert len(web_calls) == 1 and web_calls[0]["status"] == "completed", report["web"]
    assert web_calls[0]["action"]["type"] == "search"
    assert any(path == "/search" for path, _ in stub.requests), stub.requests
    assert report["web"][-1]["type"] == "message_output_item" and report["web_answer"], report["web"]
