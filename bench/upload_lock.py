"""Upload figures (not a test): how long another tenant's small writes wait while a 50 MB file is uploaded, on
SQLite (one writer at a time), against the same writes with no upload (measured in the same run).

    .venv/bin/python -m bench.upload_lock [--mb 50] [--rounds 3]

The app runs in-process (the unit tests' fake model) and uploads the file through POST /v1/files while a thread
writes a row every 20 ms into the same SQLite file on a connection of its own (another tenant's write, as SQLite
sees it: one short write transaction), each timed from BEGIN IMMEDIATE to its commit: the time it waited for the
writer lock. A thread, not a request: the upload's multipart parsing on the event loop would be timed too.
Before this change an upload's chunks were written in one transaction that held SQLite's writer lock for its whole
length (3.2 s for 50 MB while other tenants wrote); now each 1 MiB chunk is a transaction of its own, so that a
write waits for one chunk's insert at most.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from app.config import Settings
from app.db.migrations import upgrade_to_head
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

WRITE_EVERY_S = 0.02


@asynccontextmanager
async def _uploader(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=database_url, model_id="m", batch_interval_s=3600, _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b", timeout=600) as client,
    ):
        yield client


class Writer(threading.Thread):
    """A row written every WRITE_EVERY_S on a connection of its own, each write's wait for the lock timed."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.took: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("INSERT INTO bench_writes (at) VALUES (?)", (started,))
                connection.execute("COMMIT")
                self.took.append(time.monotonic() - started)
                time.sleep(WRITE_EVERY_S)
        finally:
            connection.close()


def _timed_writes(path: str, seconds: float) -> list[float]:
    writer = Writer(path)
    writer.start()
    time.sleep(seconds)
    writer.stop.set()
    writer.join()
    return writer.took


async def measure(path: str, size_mb: float, rounds: int) -> dict[str, list[float]]:
    data = b'{"custom_id": "x"}\n' * int(size_mb * 1e6 / 19)
    beside: list[float] = []
    uploads: list[float] = []
    async with _uploader(f"sqlite+aiosqlite:///{path}") as uploader:
        for _ in range(rounds):
            writer = Writer(path)
            writer.start()
            started = time.monotonic()
            reply = await uploader.post(
                "/v1/files", files={"file": ("big.jsonl", data, "application/jsonl")}, data={"purpose": "batch"}
            )
            reply.raise_for_status()
            uploads.append(time.monotonic() - started)
            writer.stop.set()
            await asyncio.to_thread(writer.join)
            beside += writer.took
    return {"beside": beside, "uploads": uploads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/bench.db"
        upgrade_to_head(f"sqlite+aiosqlite:///{path}")
        with sqlite3.connect(path) as setup:
            setup.execute("CREATE TABLE bench_writes (at REAL)")
        alone = _timed_writes(path, 3.0)
        figures = asyncio.run(measure(path, args.mb, args.rounds))
    beside = figures["beside"]
    upload_s = statistics.median(figures["uploads"])
    print(f"upload of {args.mb:g} MB: {upload_s:.2f} s (median of {args.rounds})")
    print(
        f"a write's wait for SQLite's lock, alone:        median {statistics.median(alone) * 1000:7.1f} ms, "
        f"max {max(alone) * 1000:7.1f} ms ({len(alone)} writes)"
    )
    print(
        f"a write's wait for SQLite's lock, beside it:    median {statistics.median(beside) * 1000:7.1f} ms, "
        f"max {max(beside) * 1000:7.1f} ms ({len(beside)} writes); the longest wait is "
        f"{max(beside) / upload_s:.2f} of the upload's length"
    )


if __name__ == "__main__":
    main()
