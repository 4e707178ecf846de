"""The engine's requests beyond its sequences start in the fair order, on the real model: each tenant's (cache
scope's) requests of a class a flow, the flows in turn by their classes' weights, a tie to the more urgent class,
each flow's in order (a worker can hold more jobs than it has sequences)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.config import Settings
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams

pytestmark = pytest.mark.integration


def test_requests_beyond_the_slots_start_by_turns_of_the_flows() -> None:
    engine = LlamaEngine(Settings().resolved_model_path, n_ctx=512, n_threads=2, slots=1)
    try:
        running_started = threading.Event()
        endless = SamplingParams(temperature=0, top_p=1, max_output_tokens=None, grammar='root ::= "a" root')
        stream = GenerationRequest(
            engine.tokenize("Write the letter a."), endless, lambda _: running_started.set(), "a"
        )
        engine.submit(stream)
        assert running_started.wait(60)
        ended: list[str] = []
        done = threading.Event()
        waiting = [
            ("a-bg0", "a", "background"),
            ("a-bg1", "a", "background"),
            ("b-batch0", "b", "batch"),
            ("b-int0", "b", "interactive"),
            ("c-bg0", "c", "background"),
        ]
        prompt = engine.tokenize("Name a fruit.")

        def emit_for(name: str) -> Any:
            def emit(output: GenerationOutput) -> None:
                if isinstance(output, Finish | GenerationFailed):
                    ended.append(name)
                    if len(ended) == len(waiting):
                        done.set()

            return emit

        for name, tenant, job_class in waiting:  # all wait: the one slot streams until cancelled
            sampling = SamplingParams(0, 1, 1)
            engine.submit(GenerationRequest(prompt, sampling, emit_for(name), tenant, job_class=job_class))
        stream.cancelled.set()
        assert done.wait(120)
        # Every flow's first request shares the first turn (the more urgent class first); a's second background
        # request waits for its flow's next turn, after b's batch request.
        assert ended == ["b-int0", "a-bg0", "c-bg0", "b-batch0", "a-bg1"]
    finally:
        engine.close()
