"""What a long prompt does to a running stream (issue 14, item 6), engine-level on the shipped model.

    .venv/bin/python -m bench.prefix_save [--prompt-tokens 7600] [--threads 2] [--slots 4]

One stream (a short prompt, 100s of tokens) runs; meanwhile a request with a --prompt-tokens prompt (SmolLM2's
context is 8192) is read and answers one token, so it finishes while the stream runs. Prints the stream's
gaps between two tokens:
- median: an ordinary step;
- largest while the long prompt was read (chunked prefill: one 512-token chunk rides along each step);
- the one spanning the long request's finish: there the engine used to copy its KV state (~170 MB) into the
  prefix cache while every other sequence waited. Each as a ratio to the median.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from app.config import Settings
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.kv.prefix_cache import PrefixCache
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams

#: The stream's gap spanning the long finish, over its median step: what "no pause" is held to (a step during
#: which the long request ends also samples its token and frees its slot).
PAUSE_TARGET = 2.0


def measure_gaps(prompt_tokens: int, threads: int, slots: int) -> dict[str, Any]:
    """A running stream's gaps (s) while a `prompt_tokens` prompt is read and finishes beside it."""
    engine = LlamaEngine(
        Settings().resolved_model_path,
        n_ctx=8192,
        n_threads=threads,
        slots=slots,
        prefix_cache=PrefixCache(1024 * 2**20),
    )
    rng = random.Random(6)
    # Ordinary words, so the stream never stops early.
    words = engine.tokenize(" the river owl glass comet bread map bee tea lantern quiet orbit harbor meadow")
    long_prompt = [rng.choice(words) for _ in range(prompt_tokens)]
    # Plain text, no chat turn: the model goes on writing rather than ending its answer.
    stream_prompt = [rng.choice(words) for _ in range(64)]

    stamps: list[float] = []
    stream_done = threading.Event()
    long_done: list[float] = []
    long_started: list[float] = []

    def on_stream(output: GenerationOutput) -> None:
        if isinstance(output, Finish | GenerationFailed):
            stream_done.set()
        else:
            stamps.append(time.perf_counter())

    def on_long(output: GenerationOutput) -> None:
        if isinstance(output, Finish | GenerationFailed):
            long_done.append(time.perf_counter())

    greedy = SamplingParams(temperature=0, top_p=1, max_output_tokens=None)
    engine.submit(GenerationRequest(stream_prompt, greedy, on_stream, "bench"))
    while len(stamps) < 20:
        time.sleep(0.01)
    long_started.append(time.perf_counter())
    one_token = SamplingParams(temperature=0, top_p=1, max_output_tokens=1)
    engine.submit(GenerationRequest(long_prompt, one_token, on_long, "bench"))
    while not long_done:
        time.sleep(0.01)
    after = len(stamps) + 20
    deadline = time.perf_counter() + 60
    while len(stamps) < after and not stream_done.is_set() and time.perf_counter() < deadline:
        time.sleep(0.01)
    engine.close()  # the stream ends as cancelled

    gaps = [(later - earlier, later) for earlier, later in pairwise(stamps)]
    reading = [gap for gap, at in gaps if long_started[0] < at and at - gap < long_done[0]]
    spanning = [gap for gap, at in gaps if at - gap <= long_done[0] <= at]
    return {
        "prompt_tokens": len(long_prompt),
        "threads": threads,
        "slots": slots,
        "median_step_s": statistics.median(gap for gap, _ in gaps),
        "largest_gap_while_reading_s": max(reading, default=0.0),
        "gap_spanning_finish_s": spanning[0] if spanning else None,
    }


def measure(_: Path) -> dict[str, Any]:
    """bench.run's `engine` part: the pause a long prompt's finish (its prefix saved) puts on a running stream."""
    gaps = measure_gaps(7600, 2, 4)
    spanning = gaps["gap_spanning_finish_s"]
    row = {
        "name": "prefix save: a stream's gap at a 7.6k-token prompt's finish ÷ its median step",
        "unit": "x",
        "stored": None if spanning is None else spanning / gaps["median_step_s"],
        "target": {"op": "<=", "value": PAUSE_TARGET},
        "note": "the state (~170 MB) is copied only while no other sequence runs; what remains is the step itself",
    }
    return {**gaps, "figures": [row]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=7600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", type=int, default=4)
    args = parser.parse_args()
    gaps = measure_gaps(args.prompt_tokens, args.threads, args.slots)
    median, reading, spanning = (
        gaps["median_step_s"],
        gaps["largest_gap_while_reading_s"],
        gaps["gap_spanning_finish_s"],
    )
    print(f"prompt {gaps['prompt_tokens']} tokens, {args.threads} threads, {args.slots} slots")
    print(f"  stream step, median:                 {median * 1000:7.1f} ms")
    print(f"  largest gap while the prompt is read: {reading * 1000:7.1f} ms ({reading / median:.1f}x)")
    if spanning is not None:
        print(f"  gap spanning the long finish:        {spanning * 1000:7.1f} ms ({spanning / median:.1f}x)")


if __name__ == "__main__":
    main()
