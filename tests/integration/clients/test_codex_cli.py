"""A real agent client: Codex CLI (`codex exec`) against the embedded server and the shipped model."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testing.databases import sqlite_url
from app.testing.servers import ServerProcess

pytestmark = pytest.mark.integration

CODEX_PACKAGE = "@openai/codex"
#: npm installs here once per machine (the package carries its own binary, ~100 MB).
CODEX_PREFIX = Path.home() / ".cache" / "llama-responses" / "codex"
#: Codex sends ~9k tokens of instructions and tools before the first user word (SmolLM2's tokenizer), more
#: than the shipped model's trained 8192; llama.cpp runs it past that, at some cost in quality.
CODEX_N_CTX = "16384"
CODEX_TURN_TIMEOUT_S = 600


def codex_binary() -> Path | None:
    if shutil.which("npm") is None:
        return None
    binary = CODEX_PREFIX / "node_modules" / ".bin" / "codex"
    if not binary.exists():
        CODEX_PREFIX.mkdir(parents=True, exist_ok=True)
        installed = subprocess.run(
            ["npm", "install", "--prefix", str(CODEX_PREFIX), "--no-audit", "--no-fund", CODEX_PACKAGE],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if installed.returncode != 0:
            return None
    return binary if binary.exists() else None


@pytest.fixture(scope="module")
def codex() -> Path:
    binary = codex_binary()
    if binary is None:
        pytest.skip(f"npm is not available or could not install {CODEX_PACKAGE}; the Codex CLI test needs it")
    return binary


@pytest.fixture(scope="module")
def codex_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("codex-server")
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(directory),
        "RESPONSES_N_CTX": CODEX_N_CTX,
        # Codex sends neither a temperature nor an output cap: at temperature 1 the small model may ramble
        # to the end of the context (minutes here), and a turn cut short is retried by Codex.
        "RESPONSES_DEFAULT_TEMPERATURE": "0",
        "RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS": "512",
        # One llama.cpp thread: with two on two cores, Codex and the test runner contend with its spin-waits
        # and the ~9k-token prefill takes minutes instead of about a minute and a half.
        "RESPONSES_N_THREADS": "1",
    }
    server = ServerProcess(env, directory / "server.log").start()
    yield server
    server.stop()


def test_codex_exec_completes_a_turn(codex: Path, codex_server: ServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "SmolLM2-135M-Instruct.Q4_1"\n'
        'model_provider = "local"\n\n'
        "[model_providers.local]\n"
        'name = "llama-responses"\n'
        f'base_url = "{codex_server.base_url}/v1"\n'
        'wire_api = "responses"\n'
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "Say hello."],
        cwd=workdir,
        env={**os.environ, "CODEX_HOME": str(home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CODEX_TURN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tokens used" in result.stdout + result.stderr
    log = codex_server.log_path.read_text()
    assert "ERROR" not in log and "Traceback" not in log, log
