"""Prefill speed by chunk size: what exact KV reuse (RESPONSES_KV_REUSE=exact, prompts read in fixed chunks
of EXACT_CHUNK tokens, each in a llama_decode of its own) costs against the default 512-token batches.

    .venv/bin/python -m bench.prefill_chunks [--tokens 512] [--rounds 3] [--threads 2]

Prints, for each chunk size, the median prefill tokens/s of a --tokens prompt read from empty KV, and its ratio
to chunks of 512 measured in the same run (rounds interleave the sizes, so load drifts hit all alike).
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time

import llama_cpp

from app.config import Settings

SIZES = (32, 64, 128, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # as the engine: only its errors
    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(Settings().resolved_model_path).encode(), model_params)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = args.tokens + 256
    params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = args.threads
    params.flash_attn_type = 0  # as the engine on a CPU
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model, params)
    memory = llama_cpp.llama_get_memory(ctx)
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    rng = random.Random(14)
    prompt = [rng.randrange(vocab) for _ in range(args.tokens)]
    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def prefill(chunk: int) -> float:
        llama_cpp.llama_memory_clear(memory, True)
        started = time.perf_counter()
        for start in range(0, len(prompt), chunk):
            part = prompt[start : start + chunk]
            for offset, token in enumerate(part):
                batch.token[offset], batch.pos[offset] = token, start + offset
                batch.n_seq_id[offset], batch.seq_id[offset][0] = 1, 0
                batch.logits[offset] = offset == len(part) - 1
            batch.n_tokens = len(part)
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
        return len(prompt) / (time.perf_counter() - started)

    prefill(512)  # warm-up
    speeds: dict[int, list[float]] = {size: [] for size in SIZES}
    for _ in range(args.rounds):
        for size in SIZES:
            speeds[size].append(prefill(size))
    base = statistics.median(speeds[512])
    print(f"prefill of {args.tokens} tokens, {args.threads} threads, median of {args.rounds}")
    for size in SIZES:
        median = statistics.median(speeds[size])
        print(f"  chunks of {size:>3}: {median:7.0f} tokens/s  ratio to 512: {median / base:.2f}")
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    main()
