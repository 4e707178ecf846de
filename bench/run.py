"""Benchmarks: each figure a ratio against a baseline measured in the same run (issue 6, first part).

    .venv/bin/python -m bench.run [--tokens 128] [--json results.json]

Measures, on the shipped model with the same thread count on both sides:
  1. streamed tokens/s through the API (openai SDK, embedded mode) / raw llama_cpp.Llama in-process
  2. time to first token through the API - raw (both warm: the prompt already in the KV cache)
  3. eight chained turns: latency of turn 8 / turn 1, and prompt tokens prefilled per turn (input - cached)
  4. cancel latency: POST /cancel on a background response until it returns the stored, stopped response
  7. API node RSS
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import llama_cpp
import openai

from app.config import Settings
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from tests.fixtures.server import ServerProcess

PROMPT = "Write a long story about a dragon who learns to bake bread."
THREADS = "2"


def raw_stream(tokens: int) -> dict[str, float]:
    """llama-cpp-python on its own: the same prompt, rendered the same way, greedy."""
    settings = Settings()
    path = settings.resolved_model_path
    prompt = ChatTokenizer(path, n_ctx=None).render([ChatMessage("user", PROMPT)])
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=0, n_threads=int(THREADS), verbose=False)
    # Warm-up, as on the API side: the prompt is then in the KV cache on both sides.
    for _ in llm.create_completion(prompt, max_tokens=16, temperature=0, stream=True):
        pass
    started = time.perf_counter()
    first = last = 0.0
    produced = 0
    for _ in llm.create_completion(prompt, max_tokens=tokens, temperature=0, stream=True):
        last = time.perf_counter()
        first = first or last
        produced += 1
    return {"ttft_s": first - started, "tokens": produced, "tokens_per_s": (produced - 1) / (last - first)}


def api_stream(client: openai.OpenAI, model: str, tokens: int) -> dict[str, float]:
    """What a streaming client sees: time to the first delta, and output tokens over first-to-last delta."""
    started = time.perf_counter()
    first = last = 0.0
    produced = 0
    with client.responses.stream(
        model=model, input=PROMPT, temperature=0, max_output_tokens=tokens, store=False
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                last = time.perf_counter()
                first = first or last
            elif event.type in ("response.completed", "response.incomplete") and event.response.usage:
                produced = event.response.usage.output_tokens
    return {"ttft_s": first - started, "tokens": produced, "tokens_per_s": (produced - 1) / (last - first)}


def chained_turns(client: openai.OpenAI, model: str, turns: int = 8) -> dict[str, Any]:
    latencies, prefilled = [], []
    previous = None
    for turn in range(turns):
        started = time.perf_counter()
        response = client.responses.create(
            model=model,
            input=f"Turn {turn + 1}: tell me one more fact about bread.",
            previous_response_id=previous,
            temperature=0,
            max_output_tokens=32,
        )
        latencies.append(time.perf_counter() - started)
        assert response.usage is not None
        prefilled.append(response.usage.input_tokens - response.usage.input_tokens_details.cached_tokens)
        previous = response.id
    return {"turn8_over_turn1": latencies[-1] / latencies[0], "prefilled_tokens_per_turn": prefilled}


def cancel_latency(client: openai.OpenAI, model: str, runs: int = 3) -> dict[str, float]:
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


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores", "threads": int(THREADS), "tokens": args.tokens}

    raw = raw_stream(args.tokens)
    with tempfile.TemporaryDirectory() as directory:
        env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_THREADS": THREADS}
        server = ServerProcess(env, Path(directory) / "server.log").start()
        try:
            client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)
            model = client.models.list().data[0].id
            api_stream(client, model, 16)  # warm-up: first request after start
            api = api_stream(client, model, args.tokens)
            results["1_stream_tokens_per_s"] = {
                "api": api["tokens_per_s"],
                "raw": raw["tokens_per_s"],
                "ratio": api["tokens_per_s"] / raw["tokens_per_s"],
            }
            results["2_ttft_ms"] = {
                "api": api["ttft_s"] * 1000,
                "raw": raw["ttft_s"] * 1000,
                "api_minus_raw": (api["ttft_s"] - raw["ttft_s"]) * 1000,
            }
            results["3_chained_turns"] = chained_turns(client, model)
            results["4_cancel_latency"] = cancel_latency(client, model)
            assert server.process is not None
            results["7_api_rss_mb"] = rss_mb(server.process.pid)
            client.close()
        finally:
            server.stop()

    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
