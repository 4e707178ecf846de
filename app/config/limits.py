"""Settings that bound what one request, one tenant or one batch may ask of the server."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class LimitSettings(BaseSettings):
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
    class_weight_interactive: int = Field(
        2,
        ge=1,
        le=100,
        description="Share of the model's turns that interactive work (a client waiting: foreground creates, "
        "WebSocket turns, compactions) gets while other classes wait too, weighed against the other classes' "
        "weights, for each tenant's jobs of the class: with the background weight equal, one tenant's flood of "
        "creates and another's background work take turns (see Scheduling).",
    )
    class_weight_background: int = Field(
        2,
        ge=1,
        le=100,
        description="Share of the model's turns that background work (`background: true`) gets while other classes "
        "wait too (as RESPONSES_CLASS_WEIGHT_INTERACTIVE).",
    )
    class_weight_batch: int = Field(
        1,
        ge=1,
        le=100,
        description="Share of the model's turns that batch lines get while other classes wait too (as "
        "RESPONSES_CLASS_WEIGHT_INTERACTIVE).",
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
