"""Logprobs cost only the requests that ask for them: streamed tokens/s through the API (embedded, openai SDK)
without logprobs, with them, and with 20 alternatives a token, each a ratio against raw llama_cpp.Llama measured
in the same run (figure 1 of bench/run.py, plus the logprob variants).

    .venv/bin/python -m bench.logprobs [--tokens 128] [--runs 5] [--default-only]

`--default-only` measures raw and the default path alone, to compare with a tree that has no logprobs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

from bench.peers import raw_stream
from bench.run import THREADS, embedded_server, model_of
from bench.workloads import PROMPT, sdk_client


def stream_rate(client: openai.OpenAI, model: str, tokens: int, extra: dict[str, Any]) -> float:
    """Text deltas per second from the first to the last, one delta a token."""
    first = last = 0.0
    deltas = 0
    with client.responses.create(
        model=model, input=PROMPT, temperature=0, max_output_tokens=tokens, store=False, stream=True, **extra
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                last = time.perf_counter()
                first = first or last
                deltas += 1
    return (deltas - 1) / (last - first) if deltas > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--default-only", action="store_true")
    args = parser.parse_args()
    variants: dict[str, dict[str, Any]] = {"default": {}}
    if not args.default_only:
        variants["logprobs"] = {"include": ["message.output_text.logprobs"]}
        variants["top_logprobs_20"] = {"include": ["message.output_text.logprobs"], "top_logprobs": 20}
    raw = raw_stream(THREADS, args.tokens).tokens_per_s
    rates: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as name, embedded_server(Path(name)) as server:
        client = sdk_client(server.base_url)
        model = model_of(client)
        stream_rate(client, model, 16, {})  # warm-up: the prompt is then in the prefix cache for every variant
        names = list(variants)
        for run in range(args.runs):
            # Interleaved, each round starting with another variant, so that drift in the machine's load and
            # the position in a round hit every variant alike.
            for variant in names[run % len(names) :] + names[: run % len(names)]:
                rates[variant].append(stream_rate(client, model, args.tokens, variants[variant]))
        client.close()
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    results: dict[str, Any] = {"raw_tokens_per_s": raw, "api_tokens_per_s": medians}
    results["over_raw"] = {variant: rate / raw for variant, rate in medians.items()}
    results["over_default"] = {variant: rate / medians["default"] for variant, rate in medians.items()}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
