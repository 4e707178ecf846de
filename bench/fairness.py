"""Fair scheduling (issue 27, finding 1): how long one tenant's foreground create waits while another tenant has N
background creates queued, against the same create on an idle server, both measured in this run.

    .venv/bin/python -m bench.fairness [--backlog 200] [--tokens 16] [--rounds 3]

Starts this checkout's embedded server (`python -m app.cli serve`, the shipped SmolLM2 model, 2 threads) with two
keys. Tenant B's streamed create ("Say hi.", --tokens output tokens at most) is timed alone (to its first output
token and to its end, medians of --rounds); then tenant A queues --backlog background creates (--tokens each, as
the finding's), and B's create is timed again (each sent while A's backlog is still queued). Prints both, their
ratios (the first token's is the wait: B's own prefill, after which its decode shares steps with A's running
jobs), how many of A's jobs each loaded create let start before it ended (A's left the queue meanwhile), and how
many were still queued when it ended. Before fair scheduling B waited for A's whole backlog (53.6 s against 0.5 s
alone, 200 jobs).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.testing.servers import ServerProcess

KEYS = ("tenant-a", "tenant-b")
PROMPT = "Say hi."


def create(http: httpx.Client, key: str, tokens: int, **fields: Any) -> dict[str, Any]:
    reply = http.post(
        "/v1/responses",
        json={"input": PROMPT, "max_output_tokens": tokens, "temperature": 0, **fields},
        headers={"authorization": f"Bearer {key}"},
    )
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    return body


@dataclass(frozen=True)
class StreamTimes:
    """B's streamed create, in seconds from its send."""

    #: To `response.in_progress`: embedded mode sends it once the job holds one of the model's places.
    started: float
    #: To each output text delta.
    deltas: list[float]
    end: float


def output_times(http: httpx.Client, tokens: int) -> StreamTimes:
    """B's streamed create, timed."""
    sent = time.perf_counter()
    started: float | None = None
    deltas: list[float] = []
    body = {"input": PROMPT, "max_output_tokens": tokens, "temperature": 0, "stream": True}
    headers = {"authorization": f"Bearer {KEYS[1]}"}
    with http.stream("POST", "/v1/responses", json=body, headers=headers) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if started is None and line.startswith("data:") and '"response.in_progress"' in line:
                started = time.perf_counter() - sent
            if line.startswith("data:") and '"response.output_text.delta"' in line:
                deltas.append(time.perf_counter() - sent)
            # 16 tokens may cut the answer short (incomplete): its end all the same, not the connection's close.
            if line.startswith("data:") and ('"response.completed"' in line or '"response.incomplete"' in line):
                break
    assert started is not None and deltas, "no output text"
    return StreamTimes(started, deltas, time.perf_counter() - sent)


def timed_foreground(http: httpx.Client, tokens: int) -> tuple[float, float]:
    """B's streamed create: (seconds to its first output token, seconds to its end)."""
    times = output_times(http, tokens)
    return times.deltas[0], times.end


def statuses(http: httpx.Client, ids: list[str]) -> dict[str, int]:
    """How many of A's responses are in each status now (read concurrently: the backlog moves meanwhile)."""

    def status(response_id: str) -> str:
        reply = http.get(f"/v1/responses/{response_id}", headers={"authorization": f"Bearer {KEYS[0]}"})
        value: str = reply.json()["status"]
        return value

    counts: dict[str, int] = {}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for value in pool.map(status, ids):
            counts[value] = counts.get(value, 0) + 1
    return counts


def start_server(backlog: int, directory: Path) -> ServerProcess:
    """This checkout's embedded server, whatever `llama-responses` is installed, with the two tenants' keys."""
    env = {
        "RESPONSES_API_KEYS": ",".join(KEYS),
        "RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'fairness.db'}",
        # The backlog is the point: the cap stays above it.
        "RESPONSES_MAX_QUEUED_BACKGROUND_PER_TENANT": str(backlog + 1),
    }
    return ServerProcess(env, directory / "server.log", cli=Path("app.cli"), wrapper=[sys.executable, "-m"]).start()


def queue_backlog(http: httpx.Client, backlog: int, tokens: int) -> list[str]:
    """Tenant A's `backlog` background creates of `tokens` tokens each: their ids."""
    return [create(http, KEYS[0], tokens, background=True)["id"] for _ in range(backlog)]


def cancel_all(http: httpx.Client, ids: list[str]) -> None:
    """Cancel A's backlog: room for the next round."""
    for response_id in ids:
        http.post(f"/v1/responses/{response_id}/cancel", headers={"authorization": f"Bearer {KEYS[0]}"})


def measure(backlog: int, tokens: int, rounds: int, directory: Path) -> dict[str, Any]:
    server = start_server(backlog, directory)
    try:
        with httpx.Client(base_url=server.base_url, timeout=600) as http:
            timed_foreground(http, tokens)  # warm-up: the model loads on first use
            alone = [timed_foreground(http, tokens) for _ in range(rounds)]
            loaded: list[tuple[float, float]] = []
            left_queue: list[int] = []
            still_queued: list[int] = []
            for _ in range(rounds):
                ids = queue_backlog(http, backlog, tokens)
                before = statuses(http, ids).get("queued", 0)
                loaded.append(timed_foreground(http, tokens))
                after = statuses(http, ids)
                left_queue.append(before - after.get("queued", 0))
                still_queued.append(after.get("queued", 0))
                if before < backlog // 2:
                    print(f"note: only {before} of A's {backlog} were still queued when B's create was sent")
                cancel_all(http, ids)
    finally:
        server.stop()
    ttft_alone, ttft_loaded = (statistics.median(first for first, _ in runs) for runs in (alone, loaded))
    end_alone, end_loaded = (statistics.median(end for _, end in runs) for runs in (alone, loaded))
    return {
        "backlog": backlog,
        "tokens": tokens,
        "first_token_alone_s": ttft_alone,
        "first_token_loaded_s": ttft_loaded,
        "first_token_ratio": ttft_loaded / ttft_alone,
        "end_alone_s": end_alone,
        "end_loaded_s": end_loaded,
        "end_ratio": end_loaded / end_alone,
        "a_jobs_started_while_b_waited": left_queue,
        "a_jobs_still_queued_at_b_end": still_queued,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as directory:
        result = measure(args.backlog, args.tokens, args.rounds, Path(directory))
    print(
        f"tenant B's streamed create ({args.tokens} tokens at most), median of {args.rounds}, alone -> with tenant "
        f"A's {args.backlog} background creates queued: first token {result['first_token_alone_s']:.2f} s -> "
        f"{result['first_token_loaded_s']:.2f} s (ratio {result['first_token_ratio']:.2f}); end "
        f"{result['end_alone_s']:.2f} s -> {result['end_loaded_s']:.2f} s (ratio {result['end_ratio']:.2f})"
    )
    print(
        f"A's jobs started while B's create ran: {result['a_jobs_started_while_b_waited']}; "
        f"still queued: {result['a_jobs_still_queued_at_b_end']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
