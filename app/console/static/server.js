// The console's server overview (#/server, admin keys only): it polls GET /metrics, parses Prometheus's text
// format, keeps the last SERVER_WINDOW_S of scrapes in this tab's memory (kept while the person visits other
// pages), and draws workers per model, queued jobs by tenant, tokens/s and request latency percentiles as inline
// SVG, as usage.js does (no library, nothing inline the Content-Security-Policy refuses). It uses console.js's
// helpers (el, show, when, ApiError, KEY_STORAGE) and usage.js's usageSvg.
"use strict";

const SERVER_WINDOW_S = 15 * 60;
const SERVER_PERIODS_S = [2, 5, 15];
const SERVER_DEFAULT_PERIOD_S = 5;
// Percentiles are read from the histogram's counts over this window (one scrape's few seconds hold too few).
const LATENCY_WINDOW_S = 60;
const LATENCY_QUANTILES = [["p50", 0.5], ["p95", 0.95], ["p99", 0.99]];
// The operator's routes (the page's own scrapes among them) say nothing about the API's latency.
const OPERATOR_ROUTES = new Set(["/metrics", "/health", "/health/workers", "/ready", "unmatched"]);
const SERVER_COLORS = ["#2456c5", "#1d7a3e", "#b3261e", "#a15c00", "#6b3fa0", "#00788a", "#5f6b7a", "#c2185b"];
const SERVER_METRICS = {
  workers: "llama_responses_model_workers",
  queued: "llama_responses_tenant_queued_jobs",
  tokens: "llama_responses_output_tokens_total",
  latency: "llama_responses_http_request_duration_seconds_bucket",
};
const SERVER_KEPT = new Set(Object.values(SERVER_METRICS));

// The scrapes of this tab, oldest first: { at: Unix seconds, samples }. Only SERVER_KEPT's samples are kept.
let serverHistory = [];
let serverTimer = null;

// ---- Prometheus's text format ------------------------------------------------------------------------------

const PROMETHEUS_LABEL = /\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=\}))/y;

function prometheusNumber(text) {
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (text === "NaN") return NaN;
  const value = Number(text);
  if (text === undefined || text === "" || Number.isNaN(value)) throw new Error(`not a sample value: ${text}`);
  return value;
}

// The text exposition format (version 0.0.4) as [{ name, labels, value }]: comments (# HELP, # TYPE) and blank
// lines skipped, label values unescaped (\\, \", \n), a sample's optional timestamp ignored.
function parsePrometheus(text) {
  const samples = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const name = /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(line);
    if (!name) throw new Error(`not a sample: ${line}`);
    const labels = {};
    let at = name[0].length;
    if (line[at] === "{") {
      at += 1;
      PROMETHEUS_LABEL.lastIndex = at;
      let label;
      while ((label = PROMETHEUS_LABEL.exec(line))) {
        labels[label[1]] = label[2].replace(/\\(.)/g, (_, escaped) => (escaped === "n" ? "\n" : escaped));
        at = PROMETHEUS_LABEL.lastIndex;
      }
      const close = /^\s*\}/.exec(line.slice(at));
      if (!close) throw new Error(`unclosed labels: ${line}`);
      at += close[0].length;
    }
    const [value] = line.slice(at).trim().split(/\s+/);
    samples.push({ name: name[0], labels, value: prometheusNumber(value) });
  }
  return samples;
}

// ---- what the charts show ----------------------------------------------------------------------------------

// The samples named `name` that `keep` accepts, summed by `keyOf(labels)`.
function sumBy(samples, name, keyOf, keep) {
  const sums = new Map();
  for (const sample of samples) {
    if (sample.name !== name || (keep && !keep(sample.labels))) continue;
    const key = keyOf(sample.labels);
    sums.set(key, (sums.get(key) || 0) + sample.value);
  }
  return sums;
}

// Series [{ name, points: [[at, value]] }] from each scrape's Map of values (pointsOf(index) -> Map name -> value).
function seriesOver(history, pointsOf) {
  const series = new Map();
  history.forEach((scrape, index) => {
    for (const [name, value] of pointsOf(index)) {
      if (!series.has(name)) series.set(name, []);
      series.get(name).push([scrape.at, value]);
    }
  });
  return [...series].sort(([a], [b]) => a.localeCompare(b)).map(([name, points]) => ({ name, points }));
}

// How much a counter grew from `before` to `after` (a restarted process starts again from 0).
function growth(before, after) {
  return after >= before ? after - before : after;
}

function workersSeries(history) {
  return seriesOver(history, (index) => sumBy(history[index].samples, SERVER_METRICS.workers, (labels) => labels.model));
}

// Per tenant (its classes summed), and all of them together: a line even while nothing waits.
function queuedSeries(history) {
  return seriesOver(history, (index) => {
    const byTenant = sumBy(history[index].samples, SERVER_METRICS.queued, (labels) => labels.tenant);
    const total = [...byTenant.values()].reduce((sum, value) => sum + value, 0);
    return new Map([["all tenants", total], ...byTenant]);
  });
}

// Output tokens a second, per model, between each scrape and the one before it.
function tokensSeries(history) {
  return seriesOver(history, (index) => {
    const rates = new Map();
    if (index === 0) return rates;
    const before = sumBy(history[index - 1].samples, SERVER_METRICS.tokens, (labels) => labels.model);
    const after = sumBy(history[index].samples, SERVER_METRICS.tokens, (labels) => labels.model);
    const seconds = history[index].at - history[index - 1].at;
    if (seconds <= 0) return rates;
    for (const [model, value] of after) rates.set(model, growth(before.get(model) || 0, value) / seconds);
    return rates;
  });
}

// The q-quantile of a cumulative histogram [[upper bound, count]] sorted by bound, as Prometheus's
// histogram_quantile reads it: linear within the bucket the rank falls in; in the +Inf bucket, the highest finite
// bound. null when the histogram counted nothing.
function histogramQuantile(q, buckets) {
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === Infinity) return lower;
      return count === below ? bound : lower + ((bound - lower) * (rank - below)) / (count - below);
    }
    lower = bound;
    below = count;
  }
  return lower;
}

// The API's latency buckets (operator routes left out), summed over routes and methods: le -> count.
function latencyBuckets(samples) {
  return sumBy(samples, SERVER_METRICS.latency, (labels) => prometheusNumber(labels.le), (labels) => !OPERATOR_ROUTES.has(labels.route));
}

// p50/p95/p99 of the requests answered in the LATENCY_WINDOW_S before each scrape (none answered: no point).
function latencySeries(history) {
  return seriesOver(history, (index) => {
    const points = new Map();
    const now = history[index].at;
    let first = index;
    while (first > 0 && history[first - 1].at >= now - LATENCY_WINDOW_S) first -= 1;
    if (first === index) return points;
    const before = latencyBuckets(history[first].samples);
    const buckets = [...latencyBuckets(history[index].samples)]
      .map(([bound, count]) => [bound, growth(before.get(bound) || 0, count)])
      .sort(([a], [b]) => a - b);
    for (const [name, q] of LATENCY_QUANTILES) {
      const value = histogramQuantile(q, buckets);
      if (value !== null) points.set(name, value);
    }
    return points;
  });
}

// ---- drawing -----------------------------------------------------------------------------------------------

function clock(unixSeconds) {
  return new Date(unixSeconds * 1000).toISOString().slice(11, 19);
}

function formatted(value) {
  if (Number.isInteger(value)) return String(value);
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 1) return value.toFixed(1);
  return value.toPrecision(2);
}

// The chart's top: the first of 1, 2, 5 times a power of ten above the peak (a round figure on the axis).
function niceCeiling(peak) {
  if (!(peak > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(peak * 1.05));
  return [1, 2, 5, 10].map((step) => step * power).find((top) => top >= peak * 1.05);
}

// A line a series over the scrapes' times; a legend with each series' latest value.
function lineChart(title, testId, series, unit) {
  const width = 900;
  const height = 200;
  const left = 60;
  const bottom = 22;
  const top = 10;
  const times = series.flatMap((line) => line.points.map(([at]) => at));
  const start = times.length ? Math.min(...times) : 0;
  const end = times.length ? Math.max(...times) : 1;
  const span = Math.max(end - start, 1);
  const peak = Math.max(0, ...series.flatMap((line) => line.points.map(([, value]) => value)));
  const ceiling = niceCeiling(peak);
  const x = (at) => left + ((width - left) * (at - start)) / span;
  const y = (value) => height - bottom - ((height - bottom - top) * value) / ceiling;
  const label = (px, py, text, anchor) => usageSvg("text", { x: px, y: py, "font-size": 11, fill: "#5f6b7a", "text-anchor": anchor }, text);
  const lines = series.map((line, index) =>
    usageSvg(
      "polyline",
      {
        points: line.points.map(([at, value]) => `${x(at).toFixed(1)},${y(value).toFixed(1)}`).join(" "),
        fill: "none",
        stroke: SERVER_COLORS[index % SERVER_COLORS.length],
        "stroke-width": 2,
        "data-testid": "server-line",
        "data-points": line.points.length,
        "data-peak": Math.max(...line.points.map(([, value]) => value)),
      },
      usageSvg("title", {}, line.name),
    ),
  );
  const chart = usageSvg(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": title },
    usageSvg("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, stroke: "#d9dee5" }),
    label(left - 6, top + 10, `${formatted(ceiling)}${unit}`, "end"),
    label(left - 6, height - bottom, `0${unit}`, "end"),
    ...(times.length ? [label(left, height - 4, clock(start), "start"), label(width, height - 4, clock(end), "end")] : []),
    ...lines,
  );
  const legend = el(
    "ul",
    { class: "legend" },
    series.map((line, index) => {
      const latest = line.points.length ? line.points[line.points.length - 1][1] : null;
      const swatch = usageSvg("svg", { viewBox: "0 0 10 10", width: 10, height: 10 },
        usageSvg("rect", { width: 10, height: 10, fill: SERVER_COLORS[index % SERVER_COLORS.length] }));
      return el("li", {}, swatch, ` ${line.name}: ${latest === null ? "-" : formatted(latest) + unit}`);
    }),
  );
  const nothing = series.length ? null : el("p", { class: "muted" }, "No figures yet (they need two scrapes).");
  return el("section", { class: "server-chart", "data-testid": testId }, el("h2", {}, title), chart, legend, nothing);
}

function serverCharts() {
  return [
    lineChart("Workers per model", "chart-workers", workersSeries(serverHistory), ""),
    lineChart("Queued jobs by tenant", "chart-queued", queuedSeries(serverHistory), ""),
    lineChart("Output tokens per second", "chart-tokens", tokensSeries(serverHistory), "/s"),
    lineChart(`Request latency (over ${LATENCY_WINDOW_S} s)`, "chart-latency", latencySeries(serverHistory), " s"),
  ];
}

// ---- the page ----------------------------------------------------------------------------------------------

async function fetchWithKey(path) {
  const key = sessionStorage.getItem(KEY_STORAGE);
  // Without the project header (projects.js): these answers are the whole server's, whatever project is chosen.
  const reply = await fetch(new URL(path, location.origin), { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  if (!reply.ok) {
    const body = await reply.json().catch(() => ({}));
    throw new ApiError(reply.status, (body.error && body.error.message) || reply.statusText);
  }
  return reply;
}

// One scrape into the history; the history trimmed to the window.
async function scrapeServer() {
  const text = await (await fetchWithKey("/metrics")).text();
  const at = Date.now() / 1000;
  serverHistory.push({ at, samples: parsePrometheus(text).filter((sample) => SERVER_KEPT.has(sample.name)) });
  serverHistory = serverHistory.filter((scrape) => scrape.at >= at - SERVER_WINDOW_S);
}

function stopServerPolling() {
  if (serverTimer !== null) clearInterval(serverTimer);
  serverTimer = null;
}

async function serverPage(params) {
  stopServerPolling();
  // A key that is not an admin's is refused here, even where RESPONSES_METRICS_PUBLIC opens /metrics to it. An
  // open server (no key) has no roles: /metrics answers everyone there.
  if (sessionStorage.getItem(KEY_STORAGE)) {
    try {
      await fetchWithKey("/v1/keys");
    } catch (error) {
      if (error.status !== 403) throw error;
      show(
        el("h1", {}, "Server"),
        el("p", { class: "notice error", "data-testid": "server-refused" }, "The server overview is for admin keys only."),
      );
      return;
    }
  }
  const period = SERVER_PERIODS_S.includes(Number(params.get("every"))) ? Number(params.get("every")) : SERVER_DEFAULT_PERIOD_S;
  await scrapeServer();
  const charts = el("div", { "data-testid": "server-charts" }, serverCharts());
  const status = el("p", { class: "muted", "data-testid": "server-status" });
  const choose = el(
    "select",
    { name: "every", onchange: (event) => { location.hash = `#/server?every=${event.target.value}`; } },
    SERVER_PERIODS_S.map((seconds) => el("option", { value: seconds, selected: seconds === period }, `every ${seconds} s`)),
  );
  const describe = () => {
    status.textContent = `${serverHistory.length} scrapes in the last ${SERVER_WINDOW_S / 60} minutes, the latest at ${clock(serverHistory[serverHistory.length - 1].at)} UTC.`;
  };
  describe();
  show(
    el("h1", {}, "Server"),
    el("form", { class: "filters" }, el("label", {}, "Read /metrics", choose)),
    status,
    charts,
  );
  serverTimer = setInterval(async () => {
    if (!location.hash.startsWith("#/server")) {
      stopServerPolling();
      return;
    }
    try {
      await scrapeServer();
      charts.replaceChildren(...serverCharts());
      describe();
    } catch (error) {
      status.textContent = `The last scrape failed: ${error.message}`;
    }
  }, period * 1000);
}
