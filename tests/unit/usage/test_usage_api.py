"""GET /v1/usage and /v1/usage.csv: a member reads its own project's usage only, an admin any project's or
every one's (grouped by project, with names); bad dates, ranges and groupings are OpenAI-shaped 400s; the CSV's
header, rows and quoting."""

from __future__ import annotations

import csv
import io
from datetime import date

import httpx
import pytest

from app.runtime import Runtime
from app.tenants.identity import Identity
from app.usage import repository as usage
from app.usage.service import UsageQuery, read_usage
from tests.unit.keys.test_keys_api import BOOT, KEYED, bearer, create_response, make_key


@KEYED
async def test_a_member_reads_its_project_and_an_admin_reads_any(client: httpx.AsyncClient) -> None:
    alpha = (await make_key(client, "alpha"))["value"]
    beta = (await make_key(client, "beta"))["value"]
    beta_reader = (await make_key(client, "beta", "reader", "read"))["value"]
    for _ in range(2):
        await create_response(client, alpha)
    await create_response(client, beta)

    mine = (await client.get("/v1/usage", headers=bearer(alpha))).json()
    assert mine["totals"]["num_model_requests"] == 2
    theirs = (await client.get("/v1/usage", headers=bearer(beta_reader))).json()
    assert theirs["totals"]["num_model_requests"] == 1  # a read key reads its project's usage
    own_by_name = await client.get("/v1/usage", params={"project": "alpha"}, headers=bearer(alpha))
    assert own_by_name.status_code == 200 and own_by_name.json()["totals"]["num_model_requests"] == 2
    for project in ("beta", "public"):
        refused = await client.get("/v1/usage", params={"project": project}, headers=bearer(alpha))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied", project
    assert (await client.get("/v1/usage.csv", params={"project": "beta"}, headers=bearer(alpha))).status_code == 403
    grouped = (await client.get("/v1/usage", params={"group_by": "project"}, headers=bearer(alpha))).json()
    assert [row["project_name"] for row in grouped["data"]] == ["alpha"]  # grouping widens nothing

    everyone = (await client.get("/v1/usage", params={"group_by": "project,model"}, headers=BOOT)).json()
    assert everyone["group_by"] == ["project", "model"]
    assert sorted((row["project_name"], row["num_model_requests"]) for row in everyone["data"]) == [
        ("alpha", 2),
        ("beta", 1),
    ]
    assert all(row["project"].startswith("project:") and row["model"] == "fake-model" for row in everyone["data"])
    assert everyone["totals"]["num_model_requests"] == 3
    only_beta = (await client.get("/v1/usage", params={"project": "beta"}, headers=BOOT)).json()
    assert only_beta["totals"]["num_model_requests"] == 1
    tenant = everyone["data"][0]["project"]
    by_tenant = (await client.get("/v1/usage", params={"project": tenant}, headers=BOOT)).json()
    assert by_tenant["totals"]["num_model_requests"] == everyone["data"][0]["num_model_requests"]
    missing = await client.get("/v1/usage", params={"project": "nope"}, headers=BOOT)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "project"
    assert (await client.get("/v1/usage")).status_code == 401


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"start": "2026-13-01"}, "start"),
        ({"start": "yesterday"}, "start"),
        ({"start": "2026-1-1"}, "start"),
        ({"end": "2026-02-30"}, "end"),
        ({"start": "2026-12-02", "end": "2026-12-01"}, "start"),
        ({"start": "2025-01-01", "end": "2026-01-02"}, "start"),  # 367 days
        ({"group_by": "week"}, "group_by"),
        ({"group_by": "day,day"}, "group_by"),
        ({"group_by": ""}, None),  # the default grouping: no error
        ({"model": "m\u0001"}, "model"),
        ({"model": "m" * 300}, "model"),
    ],
)
async def test_bad_queries_are_openai_shaped_400s(client: httpx.AsyncClient, params: dict, param: str | None) -> None:
    for path in ("/v1/usage", "/v1/usage.csv"):
        reply = await client.get(path, params=params)
        if param is None:
            assert reply.status_code == 200, reply.text
            continue
        assert reply.status_code == 400, (path, params, reply.text)
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


# Its days are long past: the retention task that the app starts (on the real date) must keep them.
@pytest.mark.settings(usage_retention_days=0)
async def test_a_year_is_read_at_once_and_its_days_are_sorted(app_runtime: Runtime) -> None:
    database = app_runtime.database
    async with database.transaction() as session:
        for day in (date(2025, 3, 1), date(2024, 3, 2), date(2025, 2, 28)):
            await usage.add(session, usage.UsageEntry("public", "m", day, input_tokens=1))
    identity = Identity(tenant="public", role="member")
    leap_year = await read_usage(database, identity, UsageQuery(start="2024-03-01", end="2025-03-01"))
    assert [row.date for row in leap_year.data] == ["2024-03-02", "2025-02-28", "2025-03-01"]
    default = await read_usage(database, identity, UsageQuery(), today=date(2025, 3, 1))
    assert (default.start, default.end) == ("2025-01-31", "2025-03-01")
    assert [row.date for row in default.data] == ["2025-02-28", "2025-03-01"]
    stranger = await read_usage(
        database, Identity(tenant="project:x", role="member"), UsageQuery(start="2024-03-01", end="2025-03-01")
    )
    assert stranger.data == []


@KEYED
async def test_the_csv_has_a_header_and_a_line_a_group(client: httpx.AsyncClient) -> None:
    formula = (await make_key(client, "=HYPERLINK(1)"))["value"]
    plain = (await make_key(client, "plain"))["value"]
    await create_response(client, formula)
    await create_response(client, plain)
    await create_response(client, plain)
    reply = await client.get("/v1/usage.csv", params={"group_by": "day,project"}, headers=BOOT)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/csv")
    assert reply.headers["content-disposition"].startswith('attachment; filename="usage-')
    lines = list(csv.reader(io.StringIO(reply.text)))
    assert lines[0] == [
        "date",
        "project",
        "project_name",
        "num_model_requests",
        "input_tokens",
        "input_cached_tokens",
        "output_tokens",
        "generation_seconds",
    ]
    rows = sorted(lines[1:], key=lambda line: line[2])
    assert [(line[2], line[3]) for line in rows] == [("'=HYPERLINK(1)", "1"), ("plain", "2")]
    json_rows = (await client.get("/v1/usage", params={"group_by": "day,project"}, headers=BOOT)).json()["data"]
    assert sorted(int(line[4]) for line in rows) == sorted(row["input_tokens"] for row in json_rows)
    assert reply.text.endswith("\r\n") and len(reply.text.splitlines()) == 3
    empty = await client.get("/v1/usage.csv", params={"start": "2001-01-01", "end": "2001-01-31"}, headers=BOOT)
    assert empty.text.splitlines() == [",".join(lines[0][:1] + lines[0][3:])]
