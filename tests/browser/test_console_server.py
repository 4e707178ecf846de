"""The console's server overview in a real browser: its Prometheus parser reads what prometheus-client writes
(escaped label values, +Inf, NaN) as prometheus-client's own parser does, its percentiles are
histogram_quantile's; an admin key sees the link and the four charts fill as the page polls /metrics; a member
key sees no link and is refused the page. Screenshots as in test_console."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from playwright.sync_api import Browser, Page, expect
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.console.endpoints import CONSOLE_DIR
from app.testing.servers import ServerProcess
from tests.browser.conftest import KEY

pytestmark = pytest.mark.integration

WAIT_MS = 60_000
CHARTS = ("chart-workers", "chart-queued", "chart-tokens", "chart-latency")


def exposition() -> str:
    registry = CollectorRegistry()
    gauge = Gauge("queued", "Help with \\ and\nnewline.", ["tenant", "job_class"], registry=registry)
    gauge.labels('a "quoted" \\ tenant\nwith a newline', "batch").set(3)
    gauge.labels("project:b", "interactive").set(float("nan"))
    Counter("tokens", "Tokens.", ["model"], registry=registry).labels("small").inc(1.5e6)
    latency = Histogram("latency_seconds", "Latency.", ["route"], buckets=(0.1, 1), registry=registry)
    latency.labels("/v1/responses").observe(0.05)
    latency.labels("/v1/responses").observe(5)
    return generate_latest(registry).decode()


def test_the_parser_and_the_percentiles_agree_with_prometheus(browser: Browser) -> None:
    tab = browser.new_page()
    try:
        for script in ("usage.js", "server.js"):
            tab.add_script_tag(content=(CONSOLE_DIR / script).read_text())
        text = exposition()
        parsed: list[dict[str, Any]] = tab.evaluate(
            "text => parsePrometheus(text).map(s => ({...s, value: String(s.value)}))", text
        )
        expected = [
            {"name": sample.name, "labels": sample.labels, "value": sample.value}
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
        assert [(sample["name"], sample["labels"]) for sample in parsed] == [
            (sample["name"], sample["labels"]) for sample in expected
        ]
        for ours, theirs in zip(parsed, expected, strict=True):
            value = float(ours["value"].replace("Infinity", "inf"))
            assert (math.isnan(value) and math.isnan(theirs["value"])) or value == theirs["value"], ours
        assert tab.evaluate("() => { try { parsePrometheus('x{a=\"b\" 1'); } catch (e) { return e.message; } }")
        # histogram_quantile: linear within a bucket; in the +Inf bucket, the highest finite bound; none: null.
        quantiles = tab.evaluate(
            """() => [
                histogramQuantile(0.5, [[0.1, 0], [0.5, 10], [1, 20], [Infinity, 20]]),
                histogramQuantile(0.25, [[0.1, 0], [0.5, 10], [1, 20], [Infinity, 20]]),
                histogramQuantile(0.99, [[0.1, 0], [0.5, 10], [1, 10], [Infinity, 20]]),
                histogramQuantile(0.5, [[0.1, 0], [Infinity, 0]]),
            ]"""
        )
        assert quantiles[:3] == pytest.approx([0.5, 0.3, 1]) and quantiles[3] is None
    finally:
        tab.close()


def lines_filled(page: Page, chart: str) -> None:
    """Wait until the chart has a line of at least two points."""
    page.wait_for_function(
        """chart => [...document.querySelectorAll(`[data-testid="${chart}"] [data-testid="server-line"]`)]
            .some((line) => Number(line.getAttribute("data-points")) >= 2)""",
        arg=chart,
        timeout=WAIT_MS,
    )


def test_an_admin_watches_the_charts_fill_and_a_member_is_refused(
    page: Page, server: ServerProcess, client: openai.OpenAI, model: str, screenshots: Path
) -> None:
    client.responses.create(model=model, input="Count to three.", max_output_tokens=16)  # the token counter exists
    page.get_by_role("link", name="Server").click()
    expect(page.get_by_role("heading", name="Server")).to_be_visible()
    page.goto("/console/#/server?every=2")  # the quickest polling the page offers
    expect(page.get_by_test_id("server-charts")).to_be_visible()
    for chart in CHARTS:
        lines_filled(page, chart)
    # Tokens generated between two scrapes: the rate rises above 0.
    client.responses.create(model=model, input="Name a colour.", max_output_tokens=16)
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="chart-tokens"] [data-testid="server-line"]')]
            .some((line) => Number(line.getAttribute("data-peak")) > 0)""",
        timeout=WAIT_MS,
    )
    expect(page.get_by_test_id("chart-workers")).to_contain_text(f"{model}: 1")
    expect(page.get_by_test_id("chart-latency")).to_contain_text("p99:")
    page.screenshot(path=screenshots / "server-overview.png", full_page=True)

    made = httpx.post(
        f"{server.base_url}/v1/keys",
        json={"project": "server-overview", "name": "member"},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert made.status_code == 200, made.text
    page.get_by_role("button", name="Forget key").click()
    page.get_by_label("API key").fill(made.json()["value"])
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_test_id("server-refused")).to_be_visible()
    expect(page.get_by_test_id("server-charts")).to_have_count(0)
    expect(page.get_by_role("link", name="Server")).to_be_hidden()
