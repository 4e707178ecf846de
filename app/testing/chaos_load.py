"""The chaos test's load: client threads, each running a seeded mix of operations against two API nodes
(background + poll, background + stream resumed through the other node, foreground streams and JSON, three-turn
chains, cancels), recording every answer and everything each acknowledged response showed its client, for the
invariant checks (chaos_checks.py).

A client whose node refuses connections (it is down) goes to the other one, as behind a load balancer; a 503 is
an answer, not a retry, except for a cancel, which a client repeats until it is acknowledged.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES
from app.testing.chaos_cluster import Clock
from app.testing.cluster import read_sse_lines

#: How often each operation is drawn. Chains weigh as much as the others: their later turns go to the queue of
#: the worker that ran the first (affinity), which a killed worker leaves behind.
OPERATION_WEIGHTS = {
    "background_poll": 2,
    "background_stream": 2,
    "foreground_stream": 2,
    "foreground_json": 2,
    "chain": 2,
    "cancel": 1,
}
TOPICS = ("a dragon", "a lighthouse", "a baker", "the moon", "a lost key", "a robot", "a storm", "a garden")
CHAIN_TURNS = ("Tell me a fact about {topic}.", "Tell me one more.", "Now say both in one line.")
POLL_INTERVAL_S = 0.3
RETRY_PAUSE_S = 0.5


@dataclass(frozen=True)
class LoadPlan:
    clients: int = 3
    #: max_output_tokens of each response but cancels': small, so that a run on two CPU cores is many responses.
    tokens: tuple[int, int] = (16, 40)
    #: A cancelled response asks for more, so that the cancel mostly comes while it generates.
    cancel_tokens: int = 160
    cancel_after_s: tuple[float, float] = (0.0, 2.0)
    think_s: tuple[float, float] = (0.0, 0.5)
    #: Each operation's bound: a poll or a stream's resumption gives up after it (the final check decides).
    op_bound_s: float = 150.0
    #: A request (or a stream between two events) answered later than this has timed out (a violation).
    request_timeout_s: float = 90.0


@dataclass
class Answer:
    at_s: float
    client: int
    op: str
    method: str
    path: str
    node: int
    status: int | None
    #: How the request failed without an answer (ConnectError: the node is down; ReadTimeout: it never answered).
    error: str | None = None
    #: The body of an error answer (its first 500 characters).
    body: str = ""


@dataclass
class Tracked:
    """An acknowledged response (its client got its id) and what its client saw of it."""

    response_id: str
    op: str
    background: bool
    stream: bool
    created_s: float
    #: The response this one was asked to continue (a chain turn after the first).
    asked_previous: str | None = None
    #: The POST's JSON answer (not a stream).
    reply: dict[str, Any] | None = None
    #: The events its client received, in order: the POST's stream, then each resumption's.
    events: list[dict[str, Any]] = field(default_factory=list)
    #: How its client's stream ended: "terminal", "broken" (the connection), "stalled" (the bound), "unfinished".
    stream_end: str = ""
    cancel_status: int | None = None
    cancel_reply: dict[str, Any] | None = None
    cancel_answered: bool = True
    #: The first terminal Response its client saw (an answer, a stream's terminal event or a poll).
    seen_terminal: dict[str, Any] | None = None
    last_seen_s: float = 0.0

    def saw(self, response: dict[str, Any], at_s: float) -> None:
        self.last_seen_s = at_s
        if self.seen_terminal is None and response.get("status") in TERMINAL_STATUSES:
            self.seen_terminal = response


class Recorder:
    """Every answer and every acknowledged response of a run, from all clients."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.answers: list[Answer] = []
        self.tracked: dict[str, Tracked] = {}
        #: Operations begun, by name (whether or not a response was acknowledged).
        self.begun: Counter[str] = Counter()
        #: Operations that broke off on an answer they could not read: (at_s, op, what).
        self.crashes: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()

    def crashed(self, op: str, what: str) -> None:
        with self._lock:
            self.crashes.append((self.clock.now_s(), op, what))

    def begin(self, op: str) -> None:
        with self._lock:
            self.begun[op] += 1

    def answer(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)

    def track(self, tracked: Tracked) -> Tracked:
        with self._lock:
            self.tracked[tracked.response_id] = tracked
        return tracked


@dataclass
class StreamResult:
    events: list[dict[str, Any]]
    node: int
    status: int | None = None
    done: bool = False
    #: Why it ended without its terminal event: "broken", "stalled", or "" (closed on purpose, or ended).
    failure: str = ""

    @property
    def terminal(self) -> dict[str, Any] | None:
        return next((event for event in self.events if event["type"] in TERMINAL_EVENT_TYPES), None)

    @property
    def response_id(self) -> str | None:
        return next((str(event["response"]["id"]) for event in self.events if "response" in event), None)


class LoadClient:
    def __init__(self, index: int, bases: list[str], rng: random.Random, recorder: Recorder, plan: LoadPlan):
        self.index = index
        self.bases = bases
        self.rng = rng
        self.recorder = recorder
        self.plan = plan
        self.http = httpx.Client(timeout=httpx.Timeout(plan.request_timeout_s, connect=5.0))

    def run(self, stop: threading.Event) -> None:
        names, weights = list(OPERATION_WEIGHTS), list(OPERATION_WEIGHTS.values())
        try:
            while not stop.is_set():
                op = self.rng.choices(names, weights)[0]
                self.recorder.begin(op)
                try:
                    getattr(self, op)()
                except Exception as error:  # an answer the client could not read: reported, and the load goes on
                    self.recorder.crashed(op, f"client {self.index}: {error!r}")
                stop.wait(self.rng.uniform(*self.plan.think_s))
        finally:
            self.http.close()

    # --- requests

    def _now(self) -> float:
        return self.recorder.clock.now_s()

    def _record(self, op: str, method: str, path: str, node: int, status: int | None, **extra: str) -> None:
        self.recorder.answer(Answer(self._now(), self.index, op, method, path, node, status, **extra))

    def request(self, op: str, method: str, path: str, node: int, **kwargs: Any) -> tuple[httpx.Response | None, int]:
        """One request through `node`, or the next node while a node refuses the connection; (its answer, or None
        when none came, and the node that answered)."""
        for attempt in range(len(self.bases)):
            target = (node + attempt) % len(self.bases)
            try:
                reply = self.http.request(method, self.bases[target] + path, **kwargs)
            except httpx.ConnectError:
                self._record(op, method, path, target, None, error="ConnectError")
                continue
            except httpx.HTTPError as error:
                self._record(op, method, path, target, None, error=type(error).__name__)
                return None, target
            body = reply.text[:500] if reply.status_code >= 400 else ""
            self._record(op, method, path, target, reply.status_code, body=body)
            return reply, target
        return None, node

    def stream(
        self, op: str, method: str, path: str, node: int, *, stop_after: int | None = None, **kwargs: Any
    ) -> StreamResult:
        """An SSE request through `node` (or the next, as `request`), read to its end, to `stop_after` events (then
        closed on purpose), or until it breaks or stalls."""
        for attempt in range(len(self.bases)):
            target = (node + attempt) % len(self.bases)
            try:
                return self._read_stream(op, method, path, target, stop_after, **kwargs)
            except httpx.ConnectError:
                self._record(op, method, path, target, None, error="ConnectError")
        return StreamResult([], node, failure="broken")

    def _read_stream(
        self, op: str, method: str, path: str, node: int, stop_after: int | None, **kwargs: Any
    ) -> StreamResult:
        result = StreamResult([], node)
        started = time.monotonic()
        try:
            with self.http.stream(method, self.bases[node] + path, **kwargs) as reply:
                result.status = reply.status_code
                if reply.status_code != 200:
                    reply.read()
                    self._record(op, method, path, node, reply.status_code, body=reply.text[:500])
                    result.failure = "broken"
                    return result
                self._record(op, method, path, node, 200)
                for item in read_sse_lines(reply.iter_lines()):
                    if item == "[DONE]":
                        result.done = True
                        continue
                    assert isinstance(item, dict)
                    result.events.append(item)
                    if stop_after is not None and len(result.events) >= stop_after and result.terminal is None:
                        return result
                    if time.monotonic() - started > self.plan.op_bound_s:
                        result.failure = "stalled"
                        return result
        except httpx.ConnectError:
            raise
        except httpx.ReadTimeout:
            self._record(op, method, path, node, None, error="ReadTimeout")
            result.failure = "stalled"
            return result
        except httpx.HTTPError as error:
            self._record(op, method, path, node, None, error=type(error).__name__)
            result.failure = "broken"
            return result
        if result.terminal is None:
            result.failure = "broken"
        return result

    # --- what each operation sends

    def _node(self) -> int:
        return self.rng.randrange(len(self.bases))

    def _body(self, *, tokens: int | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "input": f"Write a short story about {self.rng.choice(TOPICS)}.",
            "max_output_tokens": tokens or self.rng.randint(*self.plan.tokens),
            **extra,
        }

    def _created(self, op: str, reply: httpx.Response | None, **fields: Any) -> Tracked | None:
        if reply is None or reply.status_code != 200:
            return None
        data = reply.json()
        tracked = Tracked(data["id"], op, reply=data, created_s=self._now(), **fields)
        tracked.saw(data, self._now())
        return self.recorder.track(tracked)

    def poll(self, tracked: Tracked, node: int) -> None:
        """GET the response, through one node then the other, until its client sees it terminal."""
        deadline = time.monotonic() + self.plan.op_bound_s
        while time.monotonic() < deadline and tracked.seen_terminal is None:
            node = (node + 1) % len(self.bases)
            reply, node = self.request(tracked.op, "GET", f"/v1/responses/{tracked.response_id}", node)
            if reply is not None and reply.status_code == 200:
                tracked.saw(reply.json(), self._now())
            if tracked.seen_terminal is None:
                time.sleep(POLL_INTERVAL_S)

    def follow(self, tracked: Tracked, node: int) -> None:
        """Resume a background stream after the last event its client holds, through the other node (again after
        each break), until its terminal event."""
        deadline = time.monotonic() + self.plan.op_bound_s
        while time.monotonic() < deadline:
            node = (node + 1) % len(self.bases)
            params: dict[str, Any] = {"stream": "true"}
            if tracked.events:
                params["starting_after"] = tracked.events[-1]["sequence_number"]
            part = self.stream(tracked.op, "GET", f"/v1/responses/{tracked.response_id}", node, params=params)
            tracked.events.extend(part.events)
            tracked.last_seen_s = self._now()
            if part.terminal is not None:
                tracked.stream_end = "terminal"
                tracked.saw(part.terminal["response"], self._now())
                return
            time.sleep(RETRY_PAUSE_S)
        tracked.stream_end = "unfinished"

    # --- the operations

    def background_poll(self) -> None:
        reply, node = self.request(
            "background_poll", "POST", "/v1/responses", self._node(), json=self._body(background=True)
        )
        tracked = self._created("background_poll", reply, background=True, stream=False)
        if tracked is not None:
            self.poll(tracked, node)

    def background_stream(self) -> None:
        body = self._body(background=True, stream=True)
        first = self.stream(
            "background_stream", "POST", "/v1/responses", self._node(), stop_after=self.rng.randint(2, 12), json=body
        )
        if first.response_id is None:
            return
        tracked = Tracked(first.response_id, "background_stream", True, True, self._now(), events=first.events)
        self.recorder.track(tracked)
        if first.terminal is not None:
            tracked.stream_end = "terminal"
            tracked.saw(first.terminal["response"], self._now())
        else:
            self.follow(tracked, first.node)

    def foreground_stream(self) -> None:
        result = self.stream("foreground_stream", "POST", "/v1/responses", self._node(), json=self._body(stream=True))
        if result.response_id is None:
            return
        tracked = Tracked(result.response_id, "foreground_stream", False, True, self._now(), events=result.events)
        tracked.stream_end = "terminal" if result.terminal is not None else result.failure
        if result.terminal is not None:
            tracked.saw(result.terminal["response"], self._now())
        self.recorder.track(tracked)

    def foreground_json(self) -> None:
        reply, _ = self.request("foreground_json", "POST", "/v1/responses", self._node(), json=self._body())
        self._created("foreground_json", reply, background=False, stream=False)

    def chain(self) -> None:
        """Three turns, each continuing the last (a foreground or a background one); the chain stops at a turn
        that did not end completed or incomplete."""
        topic = self.rng.choice(TOPICS)
        previous: str | None = None
        for text in CHAIN_TURNS:
            background = self.rng.random() < 0.3
            body = self._body(input=text.format(topic=topic), background=background)
            if previous is not None:
                body["previous_response_id"] = previous
            reply, node = self.request("chain", "POST", "/v1/responses", self._node(), json=body)
            tracked = self._created("chain", reply, background=background, stream=False, asked_previous=previous)
            if tracked is None:
                return
            if background:
                self.poll(tracked, node)
            final = tracked.seen_terminal
            if final is None or final["status"] not in ("completed", "incomplete"):
                return
            previous = tracked.response_id

    def cancel(self) -> None:
        body = self._body(background=True, tokens=self.plan.cancel_tokens)
        reply, node = self.request("cancel", "POST", "/v1/responses", self._node(), json=body)
        tracked = self._created("cancel", reply, background=True, stream=False)
        if tracked is None:
            return
        time.sleep(self.rng.uniform(*self.plan.cancel_after_s))
        deadline = time.monotonic() + self.plan.op_bound_s
        path = f"/v1/responses/{tracked.response_id}/cancel"
        tracked.cancel_answered = False
        while time.monotonic() < deadline:
            answer, node = self.request("cancel", "POST", path, node)
            if answer is not None and answer.status_code not in (429, 503):
                tracked.cancel_status, tracked.cancel_reply = answer.status_code, answer.json()
                tracked.cancel_answered = True
                if answer.status_code == 200:
                    tracked.saw(answer.json(), self._now())
                break
            time.sleep(RETRY_PAUSE_S)
        self.poll(tracked, node)
