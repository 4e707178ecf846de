"""A request's hosted tools (file_search, web_search) at create: checked (a 400 naming the field; a 404 for a vector
store the caller's project does not have), offered to the model as functions, and what a job carries of them to
run their calls (plain JSON in the tool loop's setup)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.config import Settings
from app.db.session import Database
from app.errors import InvalidRequest, NotFound, validation_error
from app.generation.tool_calls import FunctionSpec
from app.retrieval import repository
from app.retrieval.filters import parse_filter
from app.schemas.hosted_items import (
    FILE_SEARCH_RESULTS_INCLUDE,
    WEB_SEARCH_RESULTS_INCLUDE,
    WEB_SEARCH_SOURCES_INCLUDE,
)
from app.schemas.tools import (
    FILE_SEARCH,
    FILE_SEARCH_DEFAULT_MAX_RESULTS,
    WEB_SEARCH,
    WEB_SEARCH_TYPES,
    hosted_label,
)

#: The longest query a call may write: a forced call's grammar holds it there (a small model, left to itself,
#: may never close the string).
MAX_QUERY_CHARS = 80
#: The most vector stores one file_search tool names (the stores searched on each call).
MAX_STORES = 16

FILE_SEARCH_FUNCTION = FunctionSpec(
    FILE_SEARCH,
    "Search the user's files for passages relevant to a query; the results are numbered passages to cite as [1].",
    {
        "type": "object",
        "properties": {"query": {"type": "string", "maxLength": MAX_QUERY_CHARS}},
        "required": ["query"],
    },
)
WEB_SEARCH_FUNCTION = FunctionSpec(
    WEB_SEARCH,
    "Search the web for pages about a query (or open the page at `url`, or find `pattern` in it); the results are "
    "numbered pages to cite as [1].",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "url": {"type": "string", "maxLength": 500},
            "pattern": {"type": "string", "maxLength": MAX_QUERY_CHARS},
        },
        "required": ["query"],
    },
)
#: search_context_size: how many results (and how much of each) the model reads.
CONTEXT_SIZES = {"low": (3, 600), "medium": (5, 1000), "high": (10, 1600)}


class HybridSearchParam(BaseModel):
    embedding_weight: float = Field(ge=0)
    text_weight: float = Field(ge=0)


class RankingOptionsParam(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ranker: Literal["none", "auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(0.0, ge=0, le=1)
    hybrid_search: HybridSearchParam | None = None


class FileSearchToolParam(BaseModel):
    """The SDK's FileSearchTool."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["file_search"]
    vector_store_ids: list[str] = Field(min_length=1, max_length=MAX_STORES)
    max_num_results: int = Field(FILE_SEARCH_DEFAULT_MAX_RESULTS, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: RankingOptionsParam | None = None


class UserLocation(BaseModel):
    type: Literal["approximate"] = "approximate"
    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None


class WebSearchFilters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowed_domains: list[str] | None = Field(None, max_length=100)


class WebSearchToolParam(BaseModel):
    """The SDK's WebSearchTool and WebSearchPreviewTool, with Open Responses' `external_web_access`."""

    model_config = ConfigDict(extra="forbid")
    type: str
    filters: WebSearchFilters | None = None
    search_context_size: Literal["low", "medium", "high"] = "medium"
    user_location: UserLocation | None = None
    external_web_access: bool | None = None


@dataclass(slots=True)
class HostedRequest:
    """What a create's hosted tools are: the functions offered (as (server_label, function), as MCP tools are),
    and each tool's configuration, which its calls run with (`config`: plain JSON, in the job)."""

    offered: list[tuple[str, FunctionSpec]] = field(default_factory=list)
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The tool types handled here (the others stay ignored).
    types: set[str] = field(default_factory=set)
    #: Where the file_search tool was sent (a 404 names its stores there).
    file_search_param: str = "tools"


def web_search_available(settings: Settings) -> bool:
    """Whether the operator configured a web_search backend (none: the tool stays ignored, as before)."""
    return bool(settings.web_search_searxng_url or settings.web_search_offline_store_id)


def _checked(model: type[BaseModel], value: Any, param: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        problem = validation_error(list(error.errors()))
        problem.param = f"{param}.{problem.param}" if problem.param else param
        raise problem from None


def _file_search(tool: dict[str, Any], param: str, includes: Sequence[str]) -> dict[str, Any]:
    parsed: FileSearchToolParam = _checked(FileSearchToolParam, tool, param)
    if parsed.filters is not None:
        try:
            parse_filter(parsed.filters)
        except ValueError as error:
            raise InvalidRequest(
                f"Invalid 'filters': {error}.", param=f"{param}.filters", code="invalid_value"
            ) from None
    ranking = parsed.ranking_options
    return {
        "vector_store_ids": list(dict.fromkeys(parsed.vector_store_ids)),
        "max_num_results": parsed.max_num_results,
        "filters": parsed.filters,
        "ranking_options": ranking.model_dump(exclude_none=True) if ranking is not None else None,
        "keep_results": FILE_SEARCH_RESULTS_INCLUDE in includes,
    }


def _domain(entry: str) -> str:
    """An allowed domain as hosts are compared with it: "https://www.Example.org/" is "example.org"."""
    host = entry.strip().lower().split("://", 1)[-1].split("/", 1)[0]
    return host.removeprefix("www.")


def _web_search(tool: dict[str, Any], param: str, includes: Sequence[str], settings: Settings) -> dict[str, Any]:
    parsed: WebSearchToolParam = _checked(WebSearchToolParam, tool, param)
    offline = parsed.external_web_access is False or not settings.web_search_searxng_url
    if offline and not settings.web_search_offline_store_id:
        raise InvalidRequest(
            "This server has no offline web index for a web_search without external access.",
            param=f"{param}.external_web_access",
            code="unsupported_parameter",
        )
    count, chars = CONTEXT_SIZES[parsed.search_context_size]
    sent = (parsed.filters.allowed_domains or []) if parsed.filters is not None else []
    domains = [_domain(entry) for entry in sent]
    return {
        "backend": "offline" if offline else "searxng",
        "allowed_domains": [domain for domain in domains if domain],
        "max_results": count,
        "max_chars": chars,
        "user_location": parsed.user_location.model_dump(exclude_none=True) if parsed.user_location else None,
        "keep_sources": WEB_SEARCH_SOURCES_INCLUDE in includes or WEB_SEARCH_RESULTS_INCLUDE in includes,
    }


def parse_hosted(
    tools: list[dict[str, Any]] | None, includes: Sequence[str] | None, settings: Settings
) -> HostedRequest:
    """The request's hosted tools this server runs: file_search always, web_search when its operator configured a
    backend; each type once (a 400 for a second)."""
    hosted = HostedRequest()
    for index, tool in enumerate(tools or []):
        kind = tool.get("type")
        if not isinstance(kind, str):
            continue  # not a tool of ours: the tools' own parsing answers its 400
        param = f"tools[{index}]"
        if kind == FILE_SEARCH:
            name, config = FILE_SEARCH, _file_search(tool, param, includes or [])
            function = FILE_SEARCH_FUNCTION
            hosted.file_search_param = f"{param}.vector_store_ids"
        elif kind in WEB_SEARCH_TYPES and web_search_available(settings):
            name, config = WEB_SEARCH, _web_search(tool, param, includes or [], settings)
            function = WEB_SEARCH_FUNCTION
        else:
            continue
        if name in hosted.config:
            raise InvalidRequest(
                f"Only one {name} tool may be given.", param=f"{param}.type", code="duplicate_tool_name"
            )
        hosted.config[name] = config
        hosted.offered.append((hosted_label(name), function))
        hosted.types.add(str(kind))
    return hosted


async def check_stores(hosted: HostedRequest, database: Database, tenant: str) -> None:
    """The file_search tool's vector stores are the caller's project's: a 404 naming the first that is not."""
    config = hosted.config.get(FILE_SEARCH)
    if config is None:
        return
    wanted = config["vector_store_ids"]
    async with database.read() as session:
        found = {store.id for store in await repository.stores_of(session, tenant, wanted)}
    for store_id in wanted:
        if store_id not in found:
            raise NotFound(f"No vector store found with id '{store_id}'.", param=hosted.file_search_param)
