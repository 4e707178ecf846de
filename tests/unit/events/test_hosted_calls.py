"""The hosted calls' items, events and citations (app/events/hosted_calls.py), pure: what the API shows of a call
as far as it got, the results the model reads numbered across calls, and the annotations an answer gets."""

from __future__ import annotations

import json

from app.events.hosted_calls import (
    WebResult,
    citations,
    closing_events,
    file_search_output,
    for_prompt,
    hosted_item,
    opening_events,
    sources,
    web_search_output,
)
from app.schemas.hosted_items import FileSearchResult, StoredFileSearchCall, StoredWebSearchCall, WebSearchAction
from app.schemas.items import StoredMcpCall

RESULTS = [
    FileSearchResult(file_id="file_a", filename="a.txt", score=0.9, text="The keeper is Ada Morrow of Pelican Point."),
    FileSearchResult(file_id="file_b", filename="b.txt", score=0.5, text="Gardens open at nine."),
]


def file_call(status: str = "completed", *, keep: bool = True) -> StoredMcpCall:
    output = file_search_output(["keeper"], RESULTS, keep_results=keep) if status == "completed" else None
    return StoredMcpCall(
        id="fs_1",
        server_label="hosted:file_search",
        name="file_search",
        arguments='{"query": "keeper"}',
        output=output,
        status=status,  # type: ignore[arg-type]
    )


def web_call(status: str = "completed") -> StoredMcpCall:
    action = WebSearchAction(type="search", query="tides")
    pages = [WebResult("https://tides.example.org/", "Tides", "High tide at 14:05.")]
    return StoredMcpCall(
        id="ws_1",
        server_label="hosted:web_search",
        name="web_search",
        arguments='{"query": "tides"}',
        output=web_search_output(action, pages, keep_sources=True) if status == "completed" else None,
        status=status,  # type: ignore[arg-type]
    )


def counter() -> object:
    numbers = iter(range(100))
    return lambda: next(numbers)


def test_a_call_is_shown_as_its_sdk_item_as_far_as_it_got() -> None:
    opened = hosted_item(file_call("in_progress"))
    assert isinstance(opened, StoredFileSearchCall)
    assert (opened.status, opened.queries, opened.results) == ("in_progress", ["keeper"], None)
    done = hosted_item(file_call())
    assert isinstance(done, StoredFileSearchCall) and done.results == RESULTS
    assert hosted_item(file_call(keep=False)).results is None  # type: ignore[union-attr]
    web = hosted_item(web_call())
    assert isinstance(web, StoredWebSearchCall)
    assert web.model_dump(mode="json")["action"] == {
        "type": "search",
        "query": "tides",
        "sources": [{"type": "url", "url": "https://tides.example.org/"}],
    }
    # The SDK's web_search_call has no `incomplete`: a search a worker's death cut short is failed.
    assert hosted_item(web_call("incomplete")).status == "failed"


def test_a_call_s_events_are_its_tool_s() -> None:
    number = counter()
    kinds = [event.type for event in opening_events(file_call("in_progress"), 0, number)]  # type: ignore[arg-type]
    assert kinds == [
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
    ]
    kinds = [event.type for event in closing_events(web_call(), 1, number)]  # type: ignore[arg-type]
    assert kinds == ["response.web_search_call.completed", "response.output_item.done"]
    failed = web_call("failed")
    assert [event.type for event in closing_events(failed, 1, number)] == ["response.output_item.done"]  # type: ignore[arg-type]


def test_results_are_numbered_across_the_calls_of_a_response() -> None:
    items = [file_call().model_dump(mode="json"), web_call().model_dump(mode="json")]
    rendered = for_prompt(items)
    assert rendered[0]["output"].startswith("[1] a.txt\nThe keeper is Ada Morrow")
    assert "[2] b.txt" in rendered[0]["output"]
    assert rendered[1]["output"].startswith("[3] Tides <https://tides.example.org/>")
    assert json.loads(items[0]["output"])["queries"] == ["keeper"], "the stored call is left as it was"
    empty = file_call()
    empty.output = file_search_output(["keeper"], [], keep_results=True)
    assert for_prompt([empty.model_dump(mode="json")])[0]["output"] == "No results found."


def test_markers_cite_their_results_and_an_answer_without_any_cites_the_files_it_repeats() -> None:
    found = sources([file_call(), web_call()])
    text = "Ada Morrow [1, 3] keeps it; gardens [2]; nothing [9]."
    assert citations(text, found) == [
        {"type": "file_citation", "file_id": "file_a", "filename": "a.txt", "index": 11},
        {
            "type": "url_citation",
            "url": "https://tides.example.org/",
            "title": "Tides",
            "start_index": 11,
            "end_index": 17,
        },
        {"type": "file_citation", "file_id": "file_b", "filename": "b.txt", "index": text.index("[2]")},
    ]
    repeated = "The keeper at Pelican Point is Ada Morrow."
    assert citations(repeated, found) == [
        {"type": "file_citation", "file_id": "file_a", "filename": "a.txt", "index": len(repeated)}
    ]
    assert citations("Nothing to do with it.", found) == []
