// The console's batch pages: the batches with their progress (request_counts), one batch (its moments, counts,
// usage, errors, cancel) that refreshes itself while it moves, and a file page (the start of an output or error
// file, and a download). Built on console.js's helpers; every value from the API is set as text.
"use strict";

const BATCH_PAGE = 20;
const MOVING_BATCH = new Set(["validating", "in_progress", "finalizing", "cancelling"]);
const BATCH_REFRESH_MS = 2000;
// The most of a file a page shows (the rest is in the download).
const FILE_PREVIEW_BYTES = 64 * 1024;

function batchLink(id) {
  return el("a", { href: `#/batches/${encodeURIComponent(id)}` }, id);
}

function fileLink(id, label) {
  return id ? el("a", { href: `#/files/${encodeURIComponent(id)}`, "data-testid": `${label}-file` }, label) : null;
}

// "7 / 10 (1 failed)" beside a bar of the lines that ended.
function progress(batch) {
  const counts = batch.request_counts || { completed: 0, failed: 0, total: 0 };
  const ended = counts.completed + counts.failed;
  return el(
    "span",
    { class: "progress", "data-testid": "progress" },
    el("progress", { max: Math.max(counts.total, 1), value: ended, "aria-label": "Lines ended" }),
    ` ${ended} / ${counts.total}`,
    counts.failed ? ` (${counts.failed} failed)` : "",
  );
}

function cancelBatchButton(batch, after) {
  if (!["validating", "in_progress"].includes(batch.status)) return null;
  return el("button", { type: "button", class: "danger", onclick: () => act(async () => {
    if (!confirm(`Cancel ${batch.id}? Its running lines are cancelled; what finished is kept.`)) return;
    await api("POST", `/batches/${encodeURIComponent(batch.id)}/cancel`);
    await after();
  }) }, "Cancel");
}

async function batchesPage(params) {
  const list = await api("GET", "/batches", { limit: BATCH_PAGE, after: params.get("after") });
  const rows = list.data.map((batch) =>
    el(
      "tr",
      { "data-testid": "batch-row" },
      el("td", {}, when(batch.created_at)),
      el("td", {}, batchLink(batch.id)),
      el("td", {}, statusBadge(batch.status)),
      el("td", {}, progress(batch)),
      el("td", {}, fileLink(batch.output_file_id, "output"), " ", fileLink(batch.error_file_id, "errors")),
      el("td", {}, cancelBatchButton(batch, render)),
    ),
  );
  let more = null;
  if (list.has_more) {
    more = el("p", {}, el("a", { href: `#/batches?after=${encodeURIComponent(list.last_id)}`, "data-testid": "next-page" }, "Older batches"));
  }
  show(
    el("h1", {}, "Batches"),
    list.data.length
      ? el(
          "table",
          {},
          el("thead", {}, el("tr", {}, ["Created", "Id", "Status", "Progress", "Files", ""].map((title) => el("th", {}, title)))),
          el("tbody", {}, rows),
        )
      : el("p", { class: "muted", "data-testid": "empty" }, "No batches. Create one with the API (POST /v1/batches)."),
    more,
  );
}

async function batchPage(id) {
  const batch = await api("GET", `/batches/${encodeURIComponent(id)}`);
  const usage = batch.usage;
  const errors = (batch.errors && batch.errors.data) || [];
  show(
    el("h1", {}, "Batch ", el("code", {}, batch.id)),
    el(
      "section",
      {},
      facts([
        ["Status", statusBadge(batch.status)],
        ["Progress", progress(batch)],
        ["Endpoint", batch.endpoint],
        ["Input file", fileLink(batch.input_file_id, "input")],
        ["Output file", fileLink(batch.output_file_id, "output") || "-"],
        ["Error file", fileLink(batch.error_file_id, "errors") || "-"],
        ["Created", when(batch.created_at)],
        ["Started", when(batch.in_progress_at)],
        ["Ended", when(batch.completed_at || batch.failed_at || batch.expired_at || batch.cancelled_at)],
        ["Expires", when(batch.expires_at)],
        ["Tokens", usage ? `${usage.input_tokens} in, ${usage.output_tokens} out` : "-"],
        ["Metadata", Object.keys(batch.metadata || {}).length ? JSON.stringify(batch.metadata) : "-"],
      ]),
    ),
    el("div", { class: "actions" }, cancelBatchButton(batch, render)),
    errors.length
      ? [
          el("h2", {}, "Errors"),
          el("ul", { "data-testid": "batch-errors" }, errors.map((error) => el("li", {}, `line ${error.line ?? "-"}: ${error.code}: ${error.message}`))),
        ]
      : null,
  );
  if (MOVING_BATCH.has(batch.status)) {
    // Follow it while this page is open: the same address after the wait, else someone went elsewhere.
    const address = location.hash;
    setTimeout(() => {
      if (location.hash === address) render();
    }, BATCH_REFRESH_MS);
  }
}

// The file's first FILE_PREVIEW_BYTES, read from the stream and no more (a file may be 200 MB).
async function filePreview(id) {
  const reply = await fetch(new URL(`/v1/files/${encodeURIComponent(id)}/content`, location.origin), { headers: authHeaders() });
  if (!reply.ok) {
    const body = await reply.json().catch(() => ({}));
    throw new ApiError(reply.status, (body.error && body.error.message) || reply.statusText);
  }
  const reader = reply.body.getReader();
  const parts = [];
  let size = 0;
  while (size < FILE_PREVIEW_BYTES) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
    size += value.length;
  }
  await reader.cancel().catch(() => {});
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return new TextDecoder().decode(bytes.subarray(0, FILE_PREVIEW_BYTES));
}

// The whole file, saved by the browser (a link to /v1 could not carry the API key).
async function downloadFile(file) {
  const reply = await fetch(new URL(`/v1/files/${encodeURIComponent(file.id)}/content`, location.origin), { headers: authHeaders() });
  if (!reply.ok) throw new ApiError(reply.status, reply.statusText);
  const address = URL.createObjectURL(await reply.blob());
  const link = el("a", { href: address, download: file.filename || `${file.id}.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(address), 60_000);
}

async function filePage(id) {
  const file = await api("GET", `/files/${encodeURIComponent(id)}`);
  const text = await filePreview(id);
  show(
    el("h1", {}, "File ", el("code", {}, file.id)),
    el("section", {}, facts([
      ["Name", file.filename],
      ["Purpose", file.purpose],
      ["Size", `${file.bytes} bytes`],
      ["Created", when(file.created_at)],
      ["Expires", when(file.expires_at)],
    ])),
    el("div", { class: "actions" }, el("button", { type: "button", onclick: () => act(() => downloadFile(file)) }, "Download")),
    file.bytes > FILE_PREVIEW_BYTES ? el("p", { class: "muted" }, `The first ${FILE_PREVIEW_BYTES / 1024} KiB:`) : null,
    el("pre", { class: "raw", "data-testid": "file-content" }, text),
  );
}
