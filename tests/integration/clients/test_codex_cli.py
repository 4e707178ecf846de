"""A real agent client: Codex CLI (`codex exec`) against the embedded server and the shipped model."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
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
        "RESPONSES_METRICS_PUBLIC": "true",
    }
    server = ServerProcess(env, directory / "server.log").start()
    yield server
    server.stop()


def codex_home(tmp_path: Path, server: ServerProcess, *, websockets: bool = False) -> Path:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "SmolLM2-135M-Instruct.Q4_1"\n'
        'model_provider = "local"\n\n'
        "[model_providers.local]\n"
        'name = "llama-responses"\n'
        f'base_url = "{server.base_url}/v1"\n'
        'wire_api = "responses"\n'
        # Codex waits for its warm-up only 15 s (websocket_connect_timeout_ms) and hears nothing for at most 5 min
        # (stream_idle_timeout_ms) before it gives that socket up and opens another for the turn: a cold
        # ~9k-token prefill on a small, busy machine can take longer than either.
        + (
            "supports_websockets = true\nwebsocket_connect_timeout_ms = 900000\nstream_idle_timeout_ms = 900000\n"
            if websockets
            else ""
        )
    )
    return home


def test_codex_exec_completes_a_turn(codex: Path, codex_server: ServerProcess, tmp_path: Path) -> None:
    home = codex_home(tmp_path, codex_server)
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


class AppServer:
    """`codex app-server`: Codex's JSON-RPC over stdio (one message a line), the way an editor drives a session of
    several turns in one process."""

    def __init__(self, codex: Path, home: Path, workdir: Path) -> None:
        self.log_path = home / "app-server.log"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [str(codex), "app-server"],
                cwd=workdir,
                env={**os.environ, "CODEX_HOME": str(home)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.messages.put(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def wait_for(self, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            try:
                message = self.messages.get(timeout=CODEX_TURN_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(
                    f"Codex said nothing for {CODEX_TURN_TIMEOUT_S} s; it said {self.seen[-5:]}"
                ) from None
            self.seen.append(message)
            if matches(message):
                return message

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        number = self.next_id
        self.send({"id": number, "method": method, "params": params})
        reply = self.wait_for(lambda message: message.get("id") == number and "method" not in message)
        assert "error" not in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def turn(self, thread_id: str, text: str) -> dict[str, Any]:
        self.request("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]})
        return self.wait_for(lambda message: message.get("method") == "turn/completed")

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def websocket_connections(server: ServerProcess) -> float:
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=30).text
    found = re.search(r"^llama_responses_websocket_connections_total (\S+)$", metrics, re.MULTILINE)
    assert found is not None, metrics
    return float(found.group(1))


def test_codex_with_websockets_holds_one_socket_for_a_session(
    codex: Path, codex_server: ServerProcess, tmp_path: Path
) -> None:
    """Codex's WebSocket mode: its warm-up (`generate: false`) and two turns of one thread, on one connection."""
    home = codex_home(tmp_path, codex_server, websockets=True)
    workdir = tmp_path / "work"
    workdir.mkdir()
    before = websocket_connections(codex_server)
    app = AppServer(codex, home, workdir)
    try:
        app.request("initialize", {"clientInfo": {"name": "llama-responses-tests", "version": "1"}})
        app.send({"method": "initialized"})
        thread = app.request("thread/start", {"cwd": str(workdir), "approvalPolicy": "never", "sandbox": "read-only"})
        thread_id = thread["thread"]["id"]
        for text in ("Say hello.", "Say goodbye."):
            completed = app.turn(thread_id, text)
            assert completed["params"]["turn"]["status"] == "completed", completed
    finally:
        app.close()
    assert websocket_connections(codex_server) - before == 1, app.log_path.read_text()[-4000:]
    usage = [
        message["params"]["tokenUsage"]["last"]
        for message in app.seen
        if message.get("method") == "thread/tokenUsage/updated"
    ]
    # The second turn continued the first on the socket: all of the first's input came from the cache.
    assert usage[-1]["cachedInputTokens"] >= usage[0]["inputTokens"], usage
    log = codex_server.log_path.read_text()
    assert "ERROR" not in log and "Traceback" not in log, log
