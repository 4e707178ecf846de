"""bench.run's table: ratios against llama-server, targets met or missed, rows from a run's JSON."""

from __future__ import annotations

from typing import Any

from bench import kv_pool
from bench.figures import figures_from
from bench.report import Figure, Report, Target, format_table


def test_a_target_on_llama_servers_figure_needs_every_one_of_ours() -> None:
    figure = Figure("tokens/s", "tok/s", stored=110.0, unstored=125.0, peer=120.0, target=Target(">="))
    assert figure.ratios() == [110.0 / 120.0, 125.0 / 120.0]
    assert figure.met() is False
    assert Figure("tokens/s", "tok/s", stored=121.0, unstored=125.0, peer=120.0, target=Target(">=")).met() is True


def test_a_fixed_bound_and_a_lower_is_better_target() -> None:
    assert Figure("turn 8 / 1", "x", stored=1.25, unstored=1.31, target=Target("<=", 1.3)).met() is False
    assert Figure("turn 8 / 1", "x", stored=1.25, unstored=1.3, target=Target("<=", 1.3)).met() is True
    assert Figure("gap", "ms", stored=40.0, peer=50.0, target=Target("<=", factor=0.5)).met() is False


def test_without_llama_server_a_relative_target_cannot_be_told_and_no_ratio_is_shown() -> None:
    figure = Figure("tokens/s", "tok/s", stored=110.0, unstored=125.0, target=Target(">="))
    assert figure.met() is None
    assert figure.ratios() == []
    assert Figure("over raw", "ms", stored=5.0, peer=4.0, ratio_to_peer=False).ratios() == []
    assert Figure("reported", "MB", stored=5.0).met() is None


def test_the_table_puts_ratios_and_verdicts_in_columns_and_notes_under_it() -> None:
    report = Report(
        left_out=["llama-server's figures: no binary"], profiles={"embedded server, stored": [("llama_decode", 0.69)]}
    )
    report.add(Figure("fast", "tok/s", 130.0, 128.0, 120.0, Target(">="), note="not printed: met"))
    report.add(Figure("slow", "x", 1.5, None, 1.4, Target("<=", 1.3), note="re-reads the answer"))
    lines = format_table(report).splitlines()
    header, rule, fast, slow = lines[:4]
    assert header.split(" | ")[0].strip() == "figure"
    assert set(rule) <= {"-", "+"}
    assert [cell.strip() for cell in fast.split(" | ")] == [
        "fast (tok/s)",
        "130",
        "128",
        "120",
        "1.08 / 1.07",
        "≥ llama-server",
        "yes",
    ]
    assert [cell.strip() for cell in slow.split(" | ")][2:] == ["—", "1.40", "1.07", "≤ 1.30", "NO"]
    text = "\n".join(lines)
    assert "- slow: re-reads the answer" in text
    assert "not printed" not in text
    assert "- llama-server's figures: no binary" in text
    assert "- embedded server, stored: llama_decode 69%" in text


def test_rows_from_a_runs_json() -> None:
    results: dict[str, Any] = {
        "left_out": [],
        "raw": {"tokens_per_s": 128.0, "ttft_ms": 8.0},
        "stream": {
            "stored": {"tokens_per_s": 110.0, "ttft_ms": 30.0},
            "unstored": {"tokens_per_s": 120.0, "ttft_ms": 15.0},
            "llama_server": {"tokens_per_s": 115.0, "ttft_ms": 12.0},
        },
        "concurrency": {
            "stored": {"1": 100.0, "8": 140.0},
            "unstored": {"1": 100.0, "8": 150.0},
            "llama_server": {"1": 100.0, "8": 145.0},
        },
        "conversations": {
            "chained": {"turn8_over_turn1": 1.2, "prefilled_tokens_per_turn": [90.0, 20.0, 30.0]},
            "stateless": {"turn8_over_turn1": 1.25, "prefilled_tokens_per_turn": [90.0, 24.0, 26.0]},
            "llama_server_stateless": {"turn8_over_turn1": 1.7, "prefilled_tokens_per_turn": [90.0, 25.0, 25.0]},
        },
        "events": {
            "stream_writes": {
                "batched": {"writes_per_token": 0.12},
                "one_event_per_write": {"writes_per_token": 1.01},
            },
            "event_rate": {
                "32_writers": {
                    "batch_1": {"events_per_s": 900.0},
                    "batch_32": {"events_per_s": 18000.0},
                    "batch_32_over_1": 20.0,
                }
            },
        },
        "engine": {
            "figures": [
                {"name": "prefix save pause", "unit": "ms", "stored": 9.0, "peer": 12.0, "target": {"op": "<="}}
            ]
        },
    }
    figures = {figure.name: figure for figure in figures_from(results).figures}
    stream = figures["1 stream, streamed tokens/s"]
    assert (stream.stored, stream.unstored, stream.peer, stream.met()) == (110.0, 120.0, 115.0, False)
    assert figures["8 streams ÷ 1 stream"].stored == 1.4
    assert figures["8 streams ÷ 1 stream"].met() is False  # 1.40 < llama-server's 1.45
    ttft = figures["time to first token - raw llama.cpp, embedded"]
    assert (ttft.stored, ttft.unstored, ttft.peer, ttft.met()) == (22.0, 7.0, 4.0, False)
    read = figures["prompt tokens read per turn after the first"]
    assert (read.stored, read.unstored, read.peer, read.met()) == (25.0, 25.0, 25.0, True)
    assert figures["8 conversations, turn 8 ÷ turn 1 (chained | resent)"].met() is True
    assert figures["background stream: DB writes per token"].met() is True
    assert figures["events/s one Postgres takes, by 32 writers, batches of 32"].stored == 18000.0
    assert figures["prefix save pause"].met() is True  # a plug-in's row, against llama-server's 12 ms
    assert "time to first token - raw llama.cpp, distributed" not in figures  # not measured: no row
    assert "32 concurrent streams, aggregate" not in figures  # a CPU run has no 32 streams


def test_a_gpu_runs_32_streams_and_the_long_prompts_request_are_rows() -> None:
    results: dict[str, Any] = {
        "concurrency": {
            "stored": {"1": 300.0, "8": 1500.0, "32": 3000.0},
            "unstored": {"1": 320.0, "8": 1600.0, "32": 3200.0},
            "llama_server": {"1": 500.0, "8": 2500.0, "32": 8000.0},
        },
        "stall": {
            "stored": {"max_gap_ms": 40.0, "long_request_ms": 90.0, "prompt_tokens": 4013},
            "llama_server": {"max_gap_ms": 30.0, "long_request_ms": 60.0, "prompt_tokens": 4013},
        },
    }
    figures = {figure.name: figure for figure in figures_from(results).figures}
    aggregate = figures["32 concurrent streams, aggregate"]
    assert (aggregate.stored, aggregate.unstored, aggregate.peer) == (3000.0, 3200.0, 8000.0)
    over_1 = figures["32 streams ÷ 1 stream"]
    assert (over_1.stored, over_1.unstored, over_1.peer, over_1.met()) == (10.0, 10.0, 16.0, None)  # reported
    assert figures["8 streams ÷ 1 stream"].target is not None  # the target stays on 8 streams
    request = figures["  that prompt's request, read and 16 tokens answered"]
    assert (request.stored, request.peer) == (90.0, 60.0)


def test_the_kv_pool_rows_meet_their_goals_against_llama_server() -> None:
    measured = {
        "pool_tokens": 32768,
        "kv_mb": 720.0,
        "sequences": 32,
        "rss_mb": {"ours": 1100.0, "llama_server": 900.0},
        "tokens_per_s": {"ours": {"8": 40.0, "16": 45.0}, "llama_server": {"8": 38.0, "16": 50.0}},
        "replay": {
            "ours_chained": {"turn8_over_turn1": 1.2, "latency_ms_per_turn": [1.0] * 8},
            "ours_stateless": {"turn8_over_turn1": 1.25, "latency_ms_per_turn": [1.0] * 8},
            "llama_server_stateless": {"turn8_over_turn1": 1.4, "latency_ms_per_turn": [1.0] * 8},
        },
    }
    figures = {figure.name: figure for figure in figures_from({"pool": {"figures": kv_pool.figures(measured)}}).figures}
    assert figures["aggregate tokens/s, 8 streams, same KV pool"].met() is True
    assert figures["aggregate tokens/s, 16 streams, same KV pool"].met() is False  # 45 < llama-server's 50
    replay = figures["turn 8 / turn 1, 32 conversations"]
    assert (replay.stored, replay.unstored, replay.peer, replay.met()) == (1.2, 1.25, 1.4, True)
    assert figures["conversations at once in today's 4 sequences' KV (32,768 cells, 720 MB)"].met() is True
