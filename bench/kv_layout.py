"""Concurrency by KV layout (issue 14, item 2), engine-level on the shipped model.

    .venv/bin/python -m bench.kv_layout [--tokens 64] [--threads 2] [--n-ctx 2048]

For 4 and 8 sequences (slots), each layout (`split`: a window of n_ctx cells per sequence, llama.cpp's
kv_unified=false; `unified`: one pool of n_ctx x slots cells shared by all, as llama-server), and 1, 2, 4 and
8 concurrent streams (--tokens each, temperature 0): aggregate generated tokens/s, and its ratio to one stream
of the same engine. With split KV llama.cpp decodes a step's tokens in one ubatch only when their sequence ids
run consecutively (split_equal), so streams on slots 0 and 2 cost two graph runs; unified KV takes them all in
one. Also prints the KV bytes per token and per sequence.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Callable

from app.config import Settings
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams

STREAMS = (1, 2, 4, 8)


def aggregate_rate(engine: LlamaEngine, streams: int, tokens: int, rng: random.Random) -> float:
    topics = "river owl glass comet bread map bee tea lantern orbit harbor meadow".split()  # noqa: SIM905
    done = threading.Semaphore(0)
    counts = [0] * streams

    def emitter(index: int) -> Callable[[GenerationOutput], None]:
        def emit(output: GenerationOutput) -> None:  # on the engine thread: never blocks
            if isinstance(output, Finish | GenerationFailed):
                if isinstance(output, Finish):
                    counts[index] = output.output_tokens
                done.release()

        return emit

    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=tokens)
    started = time.perf_counter()
    for index in range(streams):
        # A long story: the answer runs past --tokens rather than ending early.
        ask = f"Write a very long story about a {rng.choice(topics)} and a {rng.choice(topics)}."
        prompt = engine.tokenize(f"<|im_start|>user\n{ask}<|im_end|>\n<|im_start|>assistant\n")
        engine.submit(GenerationRequest(prompt, sampling, emitter(index), f"bench-{index}"))
    for _ in range(streams):
        done.acquire()
    return sum(counts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--slots", default="4,8", help="comma-separated")
    args = parser.parse_args()
    path = Settings().resolved_model_path
    for slots in (int(count) for count in args.slots.split(",")):
        for unified in (False, True):
            engine = LlamaEngine(path, n_ctx=args.n_ctx, n_threads=args.threads, slots=slots, kv_unified=unified)
            rng = random.Random(2)
            aggregate_rate(engine, 1, 8, rng)  # warm-up
            rates = {streams: aggregate_rate(engine, streams, args.tokens, rng) for streams in STREAMS}
            per_token = engine.kv_bytes_per_token
            engine.close()
            layout = "unified" if unified else "split"
            cells = f"{per_token * args.n_ctx / 2**20:.0f} MiB of KV a sequence ({per_token} bytes a token)"
            print(f"{slots} slots, {layout:>7} KV, {cells}", flush=True)
            for streams, rate in rates.items():
                print(f"  {streams} streams: {rate:6.1f} tokens/s  x{rate / rates[1]:.2f} of one stream", flush=True)


if __name__ == "__main__":
    main()
