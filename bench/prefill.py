"""Long prompts (issue 26, item 3): prefill tokens/s of 2k, 8k and 16k-token prompts, ours against llama-server on
the same prompt, model and threads, and raw llama.cpp with our engine's parameters.

    .venv/bin/python -m bench.prefill [--sizes 2048,8000,16384] [--rounds 2] [--llama-server PATH]
    .venv/bin/python -m bench.prefill --tune [--sizes 2048,8192] [--rounds 2]

Each prompt is one user message of ordinary words, rendered by our chat template to exactly the size, and led by a
number of its own, so that no side reuses an earlier prompt's cells (llama-server also gets `cache_prompt: false`).
- ours: a streamed `POST /v1/responses` (stored, then `store: false`) on the embedded server; the time to the first
  text delta, which holds the prefill, one decode step and the server's own work; prefill tokens/s = the prompt's
  tokens (usage.input_tokens) / that time.
- llama-server: `POST /completion` with the same token ids, `n_predict: 1`: the time to its answer (the prefill and
  one token); its own `timings.prompt_per_second` goes into the JSON beside it.
- raw: llama.cpp's C API in this process, the prompt read in llama_decode calls of our engine's batch size.
Rounds alternate the sides, so load drifts hit all alike; each figure is the best of its rounds.

Both servers are given a context of N_CTX = 16,640 tokens (one llama-server slot, `-c 16640`). SmolLM2 was trained
on 8,192: ours serves the 16k prompt (its answers degrade past 8,192 without RoPE scaling, but the prefill's work,
which is what is measured here, is that of a model trained that long); llama-server caps its slot at the trained
context, so the "8k" prompt is 8,000 tokens (a token answered still fits it) and 16k has no llama-server figure.

--tune measures raw llama.cpp only, for each configuration in TUNE (n_batch, n_ubatch, threads for the prompt,
flash attention): what BATCH_TOKENS and the threads in app/generation/engine.py were chosen from.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import llama_cpp

from app.config import Settings
from app.generation import engine
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.testing.servers import ServerProcess
from bench.peers import LlamaServer, embedded
from bench.workloads import sdk_client, store_argument

SIZES = (2048, 8000, 16384)
#: Every side's context: the largest prompt and a few answer tokens, rounded up to llama.cpp's 256.
N_CTX = 16640
THREADS = 2
DEFAULT_LLAMA_SERVER = Path.home() / ".cache/llama-responses/llama-server-11434.0.0/build/bin/llama-server"
WORDS = "the of and river owl glass comet bread map bee tea lantern quiet orbit harbor meadow signal".split()  # noqa: SIM905
#: Ours on the default stored path (store omitted), then with store: false.
PATHS: dict[str, bool | None] = {"stored": None, "unstored": False}


@dataclass(frozen=True)
class RawConfig:
    """One way to have llama.cpp read a prompt: decode calls of n_batch tokens, split into ubatches of n_ubatch."""

    n_batch: int = engine.BATCH_TOKENS
    n_ubatch: int = engine.BATCH_TOKENS
    threads_batch: int = THREADS
    flash_attn: bool = False

    @property
    def label(self) -> str:
        flash = "on" if self.flash_attn else "off"
        return f"n_batch {self.n_batch}, n_ubatch {self.n_ubatch}, {self.threads_batch} threads, flash attn {flash}"


#: --tune's candidates; the first is the engine's configuration as the code stands.
TUNE = (
    RawConfig(),
    RawConfig(n_batch=1024, n_ubatch=1024),
    RawConfig(n_batch=256, n_ubatch=256),
    RawConfig(threads_batch=1),
    RawConfig(flash_attn=True),
    RawConfig(n_batch=2048, n_ubatch=512, flash_attn=True),  # llama-server's defaults on a CPU
)


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: list[int]


def make_prompt(tokenizer: ChatTokenizer, size: int, nonce: int) -> Prompt:
    """A user message of words that our chat template renders to exactly `size` tokens (padded with the one-token
    word " the" at the end when the last word would overshoot)."""
    rng = random.Random(nonce)
    words = [f"Note {nonce}:"] + [rng.choice(WORDS) for _ in range(size)]

    def render(count: int, padding: int = 0) -> list[int]:
        text = " ".join(words[:count]) + " the" * padding
        return tokenizer.render([ChatMessage("user", text)])

    low, high = 1, len(words)  # the most words that fit: binary search (every word is at least one token)
    while low < high:
        middle = (low + high + 1) // 2
        if len(render(middle)) <= size:
            low = middle
        else:
            high = middle - 1
    padding = size - len(render(low))
    tokens = render(low, padding)
    if len(tokens) != size:
        raise RuntimeError(f"could not render a prompt of {size} tokens (got {len(tokens)})")
    return Prompt(" ".join(words[:low]) + " the" * padding, tokens)


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system, every thread) process `pid` has used: steadier than wall time under load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ours_prefill(server: ServerProcess, model: str, prompt: Prompt, store: bool | None) -> dict[str, float]:
    """A streamed create on our server: seconds to the first text delta (or to the end, when the first token ends
    the answer), and the prompt tokens it read."""
    assert server.process is not None
    with sdk_client(server.base_url) as client:
        cpu = cpu_s(server.process.pid)
        started = time.perf_counter()
        first = 0.0
        input_tokens = 0
        with client.responses.create(
            model=model,
            input=prompt.text,
            temperature=0,
            max_output_tokens=16,  # the API's least; the rest of the answer comes after the figure is taken
            stream=True,
            **store_argument(store),
        ) as stream:
            for event in stream:
                if event.type == "response.output_text.delta" and not first:
                    first = time.perf_counter()
                    cpu = cpu_s(server.process.pid) - cpu
                elif event.type in ("response.completed", "response.incomplete") and event.response.usage is not None:
                    input_tokens = event.response.usage.input_tokens
                    if not first:  # its first token ended the answer (past its trained context the model may stop)
                        first = time.perf_counter()
                        cpu = cpu_s(server.process.pid) - cpu
    if not first or input_tokens != len(prompt.tokens):
        raise RuntimeError(f"our server read {input_tokens} tokens (expected {len(prompt.tokens)}) or wrote none")
    seconds = first - started
    return {"seconds": seconds, "tokens_per_s": input_tokens / seconds, "cpu_ms_per_token": cpu * 1000 / input_tokens}


def peer_prefill(peer: LlamaServer, prompt: Prompt) -> dict[str, float]:
    """llama-server's /completion on the same token ids, one token answered, its prompt cache off."""
    body = {"prompt": prompt.tokens, "n_predict": 1, "cache_prompt": False, "temperature": 0}
    cpu = cpu_s(peer.process.pid)
    started = time.perf_counter()
    answer = httpx.post(f"{peer.base_url}/completion", json=body, timeout=1200)
    seconds = time.perf_counter() - started
    cpu = cpu_s(peer.process.pid) - cpu
    answer.raise_for_status()
    timings = answer.json()["timings"]
    if timings["prompt_n"] != len(prompt.tokens):
        raise RuntimeError(f"llama-server read {timings['prompt_n']} tokens (expected {len(prompt.tokens)})")
    return {
        "seconds": seconds,
        "tokens_per_s": len(prompt.tokens) / seconds,
        "cpu_ms_per_token": cpu * 1000 / len(prompt.tokens),
        "own_prompt_per_s": float(timings["prompt_per_second"]),
    }


class RawLlama:
    """The shipped model loaded once through llama.cpp's C API; each read gets a fresh context of its config."""

    def __init__(self) -> None:
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(Settings().resolved_model_path).encode(), params)
        if not self.model:
            raise RuntimeError("llama.cpp could not load the model")

    def prefill(self, tokens: list[int], config: RawConfig) -> dict[str, float]:
        """Seconds to read `tokens` from empty KV, in llama_decode calls of config.n_batch, logits for the last."""
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = N_CTX
        params.n_batch, params.n_ubatch = config.n_batch, config.n_ubatch
        params.n_threads, params.n_threads_batch = THREADS, config.threads_batch
        params.flash_attn_type = int(config.flash_attn)
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self.model, params)
        batch = llama_cpp.llama_batch_init(config.n_batch, 0, 1)
        try:
            cpu = time.process_time()
            started = time.perf_counter()
            for start in range(0, len(tokens), config.n_batch):
                part = tokens[start : start + config.n_batch]
                for offset, token in enumerate(part):
                    batch.token[offset], batch.pos[offset] = token, start + offset
                    batch.n_seq_id[offset], batch.seq_id[offset][0] = 1, 0
                    batch.logits[offset] = start + offset == len(tokens) - 1
                batch.n_tokens = len(part)
                if llama_cpp.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
            seconds = time.perf_counter() - started
            cpu = time.process_time() - cpu
        finally:
            llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_free(ctx)
        return {"seconds": seconds, "tokens_per_s": len(tokens) / seconds, "cpu_ms_per_token": cpu * 1000 / len(tokens)}

    def close(self) -> None:
        llama_cpp.llama_model_free(self.model)


@contextmanager
def our_server(directory: Path) -> Iterator[ServerProcess]:
    with embedded(directory, "prefill", THREADS, n_ctx=str(N_CTX)) as server:
        yield server


def best(samples: list[dict[str, float]]) -> dict[str, Any]:
    """The fastest round (the least disturbed by other load), and every round's rate."""
    fastest = max(samples, key=lambda sample: sample["tokens_per_s"])
    return {**fastest, "rounds_tokens_per_s": [sample["tokens_per_s"] for sample in samples]}


def progress(size: int, side: str, sample: dict[str, float]) -> None:
    rate, cpu = sample["tokens_per_s"], sample["cpu_ms_per_token"]
    load = os.getloadavg()[0]
    print(f"{size:>6} {side:12} {rate:7.1f} tok/s {cpu:6.2f} CPU ms/tok, load {load:.1f}", file=sys.stderr, flush=True)


def measure_sides(directory: Path, sizes: tuple[int, ...], rounds: int, llama_server: Path | None) -> dict[str, Any]:
    """Every side on every size, `rounds` times, alternating: {size: {side: best(...)}}."""
    tokenizer = ChatTokenizer(Settings().resolved_model_path, n_ctx=N_CTX)
    samples: dict[int, dict[str, list[dict[str, float]]]] = {size: {} for size in sizes}
    raw = RawLlama()
    with ExitStack() as stack:
        server = stack.enter_context(our_server(directory))
        model = sdk_client(server.base_url).models.list().data[0].id
        peer, peer_ctx = None, 0
        if llama_server is not None:
            log = directory / "prefill-llama-server.log"
            peer = stack.enter_context(LlamaServer(llama_server, THREADS, log, 1, n_ctx_per_slot=N_CTX))
            # It caps a slot at the model's trained context: a prompt that leaves no room for a token is left out.
            peer_ctx = int(peer.props()["default_generation_settings"]["n_ctx"])
        stack.callback(raw.close)
        nonce = 0
        for _ in range(rounds):
            for size in sizes:
                row = samples[size]
                for path, store in PATHS.items():
                    nonce += 1
                    prompt = make_prompt(tokenizer, size, nonce)
                    row.setdefault(path, []).append(ours_prefill(server, model, prompt, store))
                    progress(size, path, row[path][-1])
                nonce += 1
                prompt = make_prompt(tokenizer, size, nonce)
                if peer is not None and size < peer_ctx:
                    row.setdefault("llama_server", []).append(peer_prefill(peer, prompt))
                    progress(size, "llama_server", row["llama_server"][-1])
                row.setdefault("raw", []).append(raw.prefill(prompt.tokens, RawConfig()))
                progress(size, "raw", row["raw"][-1])
    return {str(size): {side: best(runs) for side, runs in sides.items()} for size, sides in samples.items()}


def figures(measured: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for size, sides in measured.items():
        rate = {side: sides[side]["tokens_per_s"] if side in sides else None for side in (*PATHS, "llama_server")}
        name = f"prefill tokens/s, {round(int(size) / 1024)}k-token prompt (to the first token)"
        rows.append(
            {
                "name": name,
                "unit": "tok/s",
                "stored": rate["stored"],
                "unstored": rate["unstored"],
                "peer": rate["llama_server"],
                "target": {"op": ">=", "value": None},
                "note": NOTE,
            }
        )
        rows.append(
            {
                "name": "  raw llama.cpp with our engine's batch and threads",
                "unit": "tok/s",
                "stored": sides["raw"]["tokens_per_s"],
                "peer": rate["llama_server"],
            }
        )
    return rows


#: What limits the prefill rate where it misses llama-server's (bench/README.md, "Long prompts").
NOTE = (
    "llama.cpp's own prompt rate (the raw row) bounds ours; without flash attention (off on a CPU for exact "
    "temperature-0 reuse) attention grows with the context; llama-server caps a slot at the trained context (8,192 "
    "for SmolLM2): no figure of its beyond"
)


def measure(directory: Path) -> dict[str, Any]:
    """bench.run's `prefill` part: 2k, 8k and 16k-token prompts, one round (about 12 minutes on the quiet 2-core
    VM; `python -m bench.prefill --rounds 2` for two), ours against llama-server and raw."""
    peer = DEFAULT_LLAMA_SERVER if DEFAULT_LLAMA_SERVER.is_file() else None
    measured = measure_sides(directory, SIZES, 1, peer)
    return {"n_ctx": N_CTX, "threads": THREADS, "sizes": measured, "figures": figures(measured)}


def tune(sizes: tuple[int, ...], rounds: int) -> dict[str, dict[str, Any]]:
    """Raw llama.cpp's prefill for each TUNE configuration and size, rounds alternating: the best tokens/s and the
    least CPU ms a token (each round printed as it is measured, with the load average)."""
    tokenizer = ChatTokenizer(Settings().resolved_model_path, n_ctx=N_CTX)
    prompts = {size: make_prompt(tokenizer, size, size) for size in sizes}
    raw = RawLlama()
    samples: dict[str, dict[int, list[dict[str, float]]]] = {
        config.label: {size: [] for size in sizes} for config in TUNE
    }
    try:
        raw.prefill(prompts[sizes[0]].tokens, TUNE[0])  # warm-up: the weights paged in
        for round_ in range(rounds):
            for size in sizes:
                for config in TUNE:
                    sample = raw.prefill(prompts[size].tokens, config)
                    samples[config.label][size].append(sample)
                    print(
                        f"round {round_ + 1} {size:>6} {config.label:62} {sample['tokens_per_s']:7.0f} tok/s "
                        f"{sample['cpu_ms_per_token']:6.2f} CPU ms/tok, load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        raw.close()
    return {
        label: {
            str(size): {
                "best_tokens_per_s": max(run["tokens_per_s"] for run in runs),
                "least_cpu_ms_per_token": min(run["cpu_ms_per_token"] for run in runs),
            }
            for size, runs in by_size.items()
        }
        for label, by_size in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="prompt sizes in tokens, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--tune", action="store_true", help="raw llama.cpp only, for each configuration in TUNE")
    args = parser.parse_args()
    sizes = tuple(int(size) for size in args.sizes.split(","))
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    if args.tune:
        results = tune(sizes, args.rounds)
        print(f"raw llama.cpp prefill, best tok/s and least CPU ms/tok of {args.rounds}; load at the start {load}")
        for label, by_size in results.items():
            cells = (
                f"{size}: {row['best_tokens_per_s']:6.0f} tok/s {row['least_cpu_ms_per_token']:5.2f} ms"
                for size, row in by_size.items()
            )
            print(f"  {label:62} " + "  ".join(cells))
        return
    with tempfile.TemporaryDirectory() as name:
        peer = args.llama_server if args.llama_server.is_file() else None
        measured = measure_sides(Path(name), sizes, args.rounds, peer)
    print(json.dumps({"load_average_at_start": load, "sizes": measured}, indent=2))


if __name__ == "__main__":
    main()
