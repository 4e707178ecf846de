"""Settings of the hosted tools the server runs: web_search's backends (file_search needs none: it searches the
caller's vector stores)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class HostedToolSettings(BaseSettings):
    web_search_searxng_url: str = Field(
        "",
        description="A SearXNG-compatible search endpoint (its /search URL, answering `format=json`) that the "
        "web_search tool queries, through the outbound guard (a private address must be in "
        "RESPONSES_OUTBOUND_ALLOWED_HOSTS). Empty, with no offline index either: web_search stays ignored.",
    )
    web_search_offline_store_id: str = Field(
        "",
        description="The vector store that is the offline web index (the Open Responses 'offline web search', "
        "`external_web_access: false`): its files are the pages, each with a `url` attribute (and a `title`), searched "
        "as file_search searches a store. Used when the request asks for no external access, or no SearXNG URL is set.",
    )
    web_search_offline_tenant: str = Field(
        "public",
        description="The tenant that owns the offline index's vector store: 'public' on an open server, "
        "'project:<project id>' for a project's (the operator fills it through that project's vector stores API).",
    )
    web_search_timeout_s: float = Field(10.0, gt=0, description="How long one web_search request may take.")
    web_search_max_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        description="The most a web_search answer (the backend's results, or a page opened) may send; a longer one "
        "fails that call.",
    )
