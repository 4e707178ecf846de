// The console: a few pages over the API itself (so its auth and tenant checks hold), built with the DOM only:
// no framework, no build step, no CDN. Stored text is only ever set as textContent, never parsed as HTML.
"use strict";

const KEY_STORAGE = "llama-responses-api-key";
const PAGE_SIZE = 20;
const CHAIN_STEPS = 50;
const TERMINAL = new Set(["completed", "incomplete", "failed", "cancelled"]);
const page = document.getElementById("page");
const forgetKey = document.getElementById("forget-key");

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function authHeaders() {
  const key = sessionStorage.getItem(KEY_STORAGE);
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  // An admin's chosen project (projects.js): the API then answers with that project's data.
  if (key && chosenProject()) headers["OpenAI-Project"] = chosenProject();
  return headers;
}

async function api(method, path, query) {
  const url = new URL(`/v1${path}`, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const reply = await fetch(url, { method, headers: authHeaders() });
  const body = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new ApiError(reply.status, (body.error && body.error.message) || reply.statusText);
  return body;
}

// el("a", {href: "#/x", class: "y"}, "text", child, ...): an element; strings become text nodes.
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(...nodes) {
  page.replaceChildren(...nodes.filter((node) => node !== null && node !== undefined));
}

function when(unixSeconds) {
  return unixSeconds ? new Date(unixSeconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "-";
}

function statusBadge(status) {
  return el("span", { class: `status ${status}`, "data-testid": "status" }, status);
}

function responseLink(id) {
  return el("a", { href: `#/responses/${encodeURIComponent(id)}` }, id);
}

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part) => part.text || part.refusal || (part.type ? `[${part.type}]` : "")).join("");
}

// An item as a person reads it: who said what, a call and its arguments, a tool's output.
function itemView(item) {
  let kind = item.type || "item";
  let body;
  if (item.type === "message" || (!item.type && item.role)) {
    kind = `${item.role} message`;
    body = textOf(item.content);
  } else if (item.type === "function_call" || item.type === "custom_tool_call") {
    kind = `${item.type}: ${item.name}`;
    body = item.arguments || item.input || "";
  } else if (item.type === "function_call_output" || item.type === "custom_tool_call_output") {
    body = typeof item.output === "string" ? item.output : JSON.stringify(item.output);
  } else if (item.type === "reasoning") {
    body = textOf(item.content || []) || textOf(item.summary || []);
  } else {
    body = JSON.stringify(item, null, 2);
  }
  return el("div", { class: "item", "data-testid": "item" }, el("span", { class: "kind" }, kind), body);
}

function outputText(response) {
  return (response.output || [])
    .filter((item) => item.type === "message")
    .map((item) => textOf(item.content))
    .join(" ");
}

function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.map(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
}

// ---- pages -------------------------------------------------------------------------------------------------

function keyPage(message) {
  const input = el("input", { type: "password", name: "key", autocomplete: "off", "aria-label": "API key" });
  const form = el(
    "form",
    { class: "card", onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY_STORAGE, input.value.trim());
      forgetProject();
      render();
      loadProjects();
    } },
    el("p", {}, "This server needs an API key. It is kept in this browser tab only (sessionStorage)."),
    message ? el("p", { class: "notice error" }, message) : null,
    el("label", {}, "API key", input),
    el("div", { class: "actions" }, el("button", { class: "primary", type: "submit" }, "Use this key")),
  );
  show(el("h1", {}, "API key"), form);
  input.focus();
}

function notFoundPage(what) {
  show(
    el("h1", { "data-testid": "not-found" }, "404: not found"),
    el("p", {}, `${what} does not exist, or not for this API key.`),
    el("p", {}, el("a", { href: "#/responses" }, "Back to the responses")),
  );
}

function filterQuery(params) {
  const query = { limit: PAGE_SIZE, status: params.get("status"), model: params.get("model"), after: params.get("after") };
  const metadata = params.get("metadata");
  if (metadata && metadata.includes("=")) {
    const [key, ...rest] = metadata.split("=");
    query[`metadata[${key.trim()}]`] = rest.join("=").trim();
  }
  for (const [param, bound] of [["from", "created_after"], ["to", "created_before"]]) {
    const day = params.get(param);
    if (day) query[bound] = Math.floor(Date.parse(`${day}T00:00:00Z`) / 1000) + (param === "to" ? 86400 : 0);
  }
  return query;
}

async function listPage(params) {
  const list = await api("GET", "/responses", filterQuery(params));
  const field = (name, label, input) => el("label", {}, label, input || el("input", { name, value: params.get(name) || "" }));
  const status = el(
    "select",
    { name: "status" },
    ["", "queued", "in_progress", "completed", "incomplete", "failed", "cancelled"].map((value) =>
      el("option", { value, selected: params.get("status") === value }, value || "any"),
    ),
  );
  const form = el(
    "form",
    { class: "filters", onsubmit: (event) => {
      event.preventDefault();
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(event.target)) if (value) chosen.set(name, value);
      location.hash = `#/responses?${chosen}`;
    } },
    field("status", "Status", status),
    field("model", "Model"),
    field("metadata", "Metadata key=value"),
    field("from", "Created from", el("input", { type: "date", name: "from", value: params.get("from") || "" })),
    field("to", "Created to", el("input", { type: "date", name: "to", value: params.get("to") || "" })),
    el("button", { class: "primary", type: "submit" }, "Filter"),
  );
  const rows = list.data.map((response) =>
    el(
      "tr",
      { "data-testid": "response-row" },
      el("td", {}, when(response.created_at)),
      el("td", {}, responseLink(response.id)),
      el("td", {}, statusBadge(response.status)),
      el("td", {}, response.model),
      el("td", {}, outputText(response).slice(0, 80)),
      el("td", {}, response.usage ? response.usage.total_tokens : "-"),
    ),
  );
  const table = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["Created", "Id", "Status", "Model", "Output", "Tokens"].map((name) => el("th", {}, name)))),
    el("tbody", {}, rows),
  );
  let more = null;
  if (list.has_more) {
    const next = new URLSearchParams(params);
    next.set("after", list.last_id);
    more = el("p", {}, el("a", { href: `#/responses?${next}`, "data-testid": "next-page" }, "Older responses"));
  }
  show(
    el("h1", {}, "Responses"),
    form,
    list.data.length ? table : el("p", { class: "muted", "data-testid": "empty" }, "No stored responses match."),
    more,
  );
}

// The chain a response belongs to: its ancestors by previous_response_id, and the responses that continue it.
async function chainOf(response) {
  const before = [];
  let previous = response.previous_response_id;
  while (previous && before.length < CHAIN_STEPS) {
    try {
      const earlier = await api("GET", `/responses/${encodeURIComponent(previous)}`);
      before.unshift(earlier);
      previous = earlier.previous_response_id;
    } catch (error) {
      if (error.status !== 404) throw error;
      before.unshift({ id: previous, status: "not stored" });
      break;
    }
  }
  const after = [];
  let current = response.id;
  while (after.length < CHAIN_STEPS) {
    const next = await api("GET", "/responses", { previous_response_id: current, order: "asc", limit: 1 });
    if (!next.data.length) break;
    after.push(next.data[0]);
    current = next.data[0].id;
  }
  return { before, after };
}

function timeline(response, chain) {
  const entry = (turn, current) =>
    el(
      "li",
      { class: current ? "current" : "", "data-testid": "chain-turn" },
      current ? turn.id : responseLink(turn.id),
      " ",
      statusBadge(turn.status),
      turn.created_at ? ` ${when(turn.created_at)}` : "",
    );
  return el("ol", { class: "timeline" }, chain.before.map((turn) => entry(turn, false)), entry(response, true),
    chain.after.map((turn) => entry(turn, false)));
}

async function responsePage(id) {
  const response = await api("GET", `/responses/${encodeURIComponent(id)}`);
  const [inputs, chain] = await Promise.all([
    api("GET", `/responses/${encodeURIComponent(id)}/input_items`, { order: "asc", limit: 100 }),
    chainOf(response),
  ]);
  const running = !TERMINAL.has(response.status);
  const usage = response.usage;
  const conversation = response.conversation && response.conversation.id;
  show(
    el("h1", {}, "Response ", el("code", {}, response.id)),
    el(
      "section",
      {},
      facts([
        ["Status", statusBadge(response.status)],
        ["Model", response.model],
        ["Created", when(response.created_at)],
        ["Completed", when(response.completed_at)],
        ["Took", response.completed_at ? `${response.completed_at - response.created_at} s` : "-"],
        ["Background", response.background ? "yes" : "no"],
        ["Conversation", conversation ? el("a", { href: `#/conversations/${encodeURIComponent(conversation)}` }, conversation) : "-"],
        ["Metadata", Object.keys(response.metadata || {}).length ? JSON.stringify(response.metadata) : "-"],
      ]),
    ),
    el(
      "div",
      { class: "actions" },
      running && response.background ? el("a", { href: `#/responses/${encodeURIComponent(id)}/live` }, "Live view") : null,
      running ? el("button", { type: "button", onclick: () => cancel(id) }, "Cancel") : null,
      el("button", { type: "button", class: "danger", onclick: () => remove(id) }, "Delete"),
    ),
    response.error ? el("p", { class: "notice error" }, `${response.error.code}: ${response.error.message}`) : null,
    el("h2", {}, "Input items"),
    el("section", { "data-testid": "input-items" }, inputs.data.length ? inputs.data.map(itemView) : el("p", { class: "muted" }, "None (the chain gave the context).")),
    el("h2", {}, "Output"),
    el("section", { "data-testid": "output" }, response.output.length ? response.output.map(itemView) : el("p", { class: "muted" }, "No output (yet).")),
    el("h2", {}, "Usage"),
    el(
      "section",
      { "data-testid": "usage" },
      usage
        ? facts([
            ["Input tokens", usage.input_tokens],
            ["Cached input tokens", (usage.input_tokens_details || {}).cached_tokens || 0],
            ["Output tokens", usage.output_tokens],
            ["Reasoning tokens", (usage.output_tokens_details || {}).reasoning_tokens || 0],
            ["Total tokens", usage.total_tokens],
          ])
        : el("p", { class: "muted" }, "Not yet counted."),
    ),
    el("h2", {}, "Chain"),
    el("section", { "data-testid": "chain" }, timeline(response, chain)),
    el("h2", {}, "Raw JSON"),
    el("pre", { class: "raw", "data-testid": "raw" }, JSON.stringify(response, null, 2)),
  );
}

// A button's action: its failure is shown on the page rather than lost in the console.
async function act(action) {
  try {
    await action();
  } catch (error) {
    page.prepend(el("p", { class: "notice error", "data-testid": "error" }, error.message));
  }
}

// `rerender`: false on a live page that follows the stream, whose events bring the cancelled status themselves.
function cancel(id, rerender = true) {
  return act(async () => {
    await api("POST", `/responses/${encodeURIComponent(id)}/cancel`);
    if (rerender) await render();
  });
}

function remove(id) {
  return act(async () => {
    if (!confirm(`Delete ${id}? This cannot be undone.`)) return;
    await api("DELETE", `/responses/${encodeURIComponent(id)}`);
    show(el("h1", {}, "Deleted"), el("p", { "data-testid": "deleted" }, `Response ${id} was deleted.`),
      el("p", {}, el("a", { href: "#/responses" }, "Back to the responses")));
  });
}

// Follows GET ?stream=true (fetch, not EventSource: EventSource cannot send the API key).
async function livePage(id) {
  const response = await api("GET", `/responses/${encodeURIComponent(id)}`);
  const text = el("div", { id: "live-text", class: "item", "data-testid": "live-text" });
  const status = el("span", { "data-testid": "live-status" }, statusBadge(response.status));
  const counter = el("span", { class: "muted", "data-testid": "live-events" }, "0 events");
  let following = false;
  const cancelButton = el("button", { type: "button", class: "danger", onclick: () => cancel(id, !following) }, "Cancel");
  show(
    el("h1", {}, "Live: ", responseLink(id)),
    el("div", { class: "actions" }, status, counter, cancelButton),
    text,
  );
  if (TERMINAL.has(response.status) || !response.background) {
    cancelButton.disabled = true;
    text.textContent = outputText(response);
    return;
  }
  const reply = await fetch(`/v1/responses/${encodeURIComponent(id)}?stream=true`, { headers: authHeaders() });
  if (!reply.ok) {
    const body = await reply.json().catch(() => ({}));
    if (reply.status === 400 && body.error && body.error.param === "stream") {
      // Created without stream: true, so no events were kept. The response object does not say so (it has no
      // `stream` field): the list links every running background response here, and this page explains.
      text.replaceChildren(el("p", { class: "notice", "data-testid": "live-unstreamed" },
        `This response was created without stream: true; there are no events to follow. It is ${response.status}: `,
        "cancel it here, or open ", responseLink(id), " to see its output once it ends."));
      counter.hidden = true;
      return;
    }
    text.textContent = (body.error && body.error.message) || reply.statusText;
    return;
  }
  following = true;
  const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let events = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("\n");
      if (!data || data === "[DONE]") continue;
      const event = JSON.parse(data);
      counter.textContent = `${++events} events`;
      if (event.type === "response.output_text.delta") text.append(event.delta);
      if (event.response && event.response.status) status.replaceChildren(statusBadge(event.response.status));
      if (event.response && TERMINAL.has(event.response.status)) cancelButton.disabled = true;
    }
  }
}

function conversationsPage() {
  const input = el("input", { name: "id", placeholder: "conv_...", "aria-label": "Conversation id" });
  show(
    el("h1", {}, "Conversations"),
    el(
      "form",
      { class: "filters", onsubmit: (event) => {
        event.preventDefault();
        if (input.value.trim()) location.hash = `#/conversations/${encodeURIComponent(input.value.trim())}`;
      } },
      el("label", {}, "Conversation id", input),
      el("button", { class: "primary", type: "submit" }, "Open"),
    ),
    el("p", { class: "muted" }, "The API lists no conversations (neither does the hosted one): open one by id, or from a response that used it."),
  );
}

async function conversationPage(id, params) {
  const conversation = await api("GET", `/conversations/${encodeURIComponent(id)}`);
  const items = await api("GET", `/conversations/${encodeURIComponent(id)}/items`, { order: "asc", limit: 100, after: params.get("after") });
  let more = null;
  if (items.has_more) {
    more = el("p", {}, el("a", { href: `#/conversations/${encodeURIComponent(id)}?after=${encodeURIComponent(items.last_id)}` }, "More items"));
  }
  show(
    el("h1", {}, "Conversation ", el("code", {}, conversation.id)),
    el("section", {}, facts([
      ["Created", when(conversation.created_at)],
      ["Metadata", Object.keys(conversation.metadata || {}).length ? JSON.stringify(conversation.metadata) : "-"],
    ])),
    el("h2", {}, "Items"),
    el("section", { "data-testid": "conversation-items" }, items.data.length ? items.data.map(itemView) : el("p", { class: "muted" }, "No items.")),
    more,
  );
}

// ---- routing -----------------------------------------------------------------------------------------------

// What a 404 on each kind of page names.
const NOUNS = { conversations: "Conversation", webhooks: "Webhook endpoint", batches: "Batch", files: "File", vector_stores: "Vector store" };

async function render() {
  forgetKey.hidden = !sessionStorage.getItem(KEY_STORAGE);
  const [path, queryString] = (location.hash.slice(1) || "/responses").split("?");
  const params = new URLSearchParams(queryString || "");
  let parts = [];
  try {
    // Inside the try: a malformed escape (#/responses/%) is a page that does not exist, not a blank one.
    parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    if (parts.length === 1 && parts[0] === "responses") await listPage(params);
    else if (parts.length === 2 && parts[0] === "responses") await responsePage(parts[1]);
    else if (parts.length === 3 && parts[0] === "responses" && parts[2] === "live") await livePage(parts[1]);
    else if (parts.length === 1 && parts[0] === "conversations") conversationsPage();
    else if (parts.length === 2 && parts[0] === "conversations") await conversationPage(parts[1], params);
    else if (parts.length === 1 && parts[0] === "usage") await usagePage(params); // usage.js
    else if (parts.length === 1 && parts[0] === "webhooks") await webhooksPage(params);
    else if (parts.length === 2 && parts[0] === "webhooks") await webhookPage(parts[1], params);
    else if (parts.length === 1 && parts[0] === "batches") await batchesPage(params);
    else if (parts.length === 2 && parts[0] === "batches") await batchPage(parts[1]);
    else if (parts.length === 2 && parts[0] === "files") await filePage(parts[1]);
    else if (parts.length === 1 && parts[0] === "vector_stores") await vectorStoresPage(params); // vector_stores.js
    else if (parts.length === 2 && parts[0] === "vector_stores") await vectorStorePage(parts[1]);
    else if (parts.length === 1 && parts[0] === "server") await serverPage(params); // server.js
    else notFoundPage(`The page ${path}`);
  } catch (error) {
    if (error instanceof URIError) notFoundPage(`The page ${path}`);
    else if (error.status === 401) keyPage(sessionStorage.getItem(KEY_STORAGE) ? error.message : null);
    else if (error.status === 404) notFoundPage(`${NOUNS[parts[0]] || "Response"} ${parts[1]}`);
    else show(el("h1", {}, "Error"), el("p", { class: "notice error", "data-testid": "error" }, error.message));
  }
}

forgetKey.addEventListener("click", () => {
  sessionStorage.removeItem(KEY_STORAGE);
  forgetProject();
  render();
  loadProjects();
});
window.addEventListener("hashchange", render);
render();
loadProjects();
