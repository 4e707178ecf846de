"""Metadata bounds (app/schemas/metadata.py), the one check of every metadata key and value of responses and
conversations: a NUL is refused before it is stored, where Postgres could not read it back (issue 27)."""

from __future__ import annotations

import httpx
import pytest

from app.schemas.metadata import check_metadata
from tests.protocol import assert_error

NUL_METADATA = [{"k": "v\u0000"}, {"k\u0000": "v"}, {"\u0000": ""}]


@pytest.mark.parametrize("metadata", NUL_METADATA)
def test_check_metadata_refuses_a_nul(metadata: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="NUL"):
        check_metadata(metadata)


@pytest.mark.parametrize("metadata", NUL_METADATA)
async def test_a_nul_in_metadata_is_a_400_naming_it_and_nothing_is_stored(
    client: httpx.AsyncClient, metadata: dict[str, str]
) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "metadata": metadata})
    assert_error(reply, 400, param="metadata", code="invalid_value")
    assert (await client.get("/v1/responses")).json()["data"] == []
    assert_error(await client.post("/v1/conversations", json={"metadata": metadata}), 400, param="metadata")
    conversation = (await client.post("/v1/conversations", json={"metadata": {"k": "v"}})).json()
    reply = await client.post(f"/v1/conversations/{conversation['id']}", json={"metadata": metadata})
    assert_error(reply, 400, param="metadata", code="invalid_value")
    assert (await client.get(f"/v1/conversations/{conversation['id']}")).json()["metadata"] == {"k": "v"}


async def test_a_nul_in_a_metadata_filter_is_a_400_before_any_query(client: httpx.AsyncClient) -> None:
    tagged = (await client.post("/v1/responses", json={"input": "x", "metadata": {"k": "v"}})).json()["id"]
    for params in ({"metadata[k]": "v\u0000"}, {"metadata[k\u0000]": "v"}):
        assert_error(await client.get("/v1/responses", params=params), 400, param=None, code="invalid_value")
    listed = (await client.get("/v1/responses", params={"metadata[k]": "v"})).json()["data"]
    assert [response["id"] for response in listed] == [tagged]
