"""The issue's figures (issue 14), read from the JSON `bench.run` collects, as rows of the table: ours stored,
ours `store: false`, llama-server, the target, and what limits each figure when it misses (the notes below come
from profiles and measurements on the 2-core VM; they are printed only for a figure that misses).

Figures other lanes measure plug in as `results[part]` dicts: `reads` in bench/reads.py's shape, and any module
that returns `{"figures": [{"name", "unit", "stored", "unstored", "peer", "target": {"op", "value"}, "note"}]}`
(events, engine, prefill: see PLUGINS in bench/run.py)."""

from __future__ import annotations

from typing import Any

from bench.report import Figure, Report, Target

AT_LEAST_PEER = Target(">=")
AT_MOST_PEER = Target("<=")

NOTES = {
    "stream": "a 2-core machine: the SDK client, the server's event loop and llama.cpp's 2 threads share 2 cores, "
    "and llama.cpp's barrier waits whenever a thread is preempted (py-spy: bench/stream_profile.py)",
    "scaling": "decoding is compute-bound on 2 cores: a step of 8 sequences costs ~6x a step of one",
    "turns": "every turn after the first reads only its new tokens (~25), but attends over a context ~8x longer by "
    "turn 8, and attention grows with it; llama-server does the same work and is at ~1.37",
    "prefill": "what a turn reads is the template's end of the previous answer, the new message and the next opening; "
    "a token more or less comes from where an answer re-tokenizes differently from how it was generated",
    "reads": "per-request Python in one uvicorn process: FastAPI's dependency and parameter handling ~28%, the ORM "
    "~15%, routing ~10%, pydantic ~10% (py-spy); one Postgres round trip, no transaction (bench/reads.py)",
    "ttft": "stored: two transactions (the row, the claim) before the first token (the cancel check is a read "
    "beside the prefill now); "
    "store:false: event-loop hops and the SDK on the same 2 cores (bench/stream_profile.py)",
    "kv": "each sequence may use the whole context (8,192 tokens) and reserves it (split KV: as fast or faster than "
    "unified here, bench/kv_layout.py); llama-server splits one 8,192-cell pool among 4 slots (2,048 tokens each)",
    "events": "a batch is flushed every EVENT_FLUSH_MS or EVENT_FLUSH_EVENTS events: slow streams write more often",
    "stall": "a long prompt is read in chunks between decode steps; its prefix is saved at its end",
}


def _get(results: dict[str, Any], *path: str) -> Any:
    """results[path[0]][path[1]]... or None where any step is missing (a part not run, a peer left out)."""
    value: Any = results
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _row(
    name: str,
    unit: str,
    values: list[float | None],
    target: Target | None = None,
    *,
    ratio_to_peer: bool = True,
    note: str = "",
) -> Figure:
    """A row from [stored, unstored, llama-server]."""
    stored, unstored, peer = values
    return Figure(name, unit, stored, unstored, peer, target, ratio_to_peer=ratio_to_peer, note=note)


def _minus(value: float | None, baseline: float | None) -> float | None:
    return None if value is None or baseline is None else value - baseline


def _mean_after_first(values: list[float] | None) -> float | None:
    """Prompt tokens read per turn after the first: the turns that could reuse an earlier one."""
    return None if not values or len(values) < 2 else sum(values[1:]) / len(values[1:])


def streaming(results: dict[str, Any], report: Report) -> None:
    path = ("stream", "stored"), ("stream", "unstored"), ("stream", "llama_server")
    values = [_get(results, *key, "tokens_per_s") for key in path]
    report.add(_row("1 stream, streamed tokens/s", "tok/s", values, AT_LEAST_PEER, note=NOTES["stream"]))
    raw = _get(results, "raw", "tokens_per_s")
    if raw:
        over_raw = [None if value is None else value / raw for value in values]
        report.add(_row("1 stream ÷ raw llama_cpp.Llama", "", over_raw, ratio_to_peer=False))


def scaling(results: dict[str, Any], report: Report) -> None:
    """8 streams over 1 (the target), and 32 over 1 where the run had them (bench.run --gpu)."""
    sides = ("stored", "unstored", "llama_server")
    for count, target in (("8", AT_LEAST_PEER), ("32", None)):
        many = [_get(results, "concurrency", side, count) for side in sides]
        if not any(many):
            continue
        report.add(_row(f"{count} concurrent streams, aggregate", "tok/s", many))
        over_1: list[float | None] = []
        for side, aggregate in zip(sides, many, strict=True):
            one = _get(results, "concurrency", side, "1")
            over_1.append(aggregate / one if aggregate and one else None)
        note = NOTES["scaling"] if target else ""
        report.add(_row(f"{count} streams ÷ 1 stream", "x", over_1, target, note=note))


def conversations(results: dict[str, Any], report: Report) -> None:
    keys = ("chained", "stateless", "llama_server_stateless")
    turns = [_get(results, "conversations", key, "turn8_over_turn1") for key in keys]
    sizes = results.get("sizes", {})
    count, last = sizes.get("conversations", 8), sizes.get("turns", 8)
    name = f"{count} conversations, turn {last} ÷ turn 1 (chained | resent)"
    report.add(_row(name, "x", turns, Target("<=", 1.3), note=NOTES["turns"]))
    read = [_mean_after_first(_get(results, "conversations", key, "prefilled_tokens_per_turn")) for key in keys]
    report.add(_row("prompt tokens read per turn after the first", "tok", read, AT_MOST_PEER, note=NOTES["prefill"]))


def reads(results: dict[str, Any], report: Report) -> None:
    """GET one response and the list, over a bare FastAPI endpoint; stored responses only."""
    for database in ("postgres", "sqlite"):
        production = database == "postgres"
        for route, label in (("get_response", "GET /v1/responses/{id}"), ("list_responses", "GET /v1/responses")):
            figure = _get(results, "reads", database, route)
            if figure is None:
                continue
            target = Target(">=", 0.35) if production and route == "get_response" else None
            report.add(
                Figure(
                    f"{label} ÷ bare FastAPI, {database}", "x", figure["over_bare"], target=target, note=NOTES["reads"]
                )
            )
            p99_target = Target("<=", 20.0) if production and route == "get_response" else None
            report.add(
                Figure(
                    f"{label} p99, {database}, 16 connections",
                    "ms",
                    figure["p99_ms"],
                    target=p99_target,
                    note=NOTES["reads"],
                )
            )


def first_token(results: dict[str, Any], report: Report) -> None:
    raw = _get(results, "raw", "ttft_ms")
    peer = _minus(_get(results, "stream", "llama_server", "ttft_ms"), raw)
    for mode, section, bound in (("embedded", "stream", 10.0), ("distributed", "distributed", 30.0)):
        if section not in results:
            continue
        ours = [_minus(_get(results, section, side, "ttft_ms"), raw) for side in ("stored", "unstored")]
        # llama-server is one process: its figure sits beside our embedded one.
        report.add(
            _row(
                f"time to first token - raw llama.cpp, {mode}",
                "ms",
                [*ours, peer if mode == "embedded" else None],
                Target("<=", bound),
                ratio_to_peer=False,
                note=NOTES["ttft"],
            )
        )


def memory(results: dict[str, Any], report: Report) -> None:
    rss = _get(results, "memory") or {}
    report.add(
        Figure(
            "RSS, embedded server (model + KV)",
            "MB",
            rss.get("embedded_rss_mb"),
            None,
            _get(rss, "llama_server", "rss_mb"),
        )
    )
    if "worker_rss_minus_model_mb" in rss:
        report.add(Figure("RSS, worker - model file", "MB", rss["worker_rss_minus_model_mb"]))
        report.add(Figure("RSS, distributed API node", "MB", rss.get("api_distributed_rss_mb")))
    ours_kv = _get(rss, "ours", "kv_mb_per_sequence")
    peer_kv = _get(rss, "llama_server", "kv_mb_per_sequence")
    if ours_kv is not None or peer_kv is not None:
        report.add(
            Figure("KV memory reserved per sequence", "MB", ours_kv, None, peer_kv, AT_MOST_PEER, note=NOTES["kv"])
        )


def stall(results: dict[str, Any], report: Report) -> None:
    ours = _get(results, "stall", "stored", "max_gap_ms")
    peer = _get(results, "stall", "llama_server", "max_gap_ms")
    tokens = _get(results, "stall", "stored", "prompt_tokens") or _get(
        results, "stall", "llama_server", "prompt_tokens"
    )
    name = f"largest gap in a stream while a {tokens:,.0f}-token prompt is read" if tokens else "long-prompt stall"
    report.add(Figure(name, "ms", ours, None, peer, AT_MOST_PEER, note=NOTES["stall"]))
    # Prefill beside a running stream: the long request's whole time (its prompt read, 16 tokens answered).
    ours_read = _get(results, "stall", "stored", "long_request_ms")
    peer_read = _get(results, "stall", "llama_server", "long_request_ms")
    if ours_read is not None or peer_read is not None:
        report.add(Figure("  that prompt's request, read and 16 tokens answered", "ms", ours_read, None, peer_read))


def cancel(results: dict[str, Any], report: Report) -> None:
    median = _get(results, "cancel", "median_ms")
    if median is not None:
        report.add(Figure("cancel: POST /cancel until the stopped response", "ms", median))


COSTS = (
    ("per_token", "api_cpu_s", "API node CPU per token", "ms", 1000.0),
    ("per_token", "worker_cpu_s", "worker CPU per token (llama.cpp included)", "ms", 1000.0),
    ("per_token", "redis_publishes", "Redis PUBLISH per token", "", 1.0),
    ("per_request", "redis_commands", "Redis commands per request", "", 1.0),
    ("per_request", "postgres_write_transactions", "Postgres write transactions per request", "", 1.0),
    ("per_request", "postgres_rows", "Postgres rows written per request", "", 1.0),
)


def costs(results: dict[str, Any], report: Report) -> None:
    """Distributed mode, per streamed request or token: the capacity note's inputs (deploy/README.md)."""
    for scope, key, name, unit, scale in COSTS:
        values = [_get(results, "costs", path, scope, key) for path in ("stored", "unstored")]
        scaled = [None if value is None else value * scale for value in values]
        report.add(_row(name, unit, [*scaled, None]))


def events(results: dict[str, Any], report: Report) -> None:
    """bench/event_writes.py: writes per token of a background stream (the only kind whose events are stored)."""
    batched = _get(results, "events", "stream_writes", "batched", "writes_per_token")
    before = _get(results, "events", "stream_writes", "one_event_per_write", "writes_per_token")
    report.add(
        Figure("background stream: DB writes per token", "", batched, target=Target("<=", 0.25), note=NOTES["events"])
    )
    report.add(Figure("the same, one event per transaction (before)", "", before))
    for writers, row in (_get(results, "events", "event_rate") or {}).items():
        for key, rate in row.items():
            if key.endswith("_over_1"):
                batch = key.removeprefix("batch_").removesuffix("_over_1")
                per_s = row[f"batch_{batch}"]["events_per_s"]
                report.add(
                    Figure(
                        f"events/s one Postgres takes, by {writers.replace('_', ' ')}, batches of {batch}",
                        "ev/s",
                        per_s,
                    )
                )
                report.add(Figure("  the same ÷ one event per transaction", "x", rate))


def plugged(results: dict[str, Any], report: Report, part: str) -> None:
    """Rows a plug-in module gave in the table's own shape."""
    for row in _get(results, part, "figures") or []:
        target = row.get("target")
        report.add(
            Figure(
                row["name"],
                row.get("unit", ""),
                row.get("stored"),
                row.get("unstored"),
                row.get("peer"),
                Target(target["op"], target.get("value"), target.get("factor", 1.0)) if target else None,
                note=row.get("note", ""),
            )
        )


def figures_from(results: dict[str, Any]) -> Report:
    """Every figure present in `results`, in the issue's order; absent ones are simply not rows."""
    profiles = {
        label: [(frame, share) for frame, share in frames] for label, frames in results.get("profiles", {}).items()
    }
    report = Report(left_out=list(results.get("left_out", [])), profiles=profiles)
    if "stream" in results:
        streaming(results, report)
    if "concurrency" in results:
        scaling(results, report)
    if "conversations" in results:
        conversations(results, report)
    if "reads" in results:
        reads(results, report)
    if "stream" in results or "distributed" in results:
        first_token(results, report)
    if "memory" in results:
        memory(results, report)
    if "stall" in results:
        stall(results, report)
    if "cancel" in results:
        cancel(results, report)
    if "costs" in results:
        costs(results, report)
    if "events" in results:
        events(results, report)
    for part in ("engine", "pool", "prefill", "gpu"):
        plugged(results, report, part)
    return report
