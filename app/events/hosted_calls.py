"""The hosted tools' calls (file_search, web_search) as the tool loop makes them and as the API shows them.

Inside a response's tool loop a hosted call is an MCP call under a label no MCP server can have
(app/schemas/tools.py's `hosted:` labels), so that it is recorded, replayed after a takeover and cancelled as one;
its `output` is the JSON payload this module reads (what was searched, what was found, what the create asked to
keep). Everywhere the API shows it, it is the SDK's item of its type (`file_search_call`, `web_search_call`) with
its own events; the model reads its results numbered, and the answer's citations point at those numbers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.schemas.events import HostedCallEvent, OutputItemEvent, ResponseEvent
from app.schemas.hosted_items import (
    FileSearchResult,
    StoredFileSearchCall,
    StoredWebSearchCall,
    WebSearchAction,
    WebSearchSource,
    file_citation,
    url_citation,
)
from app.schemas.items import Item, StoredMcpCall
from app.schemas.tools import FILE_SEARCH, WEB_SEARCH, hosted_tool_of

Number = Callable[[], int]
#: The id prefix of each hosted tool's call (its item's id).
HOSTED_ID_PREFIXES = {FILE_SEARCH: "fs", WEB_SEARCH: "ws"}
HostedItem = StoredFileSearchCall | StoredWebSearchCall
#: A citation as the model writes it: the number of a result in brackets ("[2]", or "[1, 3]").
_MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_WORD = re.compile(r"[^\W_]{4,}")
#: An answer with no marker cites a file it shares at least this many words (of 4 letters or more) with.
MIN_SHARED_WORDS = 3
CITE_HINT = "Cite a result by its number in brackets, as [1]."


def is_hosted(item: Item | dict[str, Any]) -> bool:
    label = item.get("server_label") if isinstance(item, dict) else getattr(item, "server_label", None)
    kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
    return kind == "mcp_call" and isinstance(label, str) and hosted_tool_of(label) is not None


def file_search_output(queries: Sequence[str], results: Sequence[FileSearchResult], *, keep_results: bool) -> str:
    """A file_search call's output in the loop: its queries, its results, and whether the item shows them."""
    found = [result.model_dump(mode="json") for result in results]
    return json.dumps({"queries": list(queries), "results": found, "keep_results": keep_results})


@dataclass(frozen=True, slots=True)
class WebResult:
    url: str
    title: str
    text: str


def web_search_output(action: WebSearchAction, results: Sequence[WebResult], *, keep_sources: bool) -> str:
    """A web_search call's output in the loop: its action, the pages found (or opened), whether to show them."""
    found = [{"url": result.url, "title": result.title, "text": result.text} for result in results]
    return json.dumps({"action": action.model_dump(exclude_none=True), "results": found, "keep_sources": keep_sources})


def _payload(call: StoredMcpCall) -> dict[str, Any]:
    if call.status != "completed" or not call.output:
        return {}
    try:
        parsed = json.loads(call.output)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _arguments(call: StoredMcpCall) -> dict[str, Any]:
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def queries_of(arguments: dict[str, Any]) -> list[str]:
    """The queries a file_search call asks (`query`, or `queries` as the SDK's item names them)."""
    queries = arguments.get("queries")
    if isinstance(queries, list):
        return [query for query in queries if isinstance(query, str) and query.strip()]
    query = arguments.get("query")
    return [query] if isinstance(query, str) and query.strip() else []


def action_of(arguments: dict[str, Any]) -> WebSearchAction:
    """A web_search call's action: find_in_page (url and pattern), open_page (url), else search (query)."""
    url, pattern, query = arguments.get("url"), arguments.get("pattern"), arguments.get("query")
    if isinstance(url, str) and url and isinstance(pattern, str) and pattern:
        return WebSearchAction(type="find_in_page", url=url, pattern=pattern)
    if isinstance(url, str) and url:
        return WebSearchAction(type="open_page", url=url)
    return WebSearchAction(type="search", query=query if isinstance(query, str) else "")


_STATUS = {"in_progress": "in_progress", "completed": "completed", "failed": "failed", "incomplete": "incomplete"}


def hosted_item(call: StoredMcpCall) -> HostedItem:
    """The SDK's item for a hosted call, as far as it got."""
    status = _STATUS.get(call.status, "failed")
    payload = _payload(call)
    if hosted_tool_of(call.server_label) == FILE_SEARCH:
        queries = payload.get("queries") or queries_of(_arguments(call))
        results = None
        if payload.get("keep_results"):
            results = [FileSearchResult.model_validate(result) for result in payload.get("results", [])]
        return StoredFileSearchCall(id=call.id, status=status, queries=queries, results=results)
    action = WebSearchAction.model_validate(payload["action"]) if "action" in payload else action_of(_arguments(call))
    if action.type == "search" and payload.get("keep_sources"):
        action.sources = [WebSearchSource(url=result["url"]) for result in payload.get("results", [])]
    # NOTE: the SDK's web_search_call has no `incomplete` status: a search a worker's death cut short is `failed`.
    web_status = "failed" if status == "incomplete" else status
    return StoredWebSearchCall(id=call.id, status=web_status, action=action)


def shown(items: Sequence[Item]) -> list[Item]:
    """Output items as the API shows them: the hosted calls as their SDK items."""
    return [hosted_item(item) if isinstance(item, StoredMcpCall) and is_hosted(item) else item for item in items]


def _kind(call: StoredMcpCall) -> str:
    return f"{hosted_tool_of(call.server_label)}_call"


def opening_events(call: StoredMcpCall, index: int, number: Number) -> list[ResponseEvent]:
    """A hosted call, sent to its backend: added (in progress), in progress, searching."""
    item_id = call.id
    return [
        OutputItemEvent(
            type="response.output_item.added", sequence_number=number(), output_index=index, item=hosted_item(call)
        ),
        HostedCallEvent(
            type=f"response.{_kind(call)}.in_progress", sequence_number=number(), item_id=item_id, output_index=index
        ),
        HostedCallEvent(
            type=f"response.{_kind(call)}.searching", sequence_number=number(), item_id=item_id, output_index=index
        ),
    ]


def closing_events(call: StoredMcpCall, index: int, number: Number) -> list[ResponseEvent]:
    """A hosted call's end: completed (the SDK has no failed event for these: the item's status says so), done."""
    events: list[ResponseEvent] = []
    if call.status == "completed":
        events.append(
            HostedCallEvent(
                type=f"response.{_kind(call)}.completed", sequence_number=number(), item_id=call.id, output_index=index
            )
        )
    events.append(
        OutputItemEvent(
            type="response.output_item.done", sequence_number=number(), output_index=index, item=hosted_item(call)
        )
    )
    return events


# What the model reads, and what its answer cites ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    """A numbered result the model was shown: a file's chunk (file_id, filename) or a page (url, title)."""

    number: int
    text: str
    file_id: str | None = None
    filename: str | None = None
    url: str | None = None
    title: str | None = None


def _sources_of(call: StoredMcpCall, first: int) -> list[Source]:
    payload = _payload(call)
    sources = []
    for offset, result in enumerate(payload.get("results", [])):
        if "file_id" in result:
            sources.append(
                Source(first + offset, result["text"], file_id=result["file_id"], filename=result["filename"])
            )
        else:
            sources.append(Source(first + offset, result["text"], url=result["url"], title=result.get("title") or ""))
    return sources


def sources(items: Sequence[Item | dict[str, Any]]) -> list[Source]:
    """Every result the response's hosted calls showed the model, numbered from 1 across them, in order."""
    found: list[Source] = []
    for item in items:
        if is_hosted(item):
            call = item if isinstance(item, StoredMcpCall) else StoredMcpCall.model_validate(item)
            found += _sources_of(call, len(found) + 1)
    return found


def _shown_to_model(source: Source) -> str:
    if source.file_id is not None:
        return f"[{source.number}] {source.filename}\n{source.text}"
    return f"[{source.number}] {source.title} <{source.url}>\n{source.text}"


def for_prompt(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items as the next round's prompt renders them: a hosted call's output is its results, numbered."""
    rendered: list[dict[str, Any]] = []
    count = 0
    for item in items:
        if is_hosted(item) and item.get("status") == "completed":
            numbered = _sources_of(StoredMcpCall.model_validate(item), count + 1)
            count += len(numbered)
            text = "\n\n".join(_shown_to_model(source) for source in numbered)
            item = {**item, "output": f"{text}\n\n{CITE_HINT}" if numbered else "No results found."}
        rendered.append(item)
    return rendered


def citations(text: str, found: Sequence[Source]) -> list[dict[str, Any]]:
    """The annotations of an answer given after searches: a citation where it cites a result by its number; with
    no such marker, a file_citation at its end for each file it shares words with (MIN_SHARED_WORDS)."""
    by_number = {source.number: source for source in found}
    annotations: list[dict[str, Any]] = []
    for marker in _MARKER.finditer(text):
        for number in (int(part) for part in marker.group(1).split(",")):
            source = by_number.get(number)
            if source is None:
                continue
            if source.file_id is not None:
                annotations.append(file_citation(source.file_id, source.filename or "", marker.start()))
            else:
                annotations.append(url_citation(source.url or "", source.title or "", marker.start(), marker.end()))
    if annotations or not text:
        return annotations
    # NOTE: small models seldom write markers; an answer that repeats a result's words cites its file at the end,
    # as hosted's citations stand after the text they support. Pages are cited only where the model says so.
    said = {word.lower() for word in _WORD.findall(text)}
    cited: set[str] = set()
    for source in found:
        if source.file_id is None or source.file_id in cited:
            continue
        if len(said & {word.lower() for word in _WORD.findall(source.text)}) >= MIN_SHARED_WORDS:
            cited.add(source.file_id)
            annotations.append(file_citation(source.file_id, source.filename or "", len(text)))
    return annotations
