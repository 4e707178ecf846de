"""Before bench/gpu/run.sh measures anything: does llama_cpp load the model through the library the run built, on
its own (vocabulary only: what our tokenizer does) and with every layer offloaded, and decode a few tokens; does
the built llama-server answer? Each step runs in a process of its own, with faulthandler on, so that a crash in one
is reported with the Python stack that led to it rather than ending the check; a step that a signal ended runs
again under cuda-gdb, where there is one, for the native stack.

    python -m bench.gpu.preflight [--llama-server PATH]     # every step; exit status 1 if one failed
    python -m bench.gpu.preflight --step vocab              # one step, in this process
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from app.config import Settings
from bench.peers import LlamaServer
from bench.workloads import sdk_client

STEP_TIMEOUT_S = 120
#: Lines of a failed step's output (and of cuda-gdb's) that the report keeps.
TAIL_LINES = 25


def vocab() -> str:
    llm = llama_cpp.Llama(model_path=str(Settings().resolved_model_path), vocab_only=True, verbose=True)
    tokens = llm.n_vocab()
    llm.close()
    return f"{tokens} tokens in the vocabulary"


def offload() -> str:
    path = str(Settings().resolved_model_path)
    llm = llama_cpp.Llama(model_path=path, n_gpu_layers=-1, flash_attn=True, n_ctx=512, verbose=True)
    completion = llm.create_completion("The capital of France is", max_tokens=8, temperature=0)
    llm.close()
    assert isinstance(completion, dict)
    return f"8 tokens, every layer offloaded: {completion['choices'][0]['text']!r}"


STEPS: dict[str, Callable[[], str]] = {"vocab": vocab, "offload": offload}


def llama_server(binary: Path) -> str:
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "llama-server.log"
        with LlamaServer(binary, 2, log, gpu=True) as peer, sdk_client(peer.base_url) as client:
            model = client.models.list().data[0].id
            answer = client.responses.create(model=model, input="Say hi.", max_output_tokens=16, temperature=0)
            return f"llama-server answered {answer.output_text!r}"


@dataclass(frozen=True)
class Outcome:
    step: str
    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def signalled(self) -> bool:
        """Ended by a signal (a segmentation fault: -11), not by an exception."""
        return self.returncode < 0

    def describe(self) -> str:
        if self.returncode == 0:
            lines = self.stdout.strip().splitlines()
            return f"{self.step}: ok, {lines[-1] if lines else 'no output'}"
        how = f"killed by {signal.Signals(-self.returncode).name}" if self.signalled else f"exit {self.returncode}"
        tail = (self.stdout + self.stderr).rstrip().splitlines()[-TAIL_LINES:]
        return "\n".join([f"{self.step}: FAILED ({how})", *tail])


def run_step(step: str, command: list[str], timeout_s: float = STEP_TIMEOUT_S) -> Outcome:
    """`command` in a process of its own; a timeout reads as a kill."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as error:
        output = error.stdout if isinstance(error.stdout, str) else ""
        return Outcome(step, -int(signal.SIGKILL), output, f"(timed out after {timeout_s:.0f} s)")
    return Outcome(step, done.returncode, done.stdout, done.stderr)


def native_stack(step: str) -> str:
    """The step again under cuda-gdb (it debugs host code too), for the native frames of its crash."""
    debugger = shutil.which("cuda-gdb")
    if debugger is None:
        return "(no cuda-gdb here for the native stack)"
    command = [debugger, "-batch", "-ex", "run", "-ex", "bt", "--args", sys.executable]
    outcome = run_step(step, [*command, "-m", "bench.gpu.preflight", "--step", step])
    output = outcome.stdout + outcome.stderr
    frames = [line for line in output.splitlines() if line.startswith("#") or "signal" in line.lower()]
    return "\n".join(frames[:TAIL_LINES]) or output[-2000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step", choices=sorted(STEPS), help="run this one step here")
    parser.add_argument("--llama-server", type=Path, help="also check that this llama-server answers")
    args = parser.parse_args()
    if args.step:
        print(STEPS[args.step]())
        return
    outcomes = [
        run_step(step, [sys.executable, "-X", "faulthandler", "-m", "bench.gpu.preflight", "--step", step])
        for step in STEPS
    ]
    for outcome in outcomes:
        print(outcome.describe())
        if outcome.signalled:
            print(native_stack(outcome.step))
    failed = [outcome for outcome in outcomes if outcome.returncode != 0]
    if args.llama_server is not None:
        try:
            print(llama_server(args.llama_server))
        except Exception as error:  # reported, as the other steps' failures are
            print(f"llama-server: FAILED ({error})")
            failed.append(Outcome("llama-server", 1, "", str(error)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
