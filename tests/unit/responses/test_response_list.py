"""GET /v1/responses (an extension): the caller's stored responses, newest first, filtered, in cursor pages; bad
parameters are 400s; one tenant never sees another's. The shared paging parameters of every list route."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from app.db.base import utc_now
from app.db.models import ResponseRow
from app.runtime import Runtime


async def _create(client: httpx.AsyncClient, **body: Any) -> str:
    reply = await client.post("/v1/responses", json={"model": "fake-model", "input": "hello", **body})
    assert reply.status_code == 200, reply.text
    response_id: str = reply.json()["id"]
    return response_id


async def _list(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    reply = await client.get("/v1/responses", params=params)
    assert reply.status_code == 200, reply.text
    page: dict[str, Any] = reply.json()
    return page


async def test_newest_first_with_cursor_pages(client: httpx.AsyncClient) -> None:
    created = [await _create(client) for _ in range(5)]
    first = await _list(client, limit=2)
    assert first["object"] == "list" and first["has_more"] is True
    assert [r["id"] for r in first["data"]] == created[::-1][:2]
    assert (first["first_id"], first["last_id"]) == (created[4], created[3])
    assert first["data"][0] == (await client.get(f"/v1/responses/{created[4]}")).json()
    second = await _list(client, limit=2, after=first["last_id"])
    third = await _list(client, limit=2, after=second["last_id"])
    assert [r["id"] for r in second["data"] + third["data"]] == created[::-1][2:]
    assert third["has_more"] is False
    ascending = await _list(client, order="asc", limit=10)
    assert [r["id"] for r in ascending["data"]] == created and ascending["has_more"] is False


async def test_ties_on_creation_time_neither_skip_nor_repeat(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    created = [await _create(client) for _ in range(4)]
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).values(created_at=utc_now()))
    seen: list[str] = []
    after = None
    while True:
        page = await _list(client, limit=1, **({"after": after} if after else {}))
        seen += [r["id"] for r in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert sorted(seen) == sorted(created) and len(seen) == 4


async def test_filters(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    tagged = await _create(client, metadata={"team": "a", "run": "1"})
    other = await _create(client, metadata={"team": "b"})
    follow_up = await _create(client, previous_response_id=tagged)
    old = await _create(client)
    async with app_runtime.database.transaction() as session:
        await session.execute(
            update(ResponseRow).where(ResponseRow.id == old).values(created_at=utc_now() - timedelta(days=3))
        )
        await session.execute(update(ResponseRow).where(ResponseRow.id == other).values(status="failed"))

    def ids(page: dict[str, Any]) -> list[str]:
        return [r["id"] for r in page["data"]]

    assert ids(await _list(client, **{"metadata[team]": "a"})) == [tagged]
    assert ids(await _list(client, **{"metadata[team]": "a", "metadata[run]": "2"})) == []
    assert ids(await _list(client, status="failed")) == [other]
    assert set(ids(await _list(client, status="completed"))) == {tagged, follow_up, old}
    assert len(ids(await _list(client, model="fake-model"))) == 4
    assert ids(await _list(client, model="another-model")) == []
    assert ids(await _list(client, previous_response_id=tagged)) == [follow_up]
    day_ago = int((utc_now() - timedelta(days=1)).timestamp())
    assert ids(await _list(client, created_before=day_ago)) == [old]
    assert old not in ids(await _list(client, created_after=day_ago))
    # The last second a datetime holds is a bound like any other.
    assert len(ids(await _list(client, created_before=253402300799))) == 4
    assert ids(await _list(client, created_after=253402300799)) == []


async def test_a_metadata_key_is_matched_as_written_whatever_its_characters(client: httpx.AsyncClient) -> None:
    # Each of these once went into a JSON path: a 503 (SQLite), a 500 or a nested path (Postgres).
    odd = {'a"b': "1", "a,b": "2", "{c}": "3", "$.x[0]": "4", "a.b": "5"}
    tagged = await _create(client, metadata=odd)
    nested = await _create(client, metadata={"a": "2"})
    for key, value in odd.items():
        assert [r["id"] for r in (await _list(client, **{f"metadata[{key}]": value}))["data"]] == [tagged], key
    assert (await _list(client, **{"metadata[a,b]": "1"}))["data"] == []
    assert [r["id"] for r in (await _list(client, **{"metadata[a]": "2"}))["data"]] == [nested]


async def test_each_tenant_lists_only_its_own(two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    alpha, beta = two_tenants
    mine = await _create(alpha, model="m")
    theirs = await _create(beta, model="m")
    assert [r["id"] for r in (await _list(alpha))["data"]] == [mine]
    assert [r["id"] for r in (await _list(beta))["data"]] == [theirs]
    # Another tenant's id is no cursor here.
    assert (await alpha.get("/v1/responses", params={"after": theirs})).status_code == 400
    assert (
        await httpx.AsyncClient(transport=alpha._transport, base_url="http://t").get("/v1/responses")
    ).status_code == 401


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"status": "done"}, "status"),
        ({"created_after": -1}, "created_after"),
        ({"created_before": "yesterday"}, "created_before"),
        # Past the year 9999: refused, rather than a 500 from the conversion to a datetime.
        ({"created_after": 99999999999999}, "created_after"),
        ({"created_before": 253402300800}, "created_before"),
        ({"after": "resp_nope"}, "after"),
    ],
)
async def test_bad_parameters_are_400s(client: httpx.AsyncClient, params: dict[str, Any], param: str) -> None:
    reply = await client.get("/v1/responses", params=params)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


@pytest.mark.parametrize("path", ["/v1/responses/{id}/input_items", "/v1/conversations/{conversation}/items"])
async def test_every_list_route_checks_paging_the_same_way(client: httpx.AsyncClient, path: str) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    url = path.format(id=await _create(client), conversation=conversation)
    for params, param in (({"limit": 0}, "limit"), ({"order": "up"}, "order"), ({"after": "msg_nope"}, "after")):
        reply = await client.get(url, params=params)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text
    assert (await client.get(url, params={"limit": 100, "order": "asc"})).status_code == 200
