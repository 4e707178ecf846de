"""input_items paging, and tenants: one key cannot see, list, delete or chain onto another key's responses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


async def make_response_with_items(client: httpx.AsyncClient, count: int) -> tuple[str, list[str]]:
    items = [{"role": "user", "content": f"item {index}"} for index in range(count)]
    created = (await client.post("/v1/responses", json={"input": items})).json()
    listed = (
        await client.get(f"/v1/responses/{created['id']}/input_items", params={"order": "asc", "limit": 100})
    ).json()
    return created["id"], [item["id"] for item in listed["data"]]


async def test_pages_walk_every_item_in_both_orders(client: httpx.AsyncClient) -> None:
    response_id, ids = await make_response_with_items(client, 7)
    assert len(ids) == 7
    for order, expected in (("asc", ids), ("desc", ids[::-1])):
        seen: list[str] = []
        after: str | None = None
        while True:
            params: dict[str, str | int] = {"order": order, "limit": 3}
            if after:
                params["after"] = after
            page = (await client.get(f"/v1/responses/{response_id}/input_items", params=params)).json()
            seen += [item["id"] for item in page["data"]]
            assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
            if not page["has_more"]:
                break
            after = page["last_id"]
        assert seen == expected
    default = (await client.get(f"/v1/responses/{response_id}/input_items")).json()
    assert [item["id"] for item in default["data"]] == ids[::-1], "default order is desc"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"order": "up"}, "order"),
        ({"after": "msg_nope"}, "after"),
    ],
)
async def test_bad_paging_is_a_400(client: httpx.AsyncClient, params: dict, param: str) -> None:
    response_id, _ = await make_response_with_items(client, 2)
    reply = await client.get(f"/v1/responses/{response_id}/input_items", params=params)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


@pytest.fixture
async def keyed_app(tmp_path: Path) -> AsyncIterator[httpx.ASGITransport]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}", model_id="m", api_keys="alpha, beta", _env_file=None
    )
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        yield httpx.ASGITransport(app=app)


def client_for(transport: httpx.ASGITransport, key: str | None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers)


async def test_keys_are_required_and_checked(keyed_app: httpx.ASGITransport) -> None:
    async with client_for(keyed_app, None) as anonymous, client_for(keyed_app, "gamma") as wrong:
        for client in (anonymous, wrong):
            reply = await client.post("/v1/responses", json={"input": "x"})
            assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"
            assert (await client.get("/v1/models")).status_code == 401
        assert (await anonymous.get("/health")).status_code == 200


async def test_each_key_is_its_own_tenant(keyed_app: httpx.ASGITransport) -> None:
    async with client_for(keyed_app, "alpha") as alpha, client_for(keyed_app, "beta") as beta:
        mine = (await alpha.post("/v1/responses", json={"input": "secret"})).json()
        assert (await beta.get(f"/v1/responses/{mine['id']}")).status_code == 404
        assert (await beta.get(f"/v1/responses/{mine['id']}/input_items")).status_code == 404
        assert (await beta.delete(f"/v1/responses/{mine['id']}")).status_code == 404
        chained = await beta.post("/v1/responses", json={"input": "x", "previous_response_id": mine["id"]})
        assert chained.status_code == 400 and chained.json()["error"]["code"] == "previous_response_not_found"
        assert (await alpha.get(f"/v1/responses/{mine['id']}")).status_code == 200
        ok = await alpha.post("/v1/responses", json={"input": "x", "previous_response_id": mine["id"]})
        assert ok.status_code == 200
