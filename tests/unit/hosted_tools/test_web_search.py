"""The web_search tool in a response, on the fake model: ignored with no backend (as before), through a
SearXNG-compatible endpoint on loopback (the outbound guard in the way), or through the offline index (a vector
store of pages); its action, allowed_domains, search_context_size, user_location, and url_citation annotations."""

from __future__ import annotations

import json

import httpx
import pytest

from app.config import Settings
from app.tenants.identity import tenant_of_key
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream
from tests.searxng_stub import SearchStub
from tests.unit.hosted_tools.conftest import store_with

RESULTS = [
    {
        "url": "https://tides.example.org/today",
        "title": "Tide tables",
        "content": "High tide at Pelican Point is at 14:05.",
    },
    {"url": "https://news.example.com/tides", "title": "Tide news", "content": "Tides are high this week."},
    {"url": "https://sub.tides.example.org/more", "title": "More tides", "content": "Low tide is at 20:10."},
]


def web_call(**arguments: str) -> str:
    return json.dumps({"name": "web_search", "arguments": arguments}).join(("<tool_call>", "</tool_call>"))


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


async def test_without_a_backend_web_search_stays_ignored(alpha: httpx.AsyncClient, runner: FakeRunner) -> None:
    reply = await alpha.post("/v1/responses", json={"input": "Tides?", "tools": [{"type": "web_search"}]})
    assert reply.status_code == 200
    assert reply.headers["x-llama-responses-ignored-tools"] == "web_search"
    assert [item["type"] for item in reply.json()["output"]] == ["message"]
    forced = {"input": "Tides?", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search_preview"}}
    assert_error(await alpha.post("/v1/responses", json=forced), 400, param="tool_choice.type")


@pytest.mark.settings(web="searxng")
async def test_a_search_through_searxng_is_cited_by_url_within_the_allowed_domains(
    alpha: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, stub: SearchStub
) -> None:
    stub.results = RESULTS
    rounds(runner, web_call(query="tide Pelican Point"), "High tide is at 14:05 [1].")
    tool = {
        "type": "web_search",
        "filters": {"allowed_domains": ["https://tides.example.org/"]},
        "search_context_size": "low",
        "user_location": {"type": "approximate", "country": "GB", "city": "London"},
    }
    reply = await alpha.post(
        "/v1/responses",
        json={
            "input": "When is high tide?",
            "tools": [tool],
            "tool_choice": {"type": "web_search_preview"},
            "include": ["web_search_call.action.sources"],
            "stream": True,
        },
    )
    assert "x-llama-responses-ignored-tools" not in reply.headers
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    call, message = final["output"]
    assert call["type"] == "web_search_call" and call["status"] == "completed"
    assert call["action"]["type"] == "search" and call["action"]["query"] == "tide Pelican Point"
    assert [source["url"] for source in call["action"]["sources"]] == [
        "https://tides.example.org/today",
        "https://sub.tides.example.org/more",
    ]
    text = message["content"][0]
    start = text["text"].index("[1]")
    assert text["annotations"] == [
        {
            "type": "url_citation",
            "url": "https://tides.example.org/today",
            "title": "Tide tables",
            "start_index": start,
            "end_index": start + 3,
        }
    ]
    kinds = [event["type"] for event in events]
    for kind in ("response.web_search_call.in_progress", "response.web_search_call.searching"):
        assert kind in kinds
    assert "response.web_search_call.completed" in kinds
    [(path, params)] = stub.requests
    assert path == "/search" and params["q"] == ["tide Pelican Point"] and params["format"] == ["json"]
    assert params["language"] == ["all-GB"]
    prompt = renderer.read(runner.jobs[1].prompt_tokens)
    assert "news.example.com" not in prompt and "[1] Tide tables <https://tides.example.org/today>" in prompt


@pytest.mark.settings(web="searxng")
async def test_an_opened_page_and_a_found_pattern_are_read_through_the_guard(
    alpha: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, stub: SearchStub
) -> None:
    stub.pages["/pages/tides"] = (
        "<html><body><h1>Tides</h1><p>Spring tides reach 6 metres at the harbour.</p></body></html>"
    )
    page = f"{stub.base_url}/pages/tides"
    rounds(runner, web_call(query="", url=page, pattern="spring tides"), "Six metres.")
    body = (
        await alpha.post(
            "/v1/responses", json={"input": "How high?", "tools": [{"type": "web_search"}], "tool_choice": "required"}
        )
    ).json()
    call = body["output"][0]
    assert call["action"] == {"type": "find_in_page", "url": page, "pattern": "spring tides"}
    assert call["status"] == "completed"
    assert "Spring tides reach 6 metres" in renderer.read(runner.jobs[1].prompt_tokens)
    # A page outside the allowed domains is not opened: the call fails, the model goes on.
    rounds(runner, web_call(query="", url=page), "I cannot open it.")
    tool = {"type": "web_search", "filters": {"allowed_domains": ["example.org"]}}
    body = (
        await alpha.post("/v1/responses", json={"input": "Open it", "tools": [tool], "tool_choice": "required"})
    ).json()
    assert body["output"][0]["status"] == "failed" and body["output"][0]["action"]["type"] == "open_page"
    assert [path for path, _ in stub.requests] == ["/pages/tides"]


@pytest.mark.settings(web="searxng", outbound_allowed_hosts="")
async def test_a_backend_the_outbound_guard_refuses_fails_the_call(
    alpha: httpx.AsyncClient, runner: FakeRunner, stub: SearchStub
) -> None:
    stub.results = RESULTS
    rounds(runner, web_call(query="tides"), "No answer.")
    body = (
        await alpha.post(
            "/v1/responses", json={"input": "Tides?", "tools": [{"type": "web_search"}], "tool_choice": "required"}
        )
    ).json()
    assert body["status"] == "completed"
    assert body["output"][0]["type"] == "web_search_call" and body["output"][0]["status"] == "failed"
    assert stub.requests == []


async def test_the_offline_index_answers_a_search_without_external_access(
    alpha: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer, hosted_settings: Settings, stub: SearchStub
) -> None:
    store, _ = await store_with(
        alpha,
        {
            "tides.html": (
                "<p>High tide at Pelican Point is at 14:05.</p>",
                {"url": "https://tides.example.org/today", "title": "Tide tables"},
            ),
            "garden.txt": (
                "The botanical garden opens at nine.",
                {"url": "https://garden.example.com/", "title": "Garden"},
            ),
            "notes.txt": ("Tide notes without a page address.", None),
        },
    )
    # The operator's index: a store of the `alpha` key's tenant, named in the settings (SearXNG configured too).
    hosted_settings.web_search_offline_store_id = store
    hosted_settings.web_search_offline_tenant = tenant_of_key(b"alpha")
    hosted_settings.web_search_searxng_url = stub.search_url
    rounds(runner, web_call(query="high tide Pelican Point"), "At 14:05 [1].")
    tool = {"type": "web_search", "external_web_access": False}
    body = (
        await alpha.post(
            "/v1/responses",
            json={
                "input": "High tide?",
                "tools": [tool],
                "tool_choice": "required",
                "include": ["web_search_call.action.sources"],
            },
        )
    ).json()
    call, message = body["output"]
    assert call["action"]["sources"] == [{"type": "url", "url": "https://tides.example.org/today"}]
    assert message["content"][0]["annotations"][0]["url"] == "https://tides.example.org/today"
    assert stub.requests == []  # no external access
    assert "Tide notes" not in renderer.read(runner.jobs[1].prompt_tokens)


async def test_offline_search_needs_an_index(
    alpha: httpx.AsyncClient, hosted_settings: Settings, stub: SearchStub
) -> None:
    hosted_settings.web_search_searxng_url = stub.search_url
    tool = {"type": "web_search", "external_web_access": False}
    reply = await alpha.post("/v1/responses", json={"input": "x", "tools": [tool]})
    assert_error(reply, 400, param="tools[0].external_web_access")
