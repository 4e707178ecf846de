"""The chaos test's short form (the long one is bench/chaos.py): two API nodes and two workers on a private
Postgres and Redis under a mixed load, random compound faults from a seed, every invariant of
app/testing/chaos_checks.py strict, the bounds generous. A fixed seed and a random one, whose seed is in the
test's id and printed first, so that a failure replays with `python -m bench.chaos --short --seed S --duration 30`
(each seed on a fresh cluster: 1 to 1.5 minutes each on the 2-core machine).

Needs root (CI runs as root): the partitioned worker runs in a network namespace of the test's own, and the test
fails rather than skipping the partition.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest

from app.testing.chaos import run_chaos
from app.testing.chaos_faults import SHORT_PLAN
from app.testing.chaos_load import LoadPlan

pytestmark = pytest.mark.integration

DURATION_S = 30.0
RANDOM_SEED = random.SystemRandom().randrange(1_000_000)


@pytest.mark.parametrize("seed", [1, RANDOM_SEED], ids=lambda seed: f"seed{seed}")
def test_the_invariants_hold_under_random_compound_faults(seed: int) -> None:
    print(f"\nchaos seed {seed} ({DURATION_S:.0f} s)")
    logs = Path(tempfile.mkdtemp(prefix=f"llama-responses-chaos-{seed}-"))
    report = run_chaos(seed, DURATION_S, logs, load=LoadPlan(), faults=SHORT_PLAN, need_namespace=True)
    print(report.render())
    assert report.faults.get("worker_partition", 0) >= 1, "no partition happened"
    assert report.figures()["responses"] > 0, "no response was acknowledged: the load never ran"
    if not report.passed:  # the report alone: the seed, each violation, the faults around it, the timeline
        pytest.fail(report.render(), pytrace=False)
