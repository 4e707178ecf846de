"""Client workloads, run the same way against our server and against llama-server (both speak /v1/responses)."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai

PROMPT = "Write a long story about a dragon who learns to bake bread."
#: A stream that runs for thousands of tokens at temperature 0 (a story ends sooner).
COUNT_PROMPT = "Count from 1 to 3000, one number per line."
TOPICS = ["bread", "rivers", "owls", "glass", "tea", "comets", "maps", "bees"]


def sdk_client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=600)


@dataclass(frozen=True)
class StreamTiming:
    ttft_s: float
    deltas: int
    #: Output deltas (one per token on both servers) over the time from the first to the last.
    tokens_per_s: float


def store_argument(store: bool | None) -> dict[str, Any]:
    """`store` as the SDK call takes it: None leaves it out (ours then stores: the default path)."""
    return {} if store is None else {"store": store}


def stream_once(
    client: openai.OpenAI, model: str, prompt: str, tokens: int, store: bool | None = False
) -> StreamTiming:
    """What a streaming client sees: the time to the first text delta, then the delta rate."""
    started = time.perf_counter()
    first = last = 0.0
    deltas = 0
    # create(stream=True), not the stream() helper: llama-server's events lack fields (content_index) that the
    # helper's accumulator needs.
    with client.responses.create(
        model=model, input=prompt, temperature=0, max_output_tokens=tokens, stream=True, **store_argument(store)
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                last = time.perf_counter()
                first = first or last
                deltas += 1
    rate = (deltas - 1) / (last - first) if deltas > 1 else 0.0
    return StreamTiming(ttft_s=first - started, deltas=deltas, tokens_per_s=rate)


def best_stream(
    client: openai.OpenAI, model: str, tokens: int, store: bool | None = False, runs: int = 3
) -> StreamTiming:
    """The median of a few runs (after one warm-up that puts the prompt in the cache)."""
    stream_once(client, model, PROMPT, 16, store)
    timings = [stream_once(client, model, PROMPT, tokens, store) for _ in range(runs)]
    return StreamTiming(
        ttft_s=statistics.median(t.ttft_s for t in timings),
        deltas=timings[0].deltas,
        tokens_per_s=statistics.median(t.tokens_per_s for t in timings),
    )


def concurrent_streams(
    client: openai.OpenAI, model: str, streams: int, tokens: int, store: bool | None = False
) -> float:
    """Aggregate output tokens/s of `streams` simultaneous streams with different prompts."""

    def one(index: int) -> int:
        prompt = f"Write a long story about {TOPICS[index % len(TOPICS)]} (story {index})."
        return stream_once(client, model, prompt, tokens, store).deltas

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=streams) as pool:
        produced = sum(pool.map(one, range(streams)))
    return produced / (time.perf_counter() - started)


def conversations(
    client: openai.OpenAI, model: str, *, chained: bool, conversations: int = 8, turns: int = 8, tokens: int = 32
) -> dict[str, Any]:
    """`conversations` conversations of `turns` turns, interleaved (turn 1 of each, then turn 2 of each...),
    chained by previous_response_id or resent whole by a stateless client (store: false)."""
    latencies: list[list[float]] = [[] for _ in range(turns)]
    prefilled: list[list[int]] = [[] for _ in range(turns)]
    previous: list[str | None] = [None] * conversations
    histories: list[list[dict[str, Any]]] = [[] for _ in range(conversations)]
    for turn in range(turns):
        for index in range(conversations):
            # Distinct questions per workload: a stateless run must not hit what a chained run left in the cache.
            workload = "chained" if chained else "resent"
            question = f"Tell me one more fact about {TOPICS[index % len(TOPICS)]} ({workload} fact {turn + 1})."
            started = time.perf_counter()
            if chained:
                response = client.responses.create(
                    model=model,
                    input=question,
                    previous_response_id=previous[index],
                    temperature=0,
                    max_output_tokens=tokens,
                )
                previous[index] = response.id
            else:
                histories[index].append({"type": "message", "role": "user", "content": question})
                response = client.responses.create(
                    model=model,
                    input=histories[index],  # type: ignore[arg-type]
                    store=False,
                    temperature=0,
                    max_output_tokens=tokens,
                    prompt_cache_key=f"conversation-{index}",
                )
                histories[index].append({"type": "message", "role": "assistant", "content": response.output_text})
            latencies[turn].append(time.perf_counter() - started)
            usage = response.usage
            assert usage is not None
            cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0
            prefilled[turn].append(usage.input_tokens - cached)
    mean = [statistics.mean(turn) for turn in latencies]
    return {
        "turn8_over_turn1": mean[-1] / mean[0],
        "latency_ms_per_turn": [round(value * 1000, 1) for value in mean],
        "prefilled_tokens_per_turn": [round(statistics.mean(turn), 1) for turn in prefilled],
    }


def cancel_latency(client: openai.OpenAI, model: str, runs: int = 3) -> dict[str, float]:
    """POST /cancel on a generating background response, until it returns the stored, stopped response."""
    samples = []
    for _ in range(runs):
        created = client.responses.create(model=model, input=PROMPT, background=True, max_output_tokens=2000)
        while client.responses.retrieve(created.id).status == "queued":
            time.sleep(0.02)
        time.sleep(0.3)
        started = time.perf_counter()
        cancelled = client.responses.cancel(created.id)
        samples.append(time.perf_counter() - started)
        assert cancelled.status == "cancelled"
    return {"median_ms": statistics.median(samples) * 1000, "max_ms": max(samples) * 1000}


def long_prompt(sentences: int) -> str:
    """About 17 tokens a sentence on SmolLM2 (240: ~4,000 tokens); a fresh nonce first, so that no prefix cache
    holds any of it."""
    lines = [f"Run {uuid.uuid4().hex}. Read these notes, then answer in one word."]
    lines += [f"Note {i}: the {TOPICS[i % len(TOPICS)]} ledger reads {i * 7919 % 10007}." for i in range(sentences)]
    return "\n".join(lines)


def stall(client: openai.OpenAI, model: str, store: bool | None = False, sentences: int = 240) -> dict[str, float]:
    """The largest gap a running stream sees between two deltas while another request reads a long prompt
    (~4,000 tokens), against that stream's median gap before it. The window runs until 0.5 s after the long
    request's answer, so saving its prefix counts too."""
    arrivals: list[float] = []
    window: dict[str, float] = {}
    steady = threading.Event()  # the stream is decoding at its steady rate (or has ended)
    prompt = long_prompt(sentences)

    def read_long_prompt() -> None:
        steady.wait()
        window["start"] = time.perf_counter()
        response = client.responses.create(
            model=model, input=prompt, temperature=0, max_output_tokens=16, **store_argument(store)
        )
        window["end"] = time.perf_counter()
        window["prompt_tokens"] = response.usage.input_tokens if response.usage else 0

    # A daemon thread, not a pool: an interrupted run must not wait for the long request on its way out.
    reader = threading.Thread(target=read_long_prompt, name="long-prompt", daemon=True)
    reader.start()
    try:
        with client.responses.create(
            model=model, input=COUNT_PROMPT, temperature=0, max_output_tokens=4000, stream=True, **store_argument(store)
        ) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    arrivals.append(time.perf_counter())
                    if len(arrivals) == 32:
                        steady.set()
                    if "end" in window and arrivals[-1] > window["end"] + 0.5:
                        break  # leaving the block closes the stream: the server stops generating
    finally:
        steady.set()
    reader.join()
    if "end" not in window or arrivals[-1] < window["end"]:
        raise RuntimeError("the long request failed, or the running stream ended before it was answered")
    gaps = list(itertools.pairwise(arrivals))
    before = [b - a for a, b in gaps if b < window["start"]]
    during = [b - a for a, b in gaps if b >= window["start"]]
    return {
        "max_gap_ms": max(during) * 1000,
        "median_gap_before_ms": statistics.median(before) * 1000,
        "long_request_ms": (window["end"] - window["start"]) * 1000,
        "prompt_tokens": window["prompt_tokens"],
    }
