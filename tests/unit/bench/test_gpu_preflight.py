"""bench/gpu/preflight.py: a step that crashes is reported with how it ended and what it printed last."""

from __future__ import annotations

import sys

from bench.gpu.preflight import run_step


def test_a_step_that_works_reports_its_last_line() -> None:
    outcome = run_step("vocab", [sys.executable, "-c", "print('loading'); print('49152 tokens')"])
    assert outcome.returncode == 0
    assert outcome.describe() == "vocab: ok, 49152 tokens"


def test_a_segmentation_fault_is_a_signal_with_the_output_before_it() -> None:
    crash = "import os, signal, sys; print('llama_model_load: loading', file=sys.stderr, flush=True); "
    crash += "os.kill(os.getpid(), signal.SIGSEGV)"
    outcome = run_step("offload", [sys.executable, "-c", crash])
    assert outcome.signalled
    assert outcome.describe().splitlines() == ["offload: FAILED (killed by SIGSEGV)", "llama_model_load: loading"]


def test_an_exception_is_an_exit_status_and_a_hang_a_kill() -> None:
    raised = run_step("vocab", [sys.executable, "-c", "raise SystemExit('no model')"])
    assert not raised.signalled
    assert raised.describe().splitlines() == ["vocab: FAILED (exit 1)", "no model"]
    hung = run_step("offload", [sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert hung.describe().splitlines()[0] == "offload: FAILED (killed by SIGKILL)"
    assert "timed out" in hung.describe()


def test_a_step_runs_with_its_own_environment_over_the_callers() -> None:
    show = "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']), os.environ.get('PATH') is not None)"
    outcome = run_step("vocab-nogpu", [sys.executable, "-c", show], env={"CUDA_VISIBLE_DEVICES": ""})
    assert outcome.describe() == "vocab-nogpu: ok, '' True"
