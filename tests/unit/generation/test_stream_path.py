"""The path from the engine thread to the SSE frame: hand-over in order, frames as the event's JSON."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from app.api.sse import event_frame
from app.events.encoding import EncodedEvent as ReceivedEvent
from app.generation.engine import GenerationRequest
from app.generation.job import GenerationJob
from app.generation.local_runner import LocalRunner
from app.generation.types import Finish, GenerationOutput, SamplingParams
from app.transport.memory_bus import MemoryBus


class ThreadEngine:
    """Emits each request's pieces from a thread of its own, all at once (as one decode step of many
    sequences does), then its Finish."""

    slots = 4
    cached_bytes = 0

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.requests: list[GenerationRequest] = []

    def submit(self, request: GenerationRequest) -> None:
        self.requests.append(request)

    def run_all(self) -> None:
        def emit() -> None:
            for index in range(self.pieces):
                for request in self.requests:
                    request.emit(f"{index} ")
            for request in self.requests:
                request.emit(Finish("length", len(request.prompt), 0, self.pieces))

        thread = threading.Thread(target=emit)
        thread.start()
        thread.join()


def job(response_id: str) -> GenerationJob:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=None)
    return GenerationJob(response_id, [1, 2], sampling, {}, store=False, keep_events=False, tenant="t")


async def test_outputs_posted_together_by_the_engine_thread_reach_each_run_in_order() -> None:
    engine = ThreadEngine(pieces=300)
    runner = LocalRunner(engine)  # type: ignore[arg-type]
    runs = [runner.start(job(f"resp_{index}")) for index in range(3)]
    engine.run_all()  # every output is posted before the loop gets to any

    async def read(run: Any) -> list[GenerationOutput]:
        return [output async for output in run.outputs()]

    results = await asyncio.wait_for(asyncio.gather(*(read(run) for run in runs)), 10)
    for outputs in results:
        assert outputs == [*(f"{index} " for index in range(300)), Finish("length", 2, 0, 300)]
    assert not runner._runs  # each run's end was seen


async def test_a_memory_subscription_returns_queued_events_then_times_out() -> None:
    bus = MemoryBus()
    subscription = await bus.subscribe("resp_1")
    for number in range(3):
        await bus.publish("resp_1", {"type": "x", "sequence_number": number})
    assert [(await subscription.next(1))["sequence_number"] for _ in range(3)] == [0, 1, 2]  # type: ignore[index]
    assert await subscription.next(0.01) is None
    waiting = asyncio.create_task(subscription.next(5))
    await asyncio.sleep(0)
    await bus.publish("resp_1", {"type": "x", "sequence_number": 3})
    assert await waiting == {"type": "x", "sequence_number": 3}
    await subscription.close()
    assert not bus.subscribers


def test_a_frame_of_an_event_from_redis_is_the_frame_of_the_same_event_encoded_here() -> None:
    event: dict[str, Any] = {"type": "response.output_text.delta", "sequence_number": 4, "delta": 'é\n"x"'}
    published = json.dumps(event, separators=(",", ":"))  # as RedisBus.publish sends it
    received = ReceivedEvent.parse(published.encode())
    assert received == event
    assert event_frame(received) == event_frame(event)
    assert event_frame(event) == f"event: response.output_text.delta\ndata: {published}\n\n".encode()
    # A relay that changes an event makes a new dict, which is encoded afresh.
    renumbered = {**received, "sequence_number": 5}
    assert json.loads(event_frame(renumbered).split(b"data: ")[1]) == {**event, "sequence_number": 5}
