// The console's usage page (#/usage): GET /v1/usage by day, as a bar chart (inline SVG, built with the DOM: no
// library, nothing inline the Content-Security-Policy refuses) and a table, and the same report as CSV. It uses
// console.js's helpers (api, el, show, authHeaders), which that script defines before it routes here.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const USAGE_COUNTERS = [
  ["num_model_requests", "Requests"],
  ["input_tokens", "Input tokens"],
  ["input_cached_tokens", "Cached input tokens"],
  ["output_tokens", "Output tokens"],
  ["generation_seconds", "Generation seconds"],
];

function usageSvg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function usageDay(offsetDays) {
  return new Date(Date.now() + offsetDays * 86400000).toISOString().slice(0, 10);
}

// Every day from start to end (inclusive), so that days without use show as gaps, not as missing bars.
function usageDays(start, end) {
  const days = [];
  for (let day = Date.parse(`${start}T00:00:00Z`); day <= Date.parse(`${end}T00:00:00Z`); day += 86400000) {
    days.push(new Date(day).toISOString().slice(0, 10));
  }
  return days;
}

// One bar a day of the chosen counter; its value and day in each bar's title (a tooltip).
function usageChart(report, counter) {
  const byDay = new Map(report.data.map((row) => [row.date, row[counter] || 0]));
  const days = usageDays(report.start, report.end);
  const width = 900;
  const height = 220;
  const left = 60;
  const bottom = 24;
  const top = 10;
  const peak = Math.max(1, ...days.map((day) => byDay.get(day) || 0));
  const step = (width - left) / days.length;
  const bars = days.map((day, index) => {
    const value = byDay.get(day) || 0;
    const barHeight = ((height - bottom - top) * value) / peak;
    return usageSvg(
      "rect",
      {
        x: left + index * step + step * 0.1,
        y: height - bottom - barHeight,
        width: Math.max(step * 0.8, 1),
        height: barHeight,
        fill: "#2456c5",
        "data-testid": "usage-bar",
      },
      usageSvg("title", {}, `${day}: ${value}`),
    );
  });
  const label = (x, y, text, anchor) => usageSvg("text", { x, y, "font-size": 11, fill: "#5f6b7a", "text-anchor": anchor }, text);
  return usageSvg(
    "svg",
    { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": `${counter} by day`, "data-testid": "usage-chart" },
    usageSvg("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, stroke: "#d9dee5" }),
    label(left - 6, top + 10, String(peak), "end"),
    label(left - 6, height - bottom, "0", "end"),
    label(left, height - 6, days[0], "start"),
    label(width, height - 6, days[days.length - 1], "end"),
    ...bars,
  );
}

async function downloadUsageCsv(query) {
  const url = new URL("/v1/usage.csv", location.origin);
  for (const [name, value] of Object.entries(query)) if (value) url.searchParams.set(name, value);
  const reply = await fetch(url, { headers: authHeaders() });
  if (!reply.ok) throw new Error((await reply.json().catch(() => ({}))).error?.message || reply.statusText);
  const link = el("a", { href: URL.createObjectURL(await reply.blob()), download: `usage-${query.start}-${query.end}.csv` });
  link.click();
  URL.revokeObjectURL(link.href);
}

async function usagePage(params) {
  const query = {
    start: params.get("start") || usageDay(-29),
    end: params.get("end") || usageDay(0),
    model: params.get("model") || "",
    project: params.get("project") || "",
    group_by: "day",
  };
  const counter = USAGE_COUNTERS.some(([name]) => name === params.get("counter")) ? params.get("counter") : "output_tokens";
  const report = await api("GET", "/usage", query);
  const input = (name, label, type) => el("label", {}, label, el("input", { name, type: type || "text", value: query[name] }));
  const counterSelect = el(
    "select",
    { name: "counter" },
    USAGE_COUNTERS.map(([name, label]) => el("option", { value: name, selected: name === counter }, label)),
  );
  const form = el(
    "form",
    { class: "filters", onsubmit: (event) => {
      event.preventDefault();
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(event.target)) if (value) chosen.set(name, value);
      location.hash = `#/usage?${chosen}`;
    } },
    input("start", "From (UTC)", "date"),
    input("end", "To (UTC)", "date"),
    input("model", "Model"),
    input("project", "Project (admins)"),
    el("label", {}, "Chart", counterSelect),
    el("button", { class: "primary", type: "submit" }, "Show"),
  );
  const status = el("p", { class: "muted" });
  const csv = el("button", { type: "button", onclick: () => downloadUsageCsv(query).catch((error) => { status.textContent = error.message; }) }, "Download CSV");
  const totals = report.totals;
  const table = el(
    "table",
    { "data-testid": "usage-table" },
    el("thead", {}, el("tr", {}, ["Day", ...USAGE_COUNTERS.map(([, label]) => label)].map((name) => el("th", {}, name)))),
    el(
      "tbody",
      {},
      report.data.map((row) => el("tr", {}, el("td", {}, row.date), USAGE_COUNTERS.map(([name]) => el("td", {}, row[name])))),
      el("tr", {}, el("th", {}, "Total"), USAGE_COUNTERS.map(([name]) => el("th", {}, totals[name]))),
    ),
  );
  show(
    el("h1", {}, "Usage"),
    form,
    el("section", {}, usageChart(report, counter)),
    el("div", { class: "actions" }, csv),
    status,
    report.data.length ? table : el("p", { class: "muted", "data-testid": "empty" }, "No usage in these days."),
  );
}
