"""The job interface the services use, whatever runs the model: jobs in, events out, cancel signals."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from app.generation.types import GenerationOutput, SamplingParams
from app.observability.generation import job_telemetry


@dataclass(frozen=True, slots=True)
class GenerationJob:
    """Everything a generation needs. The prompt and the Response snapshot travel with the job, so a worker
    reads no history (and `store: false` jobs need no database at all).

    The job id is the response id: a retried enqueue cannot start two generations of one response.
    """

    response_id: str
    prompt_tokens: list[int]
    sampling: SamplingParams
    #: The Response as created (status queued), as JSON: the executor grows it into the final one.
    response: dict[str, Any]
    store: bool
    #: Persist every event (background + stream), so that GET ?stream=true can replay it from any node.
    keep_events: bool
    #: Whose request this is: the prefix cache and affinity routing never share state between tenants.
    tenant: str
    #: The served model's id (never an alias): the queue and the weights it runs on.
    model: str = ""
    #: Functions offered to the model, name -> namespace; their calls are read out of its text.
    functions: dict[str, str | None] = field(default_factory=dict)
    #: Which of those are custom tools (free-text input) rather than functions (JSON arguments).
    custom_tools: list[str] = field(default_factory=list)
    #: The model's (open, close) reasoning markers; its reasoning section becomes a reasoning item.
    reasoning_tags: tuple[str, str] | None = None
    #: include: ["reasoning.encrypted_content"]: hand the reasoning back for a stateless client to resend.
    encrypted_reasoning: bool = False
    #: parallel_tool_calls: false keeps only the first of several calls the model writes.
    parallel_tool_calls: bool = True
    #: Jobs with the same key likely share a prompt prefix (prompt_cache_key, or the chain's first response):
    #: distributed mode sends them to the worker that ran the last one, whose cache holds that prefix.
    affinity_key: str | None = None
    #: The conversation this response runs on: once it completes, `conversation_input` then its output are
    #: appended to it in the commit of its final state (store: false included, hence the items travel along).
    conversation_id: str | None = None
    conversation_input: list[dict[str, Any]] = field(default_factory=list)
    #: Output items that exist before the model speaks (a compaction item): sent first, kept first.
    leading_items: list[dict[str, Any]] = field(default_factory=list)
    #: The API already stored and sent `response.created` and `response.queued` (sequence numbers 0 and 1), so
    #: that a background stream's client knows the id before a worker takes the job; the worker's follow on.
    announced: bool = False
    #: The trace context, request id and queueing time of the request that made the job (see job_telemetry).
    telemetry: dict[str, Any] = field(default_factory=job_telemetry)

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> GenerationJob:
        tags = payload.get("reasoning_tags")
        return cls(
            **{
                # A job queued before jobs carried their tenant gets a scope of its own (it shares no cache).
                "tenant": f"job:{payload['response_id']}",
                # A job queued before jobs named their model: the one its Response names.
                "model": payload["response"].get("model", ""),
                **payload,
                "sampling": SamplingParams(**payload["sampling"]),
                "reasoning_tags": (tags[0], tags[1]) if tags else None,
            }
        )


@dataclass(frozen=True, slots=True)
class ModelAvailability:
    #: Processes that can run the model's jobs now (embedded mode: this one).
    live_workers: int
    #: Embedded mode: whether its weights are in memory now (None in distributed mode: each worker's own).
    loaded: bool | None = None
    #: Jobs waiting for one of those workers (None in embedded mode: its runner reports its own queue).
    waiting_jobs: int | None = None


class GenerationRun(Protocol):
    """A started generation: iterate it for text pieces then one Finish (or GenerationFailed)."""

    def outputs(self) -> AsyncIterator[GenerationOutput]: ...

    def cancel(self) -> None:
        """Ask the generation to stop; it does within about one token, then yields its Finish."""


class ModelRunner(Protocol):
    """Where the model runs: starts generations, one or a few at a time, and cancels them by response id."""

    def start(self, job: GenerationJob) -> GenerationRun: ...

    async def tokenize(self, model: str, text: str) -> list[int]:
        """Text `model` wrote, as its tokens: a takeover appends them to the prompt to continue."""

    def cancel(self, response_id: str) -> None: ...

    def loaded(self) -> set[str] | None:
        """The models in memory now; None where the runner does not load models on demand (it has its one)."""

    async def close(self) -> None: ...


class Subscription(Protocol):
    async def next(self, timeout_s: float) -> dict[str, Any] | None:
        """The next event, or None when none came within `timeout_s`."""

    async def close(self) -> None: ...


class EventBus(Protocol):
    """Live fan-out of one response's events (never the source of truth: the database is)."""

    async def publish(self, response_id: str, event: dict[str, Any]) -> None: ...

    async def subscribe(self, response_id: str) -> Subscription: ...


class GenerationQueue(Protocol):
    @property
    def bus(self) -> EventBus: ...

    async def enqueue(self, job: GenerationJob) -> None: ...

    async def cancel(self, response_id: str) -> None:
        """Signal whoever runs this response's generation to stop it."""

    async def requeue(self, job: GenerationJob, previous_owner: str | None) -> None:
        """Enqueue a job again (its worker died, or Redis lost it), clearing what the queue kept of its last run."""

    async def job_is_waiting(self, response_id: str) -> bool:
        """The job is queued or running here (False when the queue lost it)."""

    async def live_workers(self, model: str | None = None) -> int:
        """How many workers can run `model`'s jobs now (None: any model's)."""

    async def availability(self, models: Sequence[str]) -> dict[str, ModelAvailability]:
        """Per model: what can run its jobs now and what waits for them (/v1/models, the health routes, metrics)."""

    async def ping(self) -> None:
        """Raise if the queue's backing store (Redis) cannot be reached."""

    async def job_alive(self, response_id: str) -> bool:
        """Whether the job is still queued or held by a live worker: False once nothing can produce its events
        (its worker died, or it was lost with Redis). How a `store: false` stream learns that it will not end."""

    async def close(self) -> None: ...
