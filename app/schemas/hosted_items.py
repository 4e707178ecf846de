"""The items of the hosted tools this server runs (file_search, web_search), named and shaped as the SDK's
ResponseFileSearchToolCall and ResponseFunctionWebSearch, and the citations their answers carry (the SDK's
output_text annotations)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from app.schemas.item_ids import ClientId

FILE_SEARCH_RESULTS_INCLUDE = "file_search_call.results"
WEB_SEARCH_SOURCES_INCLUDE = "web_search_call.action.sources"
WEB_SEARCH_RESULTS_INCLUDE = "web_search_call.results"


class FileSearchResult(BaseModel):
    file_id: str
    filename: str
    score: float
    text: str
    attributes: dict[str, Any] | None = None


class StoredFileSearchCall(BaseModel):
    """A file_search the server ran for the model: its queries, and its results when the create asked for them
    (include: ["file_search_call.results"]); None otherwise, as hosted."""

    model_config = ConfigDict(extra="allow")
    id: ClientId
    type: Literal["file_search_call"] = "file_search_call"
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"] = "completed"
    queries: list[str]
    results: list[FileSearchResult] | None = None


class WebSearchSource(BaseModel):
    type: Literal["url"] = "url"
    url: str


class WebSearchAction(BaseModel):
    """The SDK's ActionSearch, ActionOpenPage or ActionFind, by `type`: search (query, sources when asked for),
    open_page (url), find_in_page (url, pattern)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["search", "open_page", "find_in_page"]
    query: str | None = None
    sources: list[WebSearchSource] | None = None
    url: str | None = None
    pattern: str | None = None

    @model_serializer(mode="wrap")
    def _only_its_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Each action type has its own fields: those another type has (None here) are left out, as hosted does.
        dumped: dict[str, Any] = handler(self)
        return {name: value for name, value in dumped.items() if value is not None}


class StoredWebSearchCall(BaseModel):
    """A web_search the server ran for the model through its operator's backend (the SDK's
    ResponseFunctionWebSearch)."""

    model_config = ConfigDict(extra="allow")
    id: ClientId
    type: Literal["web_search_call"] = "web_search_call"
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"] = "completed"
    action: WebSearchAction


def file_citation(file_id: str, filename: str, index: int) -> dict[str, Any]:
    """The SDK's AnnotationFileCitation: `index` is where in the text the citation stands."""
    return {"type": "file_citation", "file_id": file_id, "filename": filename, "index": index}


def url_citation(url: str, title: str, start_index: int, end_index: int) -> dict[str, Any]:
    """The SDK's AnnotationURLCitation: the span of the text that cites `url`."""
    return {"type": "url_citation", "url": url, "title": title, "start_index": start_index, "end_index": end_index}
