"""Admission beside a long prompt (issue 27, finding 2): how long tenant B's tiny streamed create waits for its
first token while tenant A's long prompt is being read, as a ratio to B alone, both measured in the same run.

    .venv/bin/python -m bench.admission [--words 7000] [--rounds 3] [--delay 1.0] [--baseline CHECKOUT]

Starts this checkout's embedded server (`python -m app.cli serve`, the shipped SmolLM2 model, 2 threads, its
8,192-token context) with two keys. B's streamed create ("Say hi.", 16 output tokens at most) is timed to its first
output token alone (median of --rounds); then, each round, A sends a streamed `store: false` create whose input is
--words random words (about as many tokens; a new text each round, so that no prefix is reused) and B's create is
sent --delay seconds later, while A's prompt is still being read. Prints B's first token alone and beside A, the
ratio, A's first token, and in how many rounds B's first token came before A's.

`--baseline CHECKOUT` runs the same against another checkout of this project (its `app` package, this venv; e.g.
`git archive REF | tar -x -C DIR`), each server started on its own, baseline first. Before this change B waited
for A's whole prefill (110.6 s in the finding, on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from app.testing.servers import ServerProcess

KEYS = ("tenant-a", "tenant-b")
WORDS = "the of and river owl glass comet bread map bee tea lantern quiet orbit harbor meadow signal".split()  # noqa: SIM905


def long_text(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return f"Round {seed}. " + " ".join(rng.choice(WORDS) for _ in range(words)) + "\nSay hi."


def first_token_s(http: httpx.Client, key: str, text: str, started: float, **fields: Any) -> float:
    """Seconds from `started` (a perf_counter) to the first output text delta of a streamed create."""
    body = {"input": text, "max_output_tokens": 16, "temperature": 0, "stream": True, "store": False, **fields}
    with http.stream("POST", "/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}) as reply:
        reply.raise_for_status()
        first: float | None = None
        for line in reply.iter_lines():
            if first is None and line.startswith("data:") and '"response.output_text.delta"' in line:
                first = time.perf_counter() - started
            if line.startswith("data:") and ('"response.completed"' in line or '"response.incomplete"' in line):
                break
    assert first is not None, "no output text"
    return first


def conversation(http: httpx.Client, items: int, seed: int) -> str:
    """A new conversation of tenant A holding `items` messages of 30 random words each (20 a call)."""
    rng = random.Random(seed)
    headers = {"authorization": f"Bearer {KEYS[0]}"}
    reply = http.post("/v1/conversations", json={}, headers=headers)
    reply.raise_for_status()
    conversation_id: str = reply.json()["id"]
    for start in range(0, items, 20):
        batch = [
            {
                "type": "message",
                "role": "user" if index % 2 == 0 else "assistant",
                "content": f"{index}. " + " ".join(rng.choice(WORDS) for _ in range(30)),
            }
            for index in range(start, min(start + 20, items))
        ]
        http.post(
            f"/v1/conversations/{conversation_id}/items", json={"items": batch}, headers=headers
        ).raise_for_status()
    return conversation_id


def timed_into(result: list[float], http: httpx.Client, started: float, fields: dict[str, Any]) -> None:
    """A's create (on a thread): its first token's time into `result`."""
    result.append(first_token_s(http, KEYS[0], "", started, **fields))


class HealthProbe:
    """GET /health every 50 ms on its own connection while a round runs: its slowest answer is how long the API
    node's event loop was held (rendering, truncation, loading a conversation...)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=900) as http:
            while not self._stop.wait(0.05):
                started = time.perf_counter()
                http.get("/health").raise_for_status()
                self.slowest = max(self.slowest, time.perf_counter() - started)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(
    checkout: Path | None, words: int, rounds: int, delay: float, directory: Path, items: int = 0
) -> dict[str, Any]:
    env = {
        "RESPONSES_API_KEYS": ",".join(KEYS),
        "RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'admission.db'}",
    }
    # That checkout's code: `python -m app.cli` run from its folder (env -C) imports its `app`.
    wrapper = ["env", "-C", str(checkout or Path.cwd()), sys.executable, "-m"]
    server = ServerProcess(env, directory / "server.log", cli=Path("app.cli"), wrapper=wrapper).start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=900) as http:
            first_token_s(http, KEYS[1], "Say hi.", time.perf_counter())  # warm-up: the model loads on first use
            alone = [first_token_s(http, KEYS[1], "Say hi.", time.perf_counter()) for _ in range(rounds)]
            beside: list[float] = []
            long_first: list[float] = []
            held: list[float] = []
            for round_ in range(rounds):
                # A's long prompt: random words, or its turn on a conversation of `items` (truncation auto).
                fields: dict[str, Any] = {"input": long_text(words, seed=round_ + 1)}
                if items:
                    fields = {"input": "Say hi.", "truncation": "auto"}
                    fields["conversation"] = conversation(http, items, seed=round_ + 1)
                result: list[float] = []
                with HealthProbe(server.base_url) as probe:
                    started = time.perf_counter()
                    thread = threading.Thread(target=timed_into, args=(result, http, started, fields))
                    thread.start()
                    time.sleep(delay)
                    b_started = time.perf_counter()
                    beside.append(first_token_s(http, KEYS[1], "Say hi.", b_started))
                    thread.join()
                long_first.append(result[0] - (b_started - started))  # from B's send, as B's figure
                held.append(probe.slowest)
    finally:
        server.stop()
    return {
        "checkout": str(checkout or Path.cwd()),
        "b_first_token_alone_s": statistics.median(alone),
        "b_first_token_beside_s": statistics.median(beside),
        "ratio": statistics.median(beside) / statistics.median(alone),
        "a_first_token_after_b_sent_s": statistics.median(long_first),
        "b_before_a_rounds": sum(b < a for b, a in zip(beside, long_first, strict=True)),
        "health_slowest_s": max(held),
        "rounds": rounds,
        "b_beside_s": beside,
        "a_after_b_sent_s": long_first,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=7000, help="A's input, in random words (about as many tokens)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between A's create and B's")
    parser.add_argument("--items", type=int, default=0, help="A's turn on a conversation of this many items instead")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured first on its own server")
    args = parser.parse_args()
    results = []
    long_one = f"A's {args.words}-word prompt"
    if args.items:
        long_one = f"A's turn on a {args.items}-item conversation (truncation auto)"
    for checkout in ([args.baseline.resolve()] if args.baseline else []) + [None]:
        with tempfile.TemporaryDirectory(prefix="bench-admission-") as directory:
            result = measure(checkout, args.words, args.rounds, args.delay, Path(directory), args.items)
        results.append(result)
        print(
            f"{result['checkout']}: B's first token alone {result['b_first_token_alone_s']:.2f} s, beside {long_one} "
            f"{result['b_first_token_beside_s']:.2f} s (ratio {result['ratio']:.1f}); "
            f"A's first token {result['a_first_token_after_b_sent_s']:.2f} s after B's create was sent; "
            f"B first in {result['b_before_a_rounds']} of {args.rounds} rounds; slowest GET /health "
            f"{result['health_slowest_s']:.2f} s",
            flush=True,
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
