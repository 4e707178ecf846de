"""GenerationJob: one response's generation as every layer hands it on: the API makes it, a transport carries
it, the job execution runs it, a model runner generates from it. Its priority class, and the fair order waiting
jobs are served in (FairOrder)."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Literal, TypeVar

from app.generation.types import SamplingParams
from app.observability.job_context import job_telemetry

#: How urgent a job is, most urgent first: a client waits for an interactive one (a foreground create, stream or
#: JSON, a WebSocket turn, a compaction it asked for); nobody waits for a background one (`background: true`) but
#: its client polls; batch work is the least urgent. Waiting jobs are served in this order, then fairly between
#: tenants (FairOrder).
JobClass = Literal["interactive", "background", "batch"]
JOB_CLASSES: tuple[JobClass, ...] = ("interactive", "background", "batch")

T = TypeVar("T")


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
    #: Which are client-executed tool types (shell, apply_patch...), named after their type.
    tool_types: list[str] = field(default_factory=list)
    #: The model's (open, close) reasoning markers; its reasoning section becomes a reasoning item.
    reasoning_tags: tuple[str, str] | None = None
    #: The model family whose syntax its output is read in (app/generation/dialects; a job queued before jobs
    #: named it: our convention's).
    dialect: str = "hermes"
    #: The prompt ended by opening the reasoning section (the template's generation prompt did): the output
    #: starts inside it.
    reasoning_open: bool = False
    #: Each offered function's top-level parameters' JSON types, for syntaxes that write arguments as text.
    parameter_types: dict[str, dict[str, str]] = field(default_factory=dict)
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
    #: Its input ended with a compaction_trigger: the stream says `response.compaction.compacting` for the
    #: compaction item that leads its output.
    compaction_trigger: bool = False
    #: The API already stored and sent `response.created` and `response.queued` (sequence numbers 0 and 1), so
    #: that a background stream's client knows the id before a worker takes the job; the worker's follow on.
    announced: bool = False
    #: The request's MCP tools, as app/mcp's McpSetup payload (servers, sealed headers, which function is whose):
    #: where the model calls one, the job calls it and goes on generating (app/jobs/tool_loop.py).
    mcp: dict[str, Any] | None = None
    #: prompt_cache_options.comparison_response_id: what the API node learnt comparing the two prompts
    #: (app/prompt_cache/diagnosis.py's Comparison payload); its end adds the engine's reuse to it.
    cache_comparison: dict[str, Any] | None = None
    #: Its priority class (see JobClass): which waiting job the model takes next.
    job_class: JobClass = "interactive"
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
                # A job queued before jobs carried their class: a background response's is background.
                "job_class": "background" if payload["response"].get("background") else "interactive",
                **payload,
                "sampling": SamplingParams(**payload["sampling"]),
                "reasoning_tags": (tags[0], tags[1]) if tags else None,
            }
        )


class FairOrder(Generic[T]):
    """The order waiting jobs are served in, wherever they wait (the embedded waiting room, an engine's requests
    beyond its sequences; distributed mode's Redis scores encode the same): class first (JOB_CLASSES), then the
    tenants in turn (round robin), each tenant's own items first in, first out.

    Why round robin between tenants: one tenant's 500 queued jobs must not delay another tenant's first job by
    more than about one job (issue 27: 200 queued background creates of one key held another key's one foreground
    create for 53.6 s). A tenant that arrives joins the end of the round; each tenant served goes to its end again.
    """

    def __init__(self) -> None:
        #: Per class, the tenants with waiting items in the order of their next turn, each with its items in order.
        self._classes: dict[JobClass, OrderedDict[str, deque[T]]] = {name: OrderedDict() for name in JOB_CLASSES}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def push(self, job_class: JobClass, tenant: str, item: T, *, first: bool = False) -> None:
        """Queue `item` last of its tenant's (`first`: before them, as a preempted job that goes on)."""
        tenants = self._classes[job_class]
        if tenant not in tenants:
            tenants[tenant] = deque()  # a tenant with nothing waiting joins the end of the round
        if first:
            tenants[tenant].appendleft(item)
        else:
            tenants[tenant].append(item)
        self._count += 1

    def waiting_by_tenant(self) -> dict[tuple[str, JobClass], int]:
        """How many items each tenant has waiting in each class (a metrics scrape: one step per tenant)."""
        return {
            (tenant, job_class): len(items)
            for job_class, tenants in self._classes.items()
            for tenant, items in tenants.items()
        }

    def next_class(self) -> JobClass | None:
        """The class of the item `pop` would take (None: nothing waits)."""
        for job_class in JOB_CLASSES:
            if self._classes[job_class]:
                return job_class
        return None

    def pop(self) -> T:
        """The first item of the tenant whose turn it is, in the most urgent class that has any (IndexError: none)."""
        for job_class in JOB_CLASSES:
            tenants = self._classes[job_class]
            if not tenants:
                continue
            tenant, items = next(iter(tenants.items()))
            item = items.popleft()
            if items:
                tenants.move_to_end(tenant)  # served: its next item waits for every other tenant's turn
            else:
                del tenants[tenant]
            self._count -= 1
            return item
        raise IndexError("nothing is waiting")

    def remove(self, job_class: JobClass, tenant: str, item: T) -> None:
        """Take an item out wherever it waits (its waiter gave up); nothing if it is not there."""
        items = self._classes[job_class].get(tenant)
        if items is None or item not in items:
            return
        items.remove(item)
        self._count -= 1
        if not items:
            del self._classes[job_class][tenant]
