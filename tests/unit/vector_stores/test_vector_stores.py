"""The Vector Stores API in-process, through the official SDK: stores created, listed, updated, deleted; files
uploaded, attached, indexed in the background and searched; file batches; another tenant's store a 404 from
every route."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.unit.vector_stores.conftest import sdk_for, settled, upload

GUIDE = (
    b"# Gardening guide\n\nTomatoes need six hours of sun and deep watering twice a week.\n\n"
    b"Prune the suckers so that the plant puts its energy into fruit.\n"
)
TAXES = b"Quarterly estimated tax payments are due in April, June, September and January.\n"


async def test_a_store_through_the_sdk_create_list_update_delete(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(
        name="notes", metadata={"team": "a"}, expires_after={"anchor": "last_active_at", "days": 7}
    )
    assert store.object == "vector_store" and store.id.startswith("vs_") and store.name == "notes"
    assert store.status == "completed" and store.file_counts.total == 0 and store.usage_bytes == 0
    assert store.expires_after is not None and store.expires_after.days == 7
    assert store.expires_at is not None and store.last_active_at is not None
    assert store.expires_at - store.last_active_at == 7 * 86400
    assert (await sdk.vector_stores.retrieve(store.id)) == store
    second = await sdk.vector_stores.create(name="second")
    listed = [entry.id async for entry in sdk.vector_stores.list(limit=1, order="asc")]
    assert listed == [store.id, second.id]
    updated = await sdk.vector_stores.update(store.id, name="renamed", expires_after=None)
    assert updated.name == "renamed" and updated.expires_after is None and updated.expires_at is None
    assert updated.metadata == {"team": "a"}
    deleted = await sdk.vector_stores.delete(store.id)
    assert deleted.deleted is True and deleted.object == "vector_store.deleted"
    with pytest.raises(openai.NotFoundError):
        await sdk.vector_stores.retrieve(store.id)


async def test_an_uploaded_file_is_indexed_and_found_by_search(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="docs")
    attached = await sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("guide.md", GUIDE), poll_interval_ms=20
    )
    assert attached.status == "completed", attached.last_error
    assert attached.usage_bytes > 0 and attached.vector_store_id == store.id
    taxes = await upload(client, "taxes.txt", TAXES)
    other = await sdk.vector_stores.files.create_and_poll(
        vector_store_id=store.id, file_id=taxes, attributes={"topic": "money", "year": 2026}, poll_interval_ms=20
    )
    assert other.status == "completed" and other.attributes == {"topic": "money", "year": 2026}
    page = await sdk.vector_stores.search(store.id, query="How much sun do tomatoes need?")
    assert page.data and page.data[0].file_id == attached.id and page.data[0].filename == "guide.md"
    assert "six hours of sun" in page.data[0].content[0].text and 0 < page.data[0].score <= 1
    assert all(result.file_id != taxes for result in page.data)
    found = await sdk.vector_stores.search(store.id, query="tax payments due")
    assert found.data[0].file_id == taxes and found.data[0].attributes == {"topic": "money", "year": 2026}
    counted = await sdk.vector_stores.retrieve(store.id)
    assert counted.file_counts.completed == 2 and counted.file_counts.total == 2
    assert counted.usage_bytes == attached.usage_bytes + other.usage_bytes
    content = await sdk.vector_stores.files.content(attached.id, vector_store_id=store.id)
    assert "Tomatoes need six hours" in "".join(part.text or "" for part in content.data)
    files = [entry.id async for entry in sdk.vector_stores.files.list(store.id, filter="completed")]
    assert sorted(files) == sorted([attached.id, taxes])


async def test_filters_results_threshold_and_rewrite(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="filtered")
    for index, (topic, year) in enumerate([("garden", 2024), ("garden", 2026), ("money", 2026)]):
        file_id = await upload(client, f"note{index}.txt", f"note {index} about the garden and money\n".encode())
        done = await sdk.vector_stores.files.create_and_poll(
            vector_store_id=store.id, file_id=file_id, attributes={"topic": topic, "year": year}, poll_interval_ms=20
        )
        assert done.status == "completed"

    async def topics(filters: dict[str, Any]) -> list[str]:
        reply = await client.post(
            f"/v1/vector_stores/{store.id}/search", json={"query": "garden money", "filters": filters}
        )
        return sorted(f"{hit['attributes']['topic']}{hit['attributes']['year']}" for hit in reply.json()["data"])

    assert await topics({"type": "eq", "key": "topic", "value": "garden"}) == ["garden2024", "garden2026"]
    assert await topics({"type": "gte", "key": "year", "value": 2025}) == ["garden2026", "money2026"]
    both = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "topic", "value": "garden"},
            {"type": "nin", "key": "year", "value": [2024]},
        ],
    }
    assert await topics(both) == ["garden2026"]
    either = {
        "type": "or",
        "filters": [{"type": "eq", "key": "topic", "value": "money"}, {"type": "lt", "key": "year", "value": 2025}],
    }
    assert await topics(either) == ["garden2024", "money2026"]
    assert await topics({"type": "eq", "key": "missing", "value": "x"}) == []
    one = await sdk.vector_stores.search(store.id, query="garden", max_num_results=1)
    assert len(one.data) == 1
    # A lexical hit scores the share of the query's content words it holds: half of "garden tulips".
    half = await sdk.vector_stores.search(store.id, query="garden tulips", ranking_options={"score_threshold": 0.5})
    assert len(half.data) == 3 and all(hit.score == 0.5 for hit in half.data)
    none = await sdk.vector_stores.search(store.id, query="garden tulips", ranking_options={"score_threshold": 0.6})
    assert none.data == []
    rewritten = await client.post(
        f"/v1/vector_stores/{store.id}/search", json={"query": "What is the garden?", "rewrite_query": True}
    )
    assert rewritten.json()["search_query"] == "garden" and rewritten.json()["data"]
    bad = await client.post(f"/v1/vector_stores/{store.id}/search", json={"query": "x", "filters": {"type": "like"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "filters"
    empty = await client.post(f"/v1/vector_stores/{store.id}/search", json={"query": " "})
    assert empty.status_code == 400


@pytest.mark.settings(embedding=True)
async def test_stores_with_an_embedding_model_rank_by_both(client: httpx.AsyncClient, embedders: list) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="hybrid")
    guide = await sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("guide.md", GUIDE), poll_interval_ms=20
    )
    taxes = await sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("taxes.txt", TAXES), poll_interval_ms=20
    )
    assert guide.status == taxes.status == "completed"
    (embedder,) = embedders
    indexed = [inputs for _, inputs in embedder.calls]
    assert any("Tomatoes need six hours" in text for inputs in indexed for text in inputs)
    fused = await sdk.vector_stores.search(store.id, query="tomatoes sun")
    assert fused.data[0].file_id == guide.id and fused.data[0].score == pytest.approx(1.0)
    assert embedder.calls[-1] == ("fake-embed", ["tomatoes sun"])
    vector_only = await client.post(
        f"/v1/vector_stores/{store.id}/search",
        json={"query": "quarterly tax payments", "ranking_options": {"ranker": "none"}},
    )
    assert vector_only.json()["data"][0]["file_id"] == taxes.id
    text_only = await client.post(
        f"/v1/vector_stores/{store.id}/search",
        json={"query": "tomatoes", "ranking_options": {"hybrid_search": {"embedding_weight": 0, "text_weight": 1}}},
    )
    assert [hit["file_id"] for hit in text_only.json()["data"]] == [guide.id]
    # A file indexed after a search is found by the next one (the kept vectors are checked against the database).
    later = await sdk.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("late.txt", b"late harvest of tomatoes sun"), poll_interval_ms=20
    )
    again = await client.post(
        f"/v1/vector_stores/{store.id}/search",
        json={"query": "late harvest of tomatoes sun", "ranking_options": {"ranker": "none"}},
    )
    assert again.json()["data"][0]["file_id"] == later.id
    await sdk.vector_stores.files.delete(later.id, vector_store_id=store.id)
    gone = await client.post(
        f"/v1/vector_stores/{store.id}/search",
        json={"query": "late harvest of tomatoes sun", "ranking_options": {"ranker": "none"}},
    )
    assert all(hit["file_id"] != later.id for hit in gone.json()["data"])
    embedder.unavailable = True
    unavailable = await client.post(f"/v1/vector_stores/{store.id}/search", json={"query": "tomatoes"})
    assert unavailable.status_code == 503


async def test_file_batches_create_poll_list_and_cancel(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="batched")
    ids = [await upload(client, f"b{index}.txt", f"batch file {index}\n".encode()) for index in range(3)]
    batch = await sdk.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id,
        files=[{"file_id": ids[0], "attributes": {"n": 0}}, {"file_id": ids[1]}],
        poll_interval_ms=20,
    )
    assert batch.object == "vector_store.files_batch" and batch.status == "completed"
    assert batch.file_counts.completed == 2 and batch.file_counts.total == 2
    listed = [entry.id async for entry in sdk.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id)]
    assert sorted(listed) == sorted(ids[:2])
    cancelled = await sdk.vector_stores.file_batches.cancel(batch.id, vector_store_id=store.id)
    assert cancelled.status == "completed"  # it had ended: nothing to cancel
    both = await client.post(
        f"/v1/vector_stores/{store.id}/file_batches", json={"file_ids": [ids[2]], "files": [{"file_id": ids[2]}]}
    )
    assert both.status_code == 400
    missing = await client.post(f"/v1/vector_stores/{store.id}/file_batches", json={"file_ids": ["file_nope"]})
    assert missing.status_code == 404
    assert (await sdk.vector_stores.retrieve(store.id)).file_counts.total == 2


async def test_files_that_cannot_be_read_fail_with_a_reason(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="broken")
    cases = {
        "image.bin": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "unsupported_file"),
        "data.json": (b'{"open": ', "invalid_file"),
        "scan.pdf": (b"%PDF-1.4\nnot really a pdf", "invalid_file"),
        "blank.txt": (b"   \n\n", "invalid_file"),
    }
    for name, (data, code) in cases.items():
        file_id = await upload(client, name, data)
        await sdk.vector_stores.files.create(vector_store_id=store.id, file_id=file_id)
        body = await settled(client, store.id, file_id)
        assert body["status"] == "failed", name
        assert body["last_error"]["code"] == code and body["last_error"]["message"], name  # type: ignore[index]
    counts = (await sdk.vector_stores.retrieve(store.id)).file_counts
    assert counts.failed == 4 and counts.completed == 0


async def test_html_json_and_code_are_read(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="kinds")
    html = (
        b"<html><head><style>.x{}</style><script>var hidden = 1;</script></head><body><p>Walrus facts</p></body></html>"
    )
    for name, data in {
        "page.html": html,
        "conf.json": b'{"walrus": "tusks"}',
        "app.py": b"def walrus():\n    pass\n",
    }.items():
        file_id = await upload(client, name, data)
        done = await sdk.vector_stores.files.create_and_poll(
            vector_store_id=store.id, file_id=file_id, poll_interval_ms=20
        )
        assert done.status == "completed", (name, done.last_error)
    page = await sdk.vector_stores.search(store.id, query="walrus")
    assert len(page.data) == 3
    texts = " ".join(hit.content[0].text for hit in page.data)
    assert "hidden" not in texts and "Walrus facts" in texts


async def test_another_tenants_store_is_a_404_from_every_route(
    client: httpx.AsyncClient, other: httpx.AsyncClient
) -> None:
    sdk = sdk_for(client)
    store = await sdk.vector_stores.create(name="private")
    file_id = await upload(client, "guide.md", GUIDE)
    attached = await sdk.vector_stores.files.create_and_poll(
        vector_store_id=store.id, file_id=file_id, poll_interval_ms=20
    )
    batch = await sdk.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[file_id])
    base = f"/v1/vector_stores/{store.id}"
    routes = [
        ("GET", base, None),
        ("POST", base, {"name": "mine"}),
        ("DELETE", base, None),
        ("POST", f"{base}/search", {"query": "tomatoes"}),
        ("POST", f"{base}/files", {"file_id": file_id}),
        ("GET", f"{base}/files", None),
        ("GET", f"{base}/files/{attached.id}", None),
        ("POST", f"{base}/files/{attached.id}", {"attributes": {"a": "b"}}),
        ("GET", f"{base}/files/{attached.id}/content", None),
        ("DELETE", f"{base}/files/{attached.id}", None),
        ("POST", f"{base}/file_batches", {"file_ids": [file_id]}),
        ("GET", f"{base}/file_batches/{batch.id}", None),
        ("POST", f"{base}/file_batches/{batch.id}/cancel", None),
        ("GET", f"{base}/file_batches/{batch.id}/files", None),
    ]
    for method, path, body in routes:
        reply = await other.request(method, path, json=body)
        assert reply.status_code == 404, (method, path, reply.text)
        assert reply.json()["error"]["type"] == "invalid_request_error"
    assert (await other.get("/v1/vector_stores")).json()["data"] == []
    # Nothing of it changed.
    again = await sdk.vector_stores.retrieve(store.id)
    assert again.name == "private" and again.file_counts.total == 1


async def test_bad_bodies_are_400s(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/vector_stores", json={"name": "x"})).json()
    base = f"/v1/vector_stores/{created['id']}"
    file_id = await upload(client, "a.txt", b"a text")
    bad = [
        ("/v1/vector_stores", {"expires_after": {"anchor": "created_at", "days": 1}}),
        ("/v1/vector_stores", {"metadata": {"k" * 65: "v"}}),
        ("/v1/vector_stores", {"chunking_strategy": {"type": "static"}}),
        (f"{base}/files", {"file_id": file_id, "attributes": {f"k{n}": n for n in range(17)}}),
        (
            f"{base}/files",
            {
                "file_id": file_id,
                "chunking_strategy": {
                    "type": "static",
                    "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150},
                },
            },
        ),
        (f"{base}/search", {"query": "x", "max_num_results": 51}),
        (f"{base}/search", {"query": "x", "ranking_options": {"score_threshold": 2}}),
    ]
    for path, body in bad:
        reply = await client.post(path, json=body)
        assert reply.status_code == 400, (path, body, reply.text)
        assert reply.json()["error"]["type"] == "invalid_request_error"
    assert (await client.get(f"{base}/files", params={"filter": "done"})).status_code == 400
    assert (await client.get(base)).json()["file_counts"]["total"] == 0
