// The console's vector store pages: the stores with their file counts and status, and one store: its files (status,
// size, the reason a file failed), a refresh while files are indexed, and a search box over its chunks. Built on
// console.js's helpers and webhooks.js's apiSend; every value from the API is set as text, never parsed as HTML.
"use strict";

const STORE_PAGE = 20;
const STORE_REFRESH_MS = 2000;

function storeLink(store) {
  return el("a", { href: `#/vector_stores/${encodeURIComponent(store.id)}` }, store.name || store.id);
}

// "3 / 4 indexed (1 failed)" beside a bar of the files that ended.
function fileCounts(counts) {
  const ended = counts.completed + counts.failed + counts.cancelled;
  return el(
    "span",
    { class: "progress", "data-testid": "file-counts" },
    el("progress", { max: Math.max(counts.total, 1), value: ended, "aria-label": "Files indexed" }),
    ` ${counts.completed} / ${counts.total} indexed`,
    counts.failed ? ` (${counts.failed} failed)` : "",
  );
}

function bytes(size) {
  return size >= 1024 * 1024 ? `${(size / 1024 / 1024).toFixed(1)} MiB` : size >= 1024 ? `${(size / 1024).toFixed(1)} KiB` : `${size} B`;
}

async function vectorStoresPage(params) {
  const list = await api("GET", "/vector_stores", { limit: STORE_PAGE, after: params.get("after") });
  const rows = list.data.map((store) =>
    el(
      "tr",
      { "data-testid": "store-row" },
      el("td", {}, when(store.created_at)),
      el("td", {}, storeLink(store)),
      el("td", {}, statusBadge(store.status)),
      el("td", {}, fileCounts(store.file_counts)),
      el("td", {}, bytes(store.usage_bytes)),
      el("td", {}, when(store.expires_at)),
    ),
  );
  let more = null;
  if (list.has_more) {
    more = el("p", {}, el("a", { href: `#/vector_stores?after=${encodeURIComponent(list.last_id)}`, "data-testid": "next-page" }, "Older stores"));
  }
  show(
    el("h1", {}, "Vector stores"),
    list.data.length
      ? el(
          "table",
          {},
          el("thead", {}, el("tr", {}, ["Created", "Name", "Status", "Files", "Size", "Expires"].map((title) => el("th", {}, title)))),
          el("tbody", {}, rows),
        )
      : el("p", { class: "muted", "data-testid": "empty" }, "No vector stores. Create one with the API (POST /v1/vector_stores)."),
    more,
  );
}

function searchResults(page) {
  if (!page.data.length) return el("p", { class: "muted", "data-testid": "no-results" }, "No chunk matches.");
  return el(
    "ol",
    { "data-testid": "search-results" },
    page.data.map((hit) =>
      el(
        "li",
        { class: "item", "data-testid": "search-result" },
        el("span", { class: "kind" }, `${hit.filename} (${hit.file_id}), score ${hit.score.toFixed(3)}`),
        hit.content.map((part) => part.text).join("\n"),
      ),
    ),
  );
}

function searchForm(store) {
  const input = el("input", { type: "search", name: "query", "aria-label": "Search query", placeholder: "What to look for" });
  const results = el("div", { "data-testid": "search-area" });
  const form = el(
    "form",
    { class: "filters", onsubmit: (event) => {
      event.preventDefault();
      const query = input.value.trim();
      if (!query) return;
      act(async () => {
        const page = await apiSend("POST", `/vector_stores/${encodeURIComponent(store.id)}/search`, { query, max_num_results: 10 });
        results.replaceChildren(searchResults(page));
      });
    } },
    el("label", {}, "Search this store", input),
    el("button", { class: "primary", type: "submit" }, "Search"),
  );
  return [form, results];
}

function storeFileRow(file) {
  const reason = file.last_error ? `${file.last_error.code}: ${file.last_error.message}` : "";
  return el(
    "tr",
    { "data-testid": "store-file-row" },
    el("td", {}, when(file.created_at)),
    el("td", {}, el("code", {}, file.id)),
    el("td", {}, statusBadge(file.status)),
    el("td", {}, bytes(file.usage_bytes)),
    el("td", { class: "excerpt", "data-testid": "file-error" }, reason),
  );
}

async function vectorStorePage(id) {
  const store = await api("GET", `/vector_stores/${encodeURIComponent(id)}`);
  const files = await api("GET", `/vector_stores/${encodeURIComponent(id)}/files`, { limit: 100 });
  show(
    el("h1", {}, "Vector store ", el("code", {}, store.name || store.id)),
    el("section", {}, facts([
      ["Id", store.id],
      ["Status", statusBadge(store.status)],
      ["Files", fileCounts(store.file_counts)],
      ["Size", bytes(store.usage_bytes)],
      ["Created", when(store.created_at)],
      ["Last active", when(store.last_active_at)],
      ["Expires", store.expires_after ? `${when(store.expires_at)} (${store.expires_after.days} days after its last activity)` : "never"],
      ["Metadata", Object.keys(store.metadata || {}).length ? JSON.stringify(store.metadata) : "-"],
    ])),
    el("h2", {}, "Search"),
    el("div", {}, searchForm(store)),
    el("h2", {}, "Files"),
    files.data.length
      ? el(
          "table",
          {},
          el("thead", {}, el("tr", {}, ["Attached", "File", "Status", "Size", "Error"].map((title) => el("th", {}, title)))),
          el("tbody", {}, files.data.map(storeFileRow)),
        )
      : el("p", { class: "muted" }, "No files. Attach one with the API (POST /v1/vector_stores/{id}/files)."),
    files.has_more ? el("p", { class: "muted" }, "The first 100 files.") : null,
  );
  if (store.file_counts.in_progress) {
    // Follow the indexing while this page is open (and nobody typed a search meanwhile).
    const address = location.hash;
    setTimeout(() => {
      const typed = page.querySelector("input[name=query]");
      if (location.hash === address && !(typed && typed.value)) render();
    }, STORE_REFRESH_MS);
  }
}
