"""The file_search tool in a response, on the fake model: the model's call searched in the caller's stores between
two rounds, the file_search_call item and its events, the results only when the create asked, the answer's
file_citation annotations, the tool's options, and a 404 for another project's store."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream
from tests.unit.hosted_tools.conftest import store_with

LIGHTHOUSE = "The lighthouse keeper of Pelican Point is named Ada Morrow; she lights the lamp at dusk."
GARDEN = "The botanical garden opens at nine and closes at five, except on Mondays."


def search_call(query: str) -> str:
    return json.dumps({"name": "file_search", "arguments": {"query": query}}).join(("<tool_call>", "</tool_call>"))


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


def file_search(store: str, **fields: Any) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [store], **fields}


async def test_a_forced_search_is_answered_with_its_results_cited_in_one_stream(
    alpha: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    store, files = await store_with(alpha, {"lighthouse.txt": (LIGHTHOUSE, None), "garden.txt": (GARDEN, None)})
    rounds(runner, search_call("lighthouse keeper"), "The keeper is Ada Morrow [1].")
    reply = await alpha.post(
        "/v1/responses",
        json={
            "input": "Who keeps the lighthouse?",
            "tools": [file_search(store)],
            "tool_choice": {"type": "file_search"},
            "include": ["file_search_call.results"],
            "stream": True,
        },
    )
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    call, message = final["output"]
    assert call["type"] == "file_search_call" and call["status"] == "completed"
    assert call["queries"] == ["lighthouse keeper"]
    assert call["results"][0]["file_id"] == files["lighthouse.txt"]
    assert call["results"][0]["filename"] == "lighthouse.txt" and "Ada Morrow" in call["results"][0]["text"]
    assert all(result["file_id"] != files["garden.txt"] for result in call["results"])
    text = message["content"][0]
    assert text["text"] == "The keeper is Ada Morrow [1]."
    assert text["annotations"] == [
        {"type": "file_citation", "file_id": files["lighthouse.txt"], "filename": "lighthouse.txt", "index": 25}
    ]
    kinds = [event["type"] for event in events]
    for kind in (
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_text.annotation.added",
    ):
        assert kind in kinds, kind
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    # The model read the results numbered, after its own call, and the forced call was forced once.
    assert len(runner.jobs) == 2 and runner.jobs[1].sampling.grammar is None
    second_prompt = renderer.read(runner.jobs[1].prompt_tokens)
    assert "[1] lighthouse.txt" in second_prompt and "Ada Morrow" in second_prompt
    stored = (await alpha.get(f"/v1/responses/{final['id']}")).json()
    assert stored["output"][0]["type"] == "file_search_call"
    assert stored["output"][1]["content"][0]["annotations"] == text["annotations"]


async def test_results_are_kept_only_when_the_create_asks_and_an_answer_without_markers_is_cited_by_its_words(
    alpha: httpx.AsyncClient, runner: FakeRunner
) -> None:
    store, files = await store_with(alpha, {"lighthouse.txt": (LIGHTHOUSE, None)})
    answer = "The lighthouse keeper is named Ada Morrow."
    rounds(runner, search_call("lighthouse"), answer)
    body = (
        await alpha.post(
            "/v1/responses",
            json={"input": "Who?", "tools": [file_search(store)], "tool_choice": {"type": "file_search"}},
        )
    ).json()
    call, message = body["output"]
    assert call["type"] == "file_search_call" and call["queries"] == ["lighthouse"] and call["results"] is None
    assert message["content"][0]["annotations"] == [
        {
            "type": "file_citation",
            "file_id": files["lighthouse.txt"],
            "filename": "lighthouse.txt",
            "index": len(answer),
        }
    ]
    assert body["usage"]["input_tokens"] > 0


async def test_max_num_results_and_filters_reach_the_search(alpha: httpx.AsyncClient, runner: FakeRunner) -> None:
    store, files = await store_with(
        alpha,
        {
            "a.txt": ("Lamp oil for the lighthouse is stored in the north shed.", {"team": "north"}),
            "b.txt": ("Lighthouse lamp lenses are cleaned every week.", {"team": "south"}),
        },
    )
    tool = file_search(store, max_num_results=1, filters={"type": "eq", "key": "team", "value": "south"})
    rounds(runner, search_call("lighthouse lamp"), "Weekly.")
    body = (
        await alpha.post(
            "/v1/responses",
            json={
                "input": "How often?",
                "tools": [tool],
                "tool_choice": {"type": "file_search"},
                "include": ["file_search_call.results"],
            },
        )
    ).json()
    results = body["output"][0]["results"]
    assert [result["file_id"] for result in results] == [files["b.txt"]]
    assert results[0]["attributes"] == {"team": "south"}


async def test_the_response_echoes_the_tool_with_the_options_it_searched_with(
    alpha: httpx.AsyncClient, runner: FakeRunner
) -> None:
    """Open Responses' FileSearchTool requires max_num_results, ranking_options and filters in a Response's tools
    (its suite's file-search test fails the response on `tools.0` without them); what was sent is kept."""
    store, _ = await store_with(alpha, {"lighthouse.txt": (LIGHTHOUSE, None)})
    rounds(runner, search_call("lighthouse keeper"), "Ada.", search_call("keeper"), "Ada.")
    bare = (
        await alpha.post(
            "/v1/responses",
            json={"input": "Who?", "tools": [file_search(store)], "tool_choice": {"type": "file_search"}},
        )
    ).json()
    assert bare["tools"] == [
        {
            "type": "file_search",
            "vector_store_ids": [store],
            "max_num_results": 10,
            "filters": None,
            "ranking_options": {"ranker": "auto", "score_threshold": 0.0},
        }
    ]
    sent = file_search(
        store,
        max_num_results=3,
        filters={"type": "eq", "key": "team", "value": "north"},
        ranking_options={"score_threshold": 0.25},
    )
    body = (
        await alpha.post(
            "/v1/responses", json={"input": "Who?", "tools": [sent], "tool_choice": {"type": "file_search"}}
        )
    ).json()
    assert body["tools"] == [{**sent, "ranking_options": {"ranker": "auto", "score_threshold": 0.25}}]
    assert (await alpha.get(f"/v1/responses/{body['id']}")).json()["tools"] == body["tools"]


async def test_another_project_s_store_is_a_404_and_bad_options_are_400s(
    alpha: httpx.AsyncClient, beta: httpx.AsyncClient, runner: FakeRunner
) -> None:
    store, _ = await store_with(alpha, {"lighthouse.txt": (LIGHTHOUSE, None)})
    reply = await beta.post("/v1/responses", json={"input": "Who?", "tools": [file_search(store)]})
    assert_error(reply, 404, param="tools[0].vector_store_ids")
    assert runner.jobs == []
    bad_filter = file_search(store, filters={"type": "near", "key": "x", "value": 1})
    reply = await alpha.post("/v1/responses", json={"input": "x", "tools": [bad_filter]})
    assert_error(reply, 400, param="tools[0].filters")
    too_many = file_search(store, max_num_results=51)
    reply = await alpha.post("/v1/responses", json={"input": "x", "tools": [too_many]})
    assert_error(reply, 400, param="tools[0].max_num_results")
    no_stores = {"type": "file_search", "vector_store_ids": []}
    reply = await alpha.post("/v1/responses", json={"input": "x", "tools": [no_stores]})
    assert_error(reply, 400, param="tools[0].vector_store_ids")
    unforced = {"input": "x", "tools": [], "tool_choice": {"type": "file_search"}}
    assert_error(await alpha.post("/v1/responses", json=unforced), 400, param="tool_choice.type")


async def test_a_stateless_client_resends_the_call_as_input_and_the_model_reads_only_the_answer(
    alpha: httpx.AsyncClient, runner: FakeRunner, renderer: FakeRenderer
) -> None:
    store, _ = await store_with(alpha, {"lighthouse.txt": (LIGHTHOUSE, None)})
    rounds(runner, search_call("lighthouse"), "Ada Morrow [1].", "She lights it at dusk.")
    tools = [file_search(store)]
    first = (
        await alpha.post(
            "/v1/responses",
            json={"input": "Who?", "tools": tools, "tool_choice": {"type": "file_search"}, "store": False},
        )
    ).json()
    history = [{"role": "user", "content": "Who?"}, *first["output"], {"role": "user", "content": "When?"}]
    second = await alpha.post("/v1/responses", json={"input": history, "tools": tools})
    assert second.status_code == 200, second.text
    prompt = renderer.read(runner.jobs[-1].prompt_tokens)
    assert "Ada Morrow [1]." in prompt and "lighthouse keeper of Pelican Point" not in prompt
    bad = {"type": "web_search_call", "id": "ws_1", "status": "completed"}  # no action
    reply = await alpha.post("/v1/responses", json={"input": [{"role": "user", "content": "x"}, bad]})
    assert_error(reply, 400, param="input[1].action")
