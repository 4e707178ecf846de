"""The Files API in-process: upload (multipart, streamed in chunks), retrieve, list in cursor pages, content
streamed back, delete; purposes other than batch refused; the upload's own size limit; tenants kept apart."""

from __future__ import annotations

import httpx
import pytest
from openai import AsyncOpenAI, NotFoundError
from openai.types import FileObject

from app.files.storage import CHUNK_BYTES


def sdk_for(client: httpx.AsyncClient) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=str(client.base_url.join("/v1")), http_client=client, max_retries=0)


async def upload(
    client: httpx.AsyncClient, data: bytes, purpose: str = "batch", name: str = "in.jsonl"
) -> httpx.Response:
    return await client.post("/v1/files", files={"file": (name, data, "application/jsonl")}, data={"purpose": purpose})


async def test_sdk_upload_retrieve_content_delete(client: httpx.AsyncClient) -> None:
    sdk = sdk_for(client)
    # Over two chunks, so that it is stored and read back across chunk boundaries.
    data = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 3)
    created = await sdk.files.create(file=("requests.jsonl", data), purpose="batch")
    assert isinstance(created, FileObject)
    assert created.object == "file" and created.purpose == "batch" and created.filename == "requests.jsonl"
    assert created.bytes == len(data) and created.id.startswith("file_")
    assert (await sdk.files.retrieve(created.id)) == created
    content = await sdk.files.content(created.id)
    assert content.content == data
    deleted = await sdk.files.delete(created.id)
    assert deleted.deleted is True and deleted.id == created.id
    with pytest.raises(NotFoundError):
        await sdk.files.retrieve(created.id)
    assert (await client.get(f"/v1/files/{created.id}/content")).status_code == 404


async def test_list_pages_with_after_limit_order_and_purpose(client: httpx.AsyncClient) -> None:
    ids = [(await upload(client, f"{index}\n".encode())).json()["id"] for index in range(5)]
    sdk = sdk_for(client)
    page = await sdk.files.list(limit=2, order="asc")
    assert [entry.id for entry in page.data] == ids[:2] and page.has_more
    every = [entry.id async for entry in sdk.files.list(limit=2, order="asc")]
    assert every == ids
    newest = (await client.get("/v1/files", params={"limit": 2})).json()
    assert [entry["id"] for entry in newest["data"]] == ids[::-1][:2]
    assert newest["first_id"] == ids[4] and newest["last_id"] == ids[3] and newest["has_more"] is True
    after = (await client.get("/v1/files", params={"after": ids[1], "order": "asc"})).json()
    assert [entry["id"] for entry in after["data"]] == ids[2:]
    assert (await client.get("/v1/files", params={"purpose": "batch_output"})).json()["data"] == []
    unknown = await client.get("/v1/files", params={"after": "file_nope"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "after"


async def test_other_purposes_and_a_missing_file_part_are_400(client: httpx.AsyncClient) -> None:
    refused = await upload(client, b"x", purpose="fine-tune")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "purpose" and "Only 'batch', 'assistants' and 'user_data'" in error["message"]
    missing = await client.post("/v1/files", data={"purpose": "batch"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
    no_purpose = await client.post("/v1/files", files={"file": ("a.jsonl", b"x")})
    assert no_purpose.status_code == 400 and no_purpose.json()["error"]["param"] == "purpose"
    assert (await client.get("/v1/files")).json()["data"] == []


@pytest.mark.settings(file_max_bytes=4096, max_request_bytes=1024)
async def test_uploads_have_their_own_limit_and_other_routes_keep_theirs(client: httpx.AsyncClient) -> None:
    # Over the request limit, within the upload limit: stored whole.
    fits = await upload(client, b"a" * 3000)
    assert fits.status_code == 200, fits.text
    assert (await client.get(f"/v1/files/{fits.json()['id']}/content")).content == b"a" * 3000
    too_large = await upload(client, b"a" * 5000)
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "request_too_large"
    # Far over, refused by its Content-Length before the body is read.
    far_too_large = await upload(client, b"a" * 200_000)
    assert far_too_large.status_code == 413 and "4096" not in far_too_large.json()["error"]["message"]
    # Every other route keeps max_request_bytes.
    create = await client.post("/v1/responses", json={"input": "x" * 3000})
    assert create.status_code == 413
    assert [entry["id"] for entry in (await client.get("/v1/files")).json()["data"]] == [fits.json()["id"]]


async def test_a_file_is_its_tenants_alone(two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    alpha, beta = two_tenants
    created = (await upload(alpha, b'{"a": 1}\n')).json()
    for path in (f"/v1/files/{created['id']}", f"/v1/files/{created['id']}/content"):
        assert (await beta.get(path)).status_code == 404
    assert (await beta.delete(f"/v1/files/{created['id']}")).status_code == 404
    assert (await beta.get("/v1/files")).json()["data"] == []
    assert (await alpha.get(f"/v1/files/{created['id']}")).json() == created
