"""Before bench/gpu/run.sh measures anything: where, if anywhere, does loading the model through the CUDA build
crash? The first H200 run lost every part to a segmentation fault at the first model load, with no stack, so the
steps narrow it down, cheapest first, each in a process of its own that imports no more than it needs:

    vocab         the C API alone (llama_model_load_from_file, vocabulary only): the library, no wrapper
    vocab-nogpu   the same with the GPU hidden (CUDA_VISIBLE_DEVICES=""): passing here and crashing above puts
                  the fault on the CUDA device path (device properties, the first CUDA context)
    llama         llama_cpp.Llama(vocab_only=True), verbose: the wrapper our tokenizer uses; llama.cpp's own log
                  is kept, so a crash shows the last thing it did
    bench         after importing all that bench.run imports, its first loads (ChatTokenizer, kv_bytes_per_token):
                  a crash here alone points at what those imports load beside llama.cpp
    offload       every layer offloaded, 8 tokens decoded

then whether the built llama-server answers. The first step a signal ends runs again under cuda-gdb, where there
is one, for its native stack. Each result is printed as it comes.

    python -m bench.gpu.preflight [--llama-server PATH]   # exit 0 all passed, 1 only llama-server failed,
                                                          # 2 a llama_cpp step failed (the parts would crash)
    python -m bench.gpu.preflight --step vocab            # one step, in this process
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STEP_TIMEOUT_S = 60
#: cuda-gdb reads the symbols of every library the step loads before it runs it: slower than the step.
DEBUGGER_TIMEOUT_S = 90
#: Lines of a failed step's output (and of cuda-gdb's) that the report keeps.
TAIL_LINES = 25
#: Steps whose environment differs from the caller's.
STEP_ENV = {"vocab-nogpu": {"CUDA_VISIBLE_DEVICES": ""}}


def model_path() -> str:
    """run.sh sets RESPONSES_MODEL_PATH; else the app's own lookup (the shipped model)."""
    configured = os.environ.get("RESPONSES_MODEL_PATH")
    if configured:
        return configured
    from app.config import Settings

    return str(Settings().resolved_model_path)


def vocab() -> str:
    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(model_path().encode(), params)
    if not model:
        raise SystemExit("llama_model_load_from_file returned NULL")
    tokens = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    llama_cpp.llama_model_free(model)
    devices = llama_cpp.llama_supports_gpu_offload()
    return f"{tokens} tokens in the vocabulary (GPU offload {'supported' if devices else 'not supported'})"


def wrapped() -> str:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model_path(), vocab_only=True, verbose=True)
    tokens = llm.n_vocab()
    llm.close()
    return f"Llama(vocab_only=True): {tokens} tokens"


def after_bench_imports() -> str:
    import bench.run  # noqa: F401  (what it loads beside llama.cpp is the point)
    from app.generation.tokenizer import ChatTokenizer
    from bench.peers import kv_bytes_per_token

    tokenizer = ChatTokenizer(Path(model_path()), n_ctx=None)
    return f"after bench.run's imports: n_ctx {tokenizer.n_ctx}, {kv_bytes_per_token()} KV bytes a token"


def offload() -> str:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model_path(), n_gpu_layers=-1, flash_attn=True, n_ctx=512, verbose=True)
    completion = llm.create_completion("The capital of France is", max_tokens=8, temperature=0)
    llm.close()
    assert isinstance(completion, dict)
    return f"8 tokens, every layer offloaded: {completion['choices'][0]['text']!r}"


STEPS: dict[str, Callable[[], str]] = {
    "vocab": vocab,
    "vocab-nogpu": vocab,
    "llama": wrapped,
    "bench": after_bench_imports,
    "offload": offload,
}


def llama_server(binary: Path) -> str:
    from bench.peers import LlamaServer
    from bench.workloads import sdk_client

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


def run_step(
    step: str, command: list[str], timeout_s: float = STEP_TIMEOUT_S, env: dict[str, str] | None = None
) -> Outcome:
    """`command` in a process of its own, with `env` over this one's; a timeout reads as a kill."""
    environment = {**os.environ, **(env or {})}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=environment)
    except subprocess.TimeoutExpired as error:
        output = error.stdout if isinstance(error.stdout, str) else ""
        return Outcome(step, -int(signal.SIGKILL), output, f"(timed out after {timeout_s:.0f} s)")
    return Outcome(step, done.returncode, done.stdout, done.stderr)


def step_command(step: str) -> list[str]:
    return [sys.executable, "-X", "faulthandler", "-m", "bench.gpu.preflight", "--step", step]


def native_stack(step: str) -> str:
    """The step again under cuda-gdb (it debugs host code too), for the native frames of its crash."""
    debugger = shutil.which("cuda-gdb")
    if debugger is None:
        return "(no cuda-gdb here for the native stack)"
    command = [debugger, "-batch", "-ex", "run", "-ex", "bt", "--args", *step_command(step)]
    outcome = run_step(step, command, DEBUGGER_TIMEOUT_S, STEP_ENV.get(step))
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
    status = 0
    debugged = False
    for step in STEPS:
        outcome = run_step(step, step_command(step), env=STEP_ENV.get(step))
        print(outcome.describe(), flush=True)
        if outcome.returncode != 0:
            status = 2
        if outcome.signalled and not debugged:  # one stack is enough, and each costs a minute or more
            debugged = True
            print(native_stack(step), flush=True)
    if args.llama_server is not None:
        try:
            print(llama_server(args.llama_server), flush=True)
        except Exception as error:  # reported, as the other steps' failures are
            print(f"llama-server: FAILED ({error})", flush=True)
            status = status or 1
    sys.exit(status)


if __name__ == "__main__":
    main()
