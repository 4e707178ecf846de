"""Issue 27's fairness goal, measured as it is stated: with tenant A's background backlog queued and A's long prompt
being read, tenant B's foreground create waits no more than one decode step plus its own prefill.

    .venv/bin/python -m bench.fairness_goal [--backlog 500] [--long-words 7000] [--tokens 16] [--rounds 3]
                                            [--delay 1.0]

Starts this checkout's embedded server as bench/fairness.py does (two keys, SmolLM2, 2 threads). B's streamed
create ("Say hi.", --tokens output tokens at most) is timed alone first: its first output token is its own prefill
plus one step. Then, each round, A queues --backlog background creates (--tokens each), sends a streamed
`store: false` create of --long-words random words (bench/admission.py's text, about as many tokens; a new one each
round), and --delay seconds later, while A's prompt is being read, B's create is timed again: to its first output
token, to its end, and each gap between its consecutive output deltas (a decode step under this load; those that
came while A's prompt was still being read, where there are any, are the steps that carry a chunk of it).

Prints B's loaded first token, the goal's yardstick measured in the same run (B's first token alone + the median
loaded decode step), their ratio (goal: <= 1.0), how many of A's backlog started from A's long create to B's end,
and in how many rounds B's first token came before A's (otherwise B was not measured beside A's prefill).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.admission import long_text, timed_into
from bench.fairness import cancel_all, output_times, queue_backlog, start_server, statuses


def gaps(deltas: list[float]) -> list[float]:
    """Seconds between consecutive output deltas of one stream."""
    return [later - earlier for earlier, later in itertools.pairwise(deltas)]


def loaded_round(
    http: httpx.Client, backlog: int, long_words: int, tokens: int, delay: float, seed: int
) -> dict[str, Any]:
    """One round: A's backlog and long prompt, then B's create timed beside them."""
    ids = queue_backlog(http, backlog, tokens)
    before = statuses(http, ids)  # counted first: B is sent exactly --delay after A's long create
    long_first: list[float] = []
    started = time.perf_counter()
    fields = {"input": long_text(long_words, seed=seed)}
    thread = threading.Thread(target=timed_into, args=(long_first, http, started, fields))
    thread.start()
    time.sleep(delay)
    b_sent = time.perf_counter()
    times = output_times(http, tokens)
    deltas = times.deltas
    after = statuses(http, ids)
    thread.join()
    cancel_all(http, ids)
    a_first = long_first[0] - (b_sent - started)  # from B's send, as B's figures
    return {
        "b_sent_after_a_s": b_sent - started,
        # B's wait for one of the model's places, then the rest of its first token's wait: in the engine.
        "b_started_s": times.started,
        "b_first_token_s": deltas[0],
        "b_end_s": times.end,
        "b_gaps_s": gaps(deltas),
        # The steps that read a chunk of A's prompt beside the decode: the goal's "one decode step".
        "b_gaps_beside_prefill_s": gaps([delta for delta in deltas if delta <= a_first]),
        "a_first_token_after_b_sent_s": a_first,
        "a_backlog_queued_at_a_send": before.get("queued", 0),
        # Between A's long create and B's end: B's create did not wait for A's backlog.
        "a_backlog_started_meanwhile": before.get("queued", 0) - after.get("queued", 0),
    }


def measure(backlog: int, long_words: int, tokens: int, rounds: int, delay: float, directory: Path) -> dict[str, Any]:
    server = start_server(backlog, directory)
    try:
        with httpx.Client(base_url=server.base_url, timeout=900) as http:
            output_times(http, tokens)  # warm-up: the model loads on first use
            alone = [output_times(http, tokens) for _ in range(rounds)]
            loaded = [loaded_round(http, backlog, long_words, tokens, delay, seed) for seed in range(1, rounds + 1)]
    finally:
        server.stop()
    first_alone = statistics.median(times.deltas[0] for times in alone)
    step_alone = statistics.median(gap for times in alone for gap in gaps(times.deltas))
    first_loaded = statistics.median(round_["b_first_token_s"] for round_ in loaded)
    # Steps beside A's prefill where B had any (B admitted while A's prompt was read), else B's loaded steps.
    beside = [gap for round_ in loaded for gap in round_["b_gaps_beside_prefill_s"]]
    step_loaded = statistics.median(beside or [gap for round_ in loaded for gap in round_["b_gaps_s"]])
    yardstick = first_alone + step_loaded
    return {
        "backlog": backlog,
        "long_words": long_words,
        "tokens": tokens,
        "rounds": rounds,
        "b_first_token_alone_s": first_alone,
        "b_decode_step_alone_s": step_alone,
        "b_decode_step_loaded_s": step_loaded,
        "b_steps_beside_prefill": len(beside),
        "yardstick_s": yardstick,
        "b_first_token_loaded_s": first_loaded,
        "goal_ratio": first_loaded / yardstick,
        "b_started_loaded_s": statistics.median(round_["b_started_s"] for round_ in loaded),
        "b_end_alone_s": statistics.median(times.end for times in alone),
        "b_end_loaded_s": statistics.median(round_["b_end_s"] for round_ in loaded),
        "b_before_a_rounds": sum(
            round_["b_first_token_s"] < round_["a_first_token_after_b_sent_s"] for round_ in loaded
        ),
        "loaded": loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=500, help="A's queued background creates")
    parser.add_argument("--long-words", type=int, default=7000, help="A's long prompt, in random words (~tokens)")
    parser.add_argument("--tokens", type=int, default=16, help="output tokens of B's create and of A's backlog jobs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between A's long create and B's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fairness-goal-") as directory:
        result = measure(args.backlog, args.long_words, args.tokens, args.rounds, args.delay, Path(directory))
    print(
        f"tenant B's streamed create, median of {args.rounds}, beside A's {args.backlog} queued background creates "
        f"and A's {args.long_words}-word prompt being read: first token {result['b_first_token_loaded_s']:.2f} s; "
        f"goal's yardstick {result['yardstick_s']:.2f} s (B's first token alone "
        f"{result['b_first_token_alone_s']:.2f} s + one loaded decode step {result['b_decode_step_loaded_s']:.2f} s, "
        f"alone {result['b_decode_step_alone_s']:.2f} s); ratio {result['goal_ratio']:.2f} (goal <= 1.0)"
    )
    rounds = result["loaded"]
    print(
        f"B's wait for a place (to response.in_progress) {result['b_started_loaded_s']:.2f} s of its first token's; "
        f"B's end {result['b_end_alone_s']:.2f} s alone -> {result['b_end_loaded_s']:.2f} s loaded; "
        f"B first before A's long prompt in {result['b_before_a_rounds']} of {args.rounds} rounds; "
        f"B's decode steps beside A's prefill {result['b_steps_beside_prefill']} (0: the step is B's after it); "
        f"A's backlog queued at A's long create {[round_['a_backlog_queued_at_a_send'] for round_ in rounds]}, "
        f"started from then to B's end {[round_['a_backlog_started_meanwhile'] for round_ in rounds]}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
