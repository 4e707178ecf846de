"""The chaos test, long (not a test; its short form is tests/faults/test_chaos.py): a mixed load and random
compound faults on two API nodes and two workers over a private Postgres and Redis, a fresh cluster per seed,
then the invariants (app/testing/chaos_checks.py).

    .venv/bin/python -m bench.chaos [--seed S] [--seeds N] [--duration 240] [--short] [--json chaos.json]

Prints each seed's report as it ends (the seed first, the figures, every violation with the faults around it,
the whole timeline) and a table of the figures per seed: faults injected, responses, 503s, time to quiet. A
failed seed replays with `--seed S`. Exits 1 if any seed broke an invariant.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.testing.chaos import ChaosReport, run_chaos
from app.testing.chaos_faults import SHORT_PLAN, FaultPlan
from app.testing.chaos_load import LoadPlan


def table(reports: list[ChaosReport]) -> str:
    rows = [
        "| seed | faults injected | responses | requests | 503s | time to quiet | CPU (cores) | violations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        figures = report.figures()
        quiet = f"{report.time_to_quiet_s} s" if report.time_to_quiet_s is not None else "never"
        broken = ", ".join(f"{name} {count}" for name, count in figures["violations"].items()) or "none"
        rows.append(
            f"| {report.seed} | {figures['faults_injected']} | {figures['responses']} | {report.requests} "
            f"| {report.answered_503} | {quiet} | {figures['cpu_cores']} | {broken} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, help="the first seed (default: a random one, printed)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, from --seed on")
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of load and faults per seed")
    parser.add_argument("--clients", type=int, default=LoadPlan().clients, help="client threads")
    parser.add_argument("--short", action="store_true", help="the CI form's faults (a partition first), to replay it")
    parser.add_argument("--json", type=Path, help="also write every seed's figures and violations here")
    args = parser.parse_args()
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    load = LoadPlan(clients=args.clients)
    reports: list[ChaosReport] = []
    started = time.monotonic()
    load_average = os.getloadavg()[0]
    for seed in range(first, first + args.seeds):
        print(f"chaos seed {seed}: {args.duration:.0f} s", flush=True)
        logs = Path(tempfile.mkdtemp(prefix=f"llama-responses-chaos-{seed}-"))
        report = run_chaos(seed, args.duration, logs, load=load, faults=SHORT_PLAN if args.short else FaultPlan())
        reports.append(report)
        print(report.render(), flush=True)
    print(f"\n{len(reports)} seeds in {time.monotonic() - started:.0f} s, load average {load_average:.1f} at the start")
    print(table(reports))
    if args.json:
        rows: list[dict[str, Any]] = [
            {**report.figures(), "violations": [vars(v) for v in report.violations], "timeline": report.timeline}
            for report in reports
        ]
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    sys.exit(0 if all(report.passed for report in reports) else 1)


if __name__ == "__main__":
    main()
