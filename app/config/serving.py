"""Settings of where a server keeps its state, who may call it and what it shows."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, NoDecode


class ServingSettings(BaseSettings):
    database_url: str = Field(
        "sqlite+aiosqlite:///./llama-responses.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://...",
    )
    redis_url: str | None = Field(
        None, description="Redis URL: set, distributed mode; unset, embedded mode (generation in the server process)."
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bootstrap API keys: each is its own tenant, sees only its own data, and acts as "
        "an admin. Keys made with `llama-responses keys create` are kept in the database instead. Neither: an open "
        "server.",
    )
    key_cache_ttl_s: float = Field(
        5.0,
        ge=0,
        le=300,
        description="Seconds an API node trusts what it last read of a database key (valid, revoked, unknown): a "
        "revoked key stops working on every node within this time. 0: read the database on every request.",
    )
    read_cache_mb: float = Field(
        64.0,
        ge=0,
        description="MB of finished responses' JSON each API node keeps for GET /v1/responses/{id} (and the "
        "list's rows), each under the stored row's updated_at. 0: off.",
    )
    read_cache_staleness_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description="On Postgres, where every change of a response is notified to each API node (LISTEN/NOTIFY), "
        "the seconds a read cache entry is answered without asking the database: a change shows in a GET as soon "
        "as its notification arrives (milliseconds after its commit), and never later than this after it, even "
        "when a notification is lost. While the notifications are down (the listening connection lost, SQLite) "
        "every read checks the row's updated_at instead. 0: every read checks.",
    )
    public_docs: bool = Field(
        False,
        description="Serve /docs, /redoc and /openapi.json without a key on a keyed server (by default they need "
        "one, like /v1).",
    )
    strict_params: bool = Field(
        False, description="Reject request fields the Responses API does not define (400 unknown_parameter)."
    )
    strict_tools: bool = Field(
        False,
        description="Reject the hosted tool types this server does not run (code_interpreter, ..., web_search with no "
        "backend) with a 400 instead of leaving them out.",
    )
    secret_key: str | None = Field(
        None,
        description="Secret that encrypts compaction items, the same on every node; comma-separated to rotate (the "
        "first encrypts, all decrypt). Default: a random key generated once and kept in the database.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as plain text (for a terminal) or one JSON object a line with the request id, "
        "response id, tenant label and model (for a log pipeline); uvicorn's access log included.",
    )
    metrics_public: bool = Field(
        False, description="Serve /metrics without a key on a keyed server (for a scraper on a private network)."
    )
    metrics_max_tenants: int = Field(
        100,
        ge=0,
        le=10000,
        description="How many tenants the per-tenant Prometheus counters name, per process (the first ones seen); "
        'the others are counted as tenant="other", so that the series stay bounded. Bootstrap keys\' tenants '
        'are labelled "bootstrap".',
    )
