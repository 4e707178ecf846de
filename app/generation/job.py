"""GenerationJob: one response's generation as every layer hands it on: the API makes it, a transport carries
it, the job execution runs it, a model runner generates from it. Its priority class, the classes' shares
(ClassWeights), and the fair order waiting jobs are served in (FairOrder, `start_tag`: whose turn it is)."""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import Any, Generic, Literal, TypeVar

from app.config import Settings
from app.generation.types import SamplingParams
from app.observability.job_context import job_telemetry

#: How urgent a job is, most urgent first: a client waits for an interactive one (a foreground create, stream or
#: JSON, a WebSocket turn, a compaction it asked for); nobody waits for a background one (`background: true`) but
#: its client polls; batch work is the least urgent. Each class has a share of the turns by its weight
#: (ClassWeights), and a tie goes to the more urgent class (FairOrder).
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


#: A job's cost in turns, in the units of the fair order's clock: a job of a class of weight w moves its flow's
#: clock SHARE_SCALE // w on (weights up to SHARE_SCALE; a larger weight costs as much as SHARE_SCALE).
SHARE_SCALE = 100


@dataclass(frozen=True, slots=True)
class ClassWeights:
    """The classes' shares of the turns while they all wait: a flow (one tenant's jobs of one class) of weight 2
    gets two turns for another flow's one of weight 1. Equal weights: interactive and background work take turns."""

    interactive: int = 2
    background: int = 2
    batch: int = 1

    def step(self, job_class: JobClass) -> int:
        """How far one job of `job_class` moves its flow's clock on."""
        weight = {"interactive": self.interactive, "background": self.background, "batch": self.batch}[job_class]
        return max(1, SHARE_SCALE // max(1, weight))


def class_weights(settings: Settings) -> ClassWeights:
    """The deployment's weights (RESPONSES_CLASS_WEIGHT_*)."""
    return ClassWeights(
        interactive=settings.class_weight_interactive,
        background=settings.class_weight_background,
        batch=settings.class_weight_batch,
    )


def start_tag(virtual_time: int, previous: int | None, step: int) -> int:
    """Whose turn it is, as a number (start-time fair queuing): the tag a job of a flow (a tenant's jobs of one
    class) waits under, the lowest tag going first. `virtual_time` is the tag being served now, `previous` the tag
    of the flow's last job (None: none the clock still remembers), `step` its class's (ClassWeights.step).

    A flow's jobs are `step` apart, so two flows that both wait share the turns by their weights, whatever their
    class; a flow that had nothing waiting starts at the tag being served (behind nobody, before nobody), and never
    with credit saved while it was idle. So one tenant's flood of interactive creates leaves another tenant's
    background work its share (issue 37: 0 of 4 background responses done in 101 s beside six loops of creates,
    when class order came first), and a tenant's 500 queued jobs delay another's first by about one of them."""
    if previous is None:
        return virtual_time
    return max(virtual_time, previous + step)


class FairOrder(Generic[T]):
    """The order waiting jobs are served in, wherever they wait (the embedded waiting room, an engine's requests
    beyond its sequences; distributed mode's Redis scores encode the same rule, transport/fair_scores.py): each
    item waits under its `start_tag` (its tenant's jobs of one class are a flow, the classes' weights its share),
    the lowest tag first; on a tie, the more urgent class (JOB_CLASSES), then the first pushed.

    Each tenant's own items of a class are served first in, first out.
    """

    def __init__(self, weights: ClassWeights | None = None) -> None:
        self.weights = weights or ClassWeights()
        #: Per flow (class, tenant), its waiting items in order, each with its tag and arrival.
        self._flows: dict[tuple[JobClass, str], deque[tuple[int, int, T]]] = {}
        #: Per flow, the tag of its last item pushed (kept after it drained while it could still matter).
        self._last: dict[tuple[JobClass, str], int] = {}
        #: The tag being served: the last one popped.
        self._clock = 0
        self._arrivals = count()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def push(self, job_class: JobClass, tenant: str, item: T, *, first: bool = False) -> None:
        """Queue `item` last of its tenant's in its class (`first`: before them, under the tag being served, as a
        preempted job that goes on)."""
        flow = (job_class, tenant)
        items = self._flows.setdefault(flow, deque())
        if first:
            items.appendleft((self._clock, -next(self._arrivals), item))
        else:
            tag = start_tag(self._clock, self._last.get(flow), self.weights.step(job_class))
            self._last[flow] = tag
            items.append((tag, next(self._arrivals), item))
        self._count += 1

    def waiting_by_tenant(self) -> dict[tuple[str, JobClass], int]:
        """How many items each tenant has waiting in each class (a metrics scrape: one step per flow)."""
        return {(tenant, job_class): len(items) for (job_class, tenant), items in self._flows.items()}

    def pop_from(self, classes: Collection[JobClass] = JOB_CLASSES) -> T | None:
        """The item whose turn it is among those of `classes` (None: none of them waits)."""
        best: tuple[int, int, int] | None = None
        best_flow: tuple[JobClass, str] | None = None
        for flow, items in self._flows.items():
            if flow[0] not in classes:
                continue
            tag, arrival, _ = items[0]
            key = (tag, JOB_CLASSES.index(flow[0]), arrival)
            if best is None or key < best:
                best, best_flow = key, flow
        if best_flow is None:
            return None
        items = self._flows[best_flow]
        tag, _, item = items.popleft()
        if not items:
            del self._flows[best_flow]
        self._count -= 1
        self._clock = max(self._clock, tag)
        self._forget_idle_flows()
        return item

    def pop(self) -> T:
        """The item whose turn it is (IndexError: none waits)."""
        if not self._count:
            raise IndexError("nothing is waiting")
        item = self.pop_from()
        assert item is not None  # something waits
        return item

    def remove(self, job_class: JobClass, tenant: str, item: T) -> None:
        """Take an item out wherever it waits (its waiter gave up); nothing if it is not there."""
        items = self._flows.get((job_class, tenant))
        if items is None:
            return
        for entry in items:
            if entry[2] is item or entry[2] == item:
                items.remove(entry)
                self._count -= 1
                if not items:
                    del self._flows[job_class, tenant]
                return

    def _forget_idle_flows(self) -> None:
        """Drop the last tags of drained flows that the clock has passed (they would start at it anyway), once
        they outnumber the waiting flows: the memory stays about the size of what waits."""
        if len(self._last) <= 2 * len(self._flows) + 64:
            return
        self._last = {
            flow: tag
            for flow, tag in self._last.items()
            if flow in self._flows or tag + self.weights.step(flow[0]) > self._clock
        }
