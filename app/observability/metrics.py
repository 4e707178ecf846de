"""The Prometheus metrics of every process (API node, worker, embedded server), and their exposition.

Defined once at import, as prometheus-client intends: counters must outlive any one app or request. With
PROMETHEUS_MULTIPROC_DIR set (before the process starts), several processes serving one port (uvicorn
--workers, gunicorn) share their values through that folder, and an exposition sums them.
"""

from __future__ import annotations

import os
import threading

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

PREFIX = "llama_responses"
REGISTRY = CollectorRegistry(auto_describe=True)

#: Request latencies: fast reads (ms) up to long foreground generations (minutes).
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
TOKENS_PER_S_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)
WAIT_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

HTTP_REQUESTS = Counter(
    f"{PREFIX}_http_requests_total",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    f"{PREFIX}_http_request_duration_seconds",
    "From a request's arrival to the end of its reply (a stream's last event included).",
    ["method", "route"],
    buckets=LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
TIME_TO_FIRST_TOKEN = Histogram(
    f"{PREFIX}_time_to_first_token_seconds",
    "From a response's creation to its first generated text (queue wait and prefill included).",
    ["model"],
    buckets=TTFT_BUCKETS_S,
    registry=REGISTRY,
)
TOKENS_PER_SECOND = Histogram(
    f"{PREFIX}_output_tokens_per_second",
    "Decode speed of one generation: output tokens over the time from its first token to its end.",
    ["model"],
    buckets=TOKENS_PER_S_BUCKETS,
    registry=REGISTRY,
)
RESPONSES = Counter(
    f"{PREFIX}_responses_total",
    "Generations ended, by final status (completed, incomplete, failed, cancelled).",
    ["model", "status"],
    registry=REGISTRY,
)
WEBSOCKET_CONNECTIONS = Counter(
    f"{PREFIX}_websocket_connections_total",
    "WebSocket mode connections accepted (GET /v1/responses upgraded): an agent should hold one a session.",
    registry=REGISTRY,
)
PROMPT_TOKENS = Counter(f"{PREFIX}_prompt_tokens_total", "Prompt tokens read.", ["model"], registry=REGISTRY)
OUTPUT_TOKENS = Counter(f"{PREFIX}_output_tokens_total", "Tokens generated.", ["model"], registry=REGISTRY)
QUEUE_DEPTH = Gauge(
    f"{PREFIX}_queue_depth",
    "Generation jobs in the queue waiting for a worker (API nodes, read from Redis at each scrape).",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="max",
)
QUEUE_WAIT = Histogram(
    f"{PREFIX}_queue_wait_seconds",
    "From a response's creation to a worker (or the embedded server) starting its generation.",
    ["model"],
    buckets=WAIT_BUCKETS_S,
    registry=REGISTRY,
)
ACTIVE_SEQUENCES = Gauge(
    f"{PREFIX}_active_sequences",
    "Sequences of the model decoding now.",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
FREE_SEQUENCES = Gauge(
    f"{PREFIX}_free_sequences",
    "Sequences of the model free for another generation.",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
SEQUENCE_WAITING_JOBS = Gauge(
    f"{PREFIX}_sequence_waiting_jobs",
    "Generation jobs a runner (a worker, or the embedded server) has taken and that wait for a free sequence.",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
PREFIX_CACHE_HITS = Counter(
    f"{PREFIX}_prefix_cache_hits_total",
    "Generations that reused KV state of an earlier prompt (a shared prefix).",
    ["model"],
    registry=REGISTRY,
)
PREFIX_CACHE_REUSED_TOKENS = Counter(
    f"{PREFIX}_prefix_cache_reused_tokens_total",
    "Prompt tokens not read again thanks to reused KV state.",
    ["model"],
    registry=REGISTRY,
)
PREFIX_CACHE_BYTES = Gauge(
    f"{PREFIX}_prefix_cache_bytes",
    "Memory held by saved KV states for prefix reuse.",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
MODEL_MEMORY_BYTES = Gauge(
    f"{PREFIX}_model_memory_bytes",
    "Memory a loaded model takes in this process: its weights (part=weights) and its context's KV cache "
    "(part=kv_cache, as sized at load: the window layers' to the window unless RESPONSES_KV_SWA_FULL).",
    ["model", "part"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
MODEL_WORKERS = Gauge(
    f"{PREFIX}_model_workers",
    "Processes that can run the model's jobs now (workers serving it; 1 in embedded mode), as of the last scrape.",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="max",
)
MODEL_LOADED = Gauge(
    f"{PREFIX}_model_loaded",
    "Embedded mode: 1 while the model's weights are in memory (models load on first use and may be unloaded).",
    ["model"],
    registry=REGISTRY,
    multiprocess_mode="max",
)
WORKER_HEARTBEATS = Counter(
    f"{PREFIX}_worker_heartbeats_total", "Heartbeats a worker wrote to Redis.", registry=REGISTRY
)
WORKERS = Gauge(
    f"{PREFIX}_workers",
    "Workers alive (registered, heartbeat fresh) as of the last scrape; 1 in embedded mode.",
    registry=REGISTRY,
    multiprocess_mode="max",
)
DATABASE_ERRORS = Counter(
    f"{PREFIX}_database_errors_total", "Database statements that raised (outages included).", registry=REGISTRY
)
REDIS_ERRORS = Counter(
    f"{PREFIX}_redis_errors_total",
    "Redis failures this process handled: a request refused for want of the queue, an event not published, a "
    "worker's failed poll, a metrics scrape that could not read the queue.",
    registry=REGISTRY,
)

WEBHOOK_DELIVERED = Counter(
    f"{PREFIX}_webhook_deliveries_delivered_total",
    "Webhook deliveries a receiver accepted (a 2xx answer).",
    registry=REGISTRY,
)
WEBHOOK_FAILED = Counter(
    f"{PREFIX}_webhook_deliveries_failed_total",
    "Webhook deliveries given up: retried for the whole retry window, or their endpoint was disabled or deleted.",
    registry=REGISTRY,
)
WEBHOOK_RETRIES = Counter(
    f"{PREFIX}_webhook_retries_total",
    "Webhook attempts that failed (no answer, a non-2xx answer, an address refused) and will be tried again.",
    registry=REGISTRY,
)
WEBHOOK_LAG = Histogram(
    f"{PREFIX}_webhook_delivery_lag_seconds",
    "From an event's creation (its object's end) to the receiver accepting it, retries included.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400, 259200),
    registry=REGISTRY,
)

TENANT_REQUESTS = Counter(
    f"{PREFIX}_tenant_requests_total",
    "Generations ended, by tenant (at most RESPONSES_METRICS_MAX_TENANTS tenants by name, the rest as 'other').",
    ["tenant"],
    registry=REGISTRY,
)
TENANT_INPUT_TOKENS = Counter(
    f"{PREFIX}_tenant_input_tokens_total",
    "Prompt tokens read, by tenant (labelled as in llama_responses_tenant_requests_total).",
    ["tenant"],
    registry=REGISTRY,
)
TENANT_OUTPUT_TOKENS = Counter(
    f"{PREFIX}_tenant_output_tokens_total",
    "Tokens generated, by tenant (labelled as in llama_responses_tenant_requests_total).",
    ["tenant"],
    registry=REGISTRY,
)
TENANT_QUEUED_JOBS = Gauge(
    f"{PREFIX}_tenant_queued_jobs",
    "Generation jobs waiting for a worker (not yet running), by tenant (labelled as in "
    "llama_responses_tenant_requests_total) and class (interactive, background, batch), summed over the models: "
    "embedded mode's waiting rooms, or distributed mode's model queues (API nodes, read from Redis at each scrape).",
    ["tenant", "job_class"],
    registry=REGISTRY,
    # Set at each scrape from the queue itself, so the latest process to be scraped knows best (a tenant whose
    # jobs all left reads 0 there, while another process may still hold its older count).
    multiprocess_mode="mostrecent",
)

#: The label of every tenant past the cap.
OTHER_TENANTS = "other"
#: The label of every bootstrap key's tenant (RESPONSES_API_KEYS).
BOOTSTRAP_TENANTS = "bootstrap"
DEFAULT_MAX_TENANT_LABELS = 100


class TenantLabels:
    """The `tenant` label of the per-tenant counters, with bounded cardinality: the first `limit` tenants this
    process counts keep their own label, every later one is `other` (a Prometheus series a label value, forever).

    NOTE: a bootstrap key's tenant ("key:" + its SHA-256) is labelled `bootstrap`, not by name: metrics travel to
    systems with their own access rules (Prometheus, dashboards), and the hash of an operator-chosen key can be
    checked against guesses offline. Project tenants ("project:" + a random id) and the open server's `public`
    carry no secret. The usage API (admins only across tenants) tells bootstrap keys apart."""

    def __init__(self, limit: int = DEFAULT_MAX_TENANT_LABELS) -> None:
        self.limit = limit
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def label(self, tenant: str) -> str:
        if tenant.startswith("key:"):
            return BOOTSTRAP_TENANTS
        with self._lock:
            if tenant in self._named:
                return tenant
            if len(self._named) < self.limit:
                self._named.add(tenant)
                return tenant
        return OTHER_TENANTS


#: This process's labels: the cap is set from the settings at start-up (limit_tenant_labels).
TENANT_LABELS = TenantLabels()


def tenant_label(tenant: str) -> str:
    return TENANT_LABELS.label(tenant)


def limit_tenant_labels(limit: int) -> None:
    """RESPONSES_METRICS_MAX_TENANTS, applied by each process as it starts (tenants already named keep theirs)."""
    TENANT_LABELS.limit = limit


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposed_registry() -> CollectorRegistry:
    """This process's metrics, or those of every process sharing PROMETHEUS_MULTIPROC_DIR, summed."""
    if multiprocess_dir() is None:
        return REGISTRY
    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined)  # type: ignore[no-untyped-call]
    return combined


def exposition() -> tuple[bytes, str]:
    """The Prometheus text format and its content type."""
    return generate_latest(exposed_registry()), CONTENT_TYPE_LATEST


def defined_names() -> set[str]:
    """Every series name the registry exposes (a histogram's _bucket, _sum and _count included)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names
