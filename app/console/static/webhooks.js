// The console's webhook pages: the endpoints (create, with the signing secret shown once), one endpoint (rotate its
// secret, send a test event, enable or disable it, delete it) with its recent deliveries. Built on console.js's
// helpers (api, el, show, when, statusBadge, act); every value from the API is set as text, never parsed as HTML.
"use strict";

const DELIVERIES_PAGE = 20;

// A request with a JSON body (console.js's api() sends none).
async function apiSend(method, path, body) {
  const reply = await fetch(new URL(`/v1${path}`, location.origin), {
    method,
    headers: { ...authHeaders(), "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  const answer = await reply.json().catch(() => ({}));
  if (!reply.ok) throw new ApiError(reply.status, (answer.error && answer.error.message) || reply.statusText);
  return answer;
}

function endpointLink(endpoint) {
  return el("a", { href: `#/webhooks/${encodeURIComponent(endpoint.id)}` }, endpoint.name || endpoint.id);
}

// The object an event is about: a link to its page when the console has one.
function objectLink(id) {
  if (typeof id !== "string") return "-";
  if (id.startsWith("resp_")) return responseLink(id);
  if (id.startsWith("batch_")) return el("a", { href: `#/batches/${encodeURIComponent(id)}` }, id);
  return id;
}

// The secret, shown this once: it is not kept anywhere (a reload or another page loses it).
function secretNotice(endpoint, what) {
  return el(
    "div",
    { class: "notice", "data-testid": "signing-secret-notice" },
    el("p", {}, `${what}. Copy the signing secret now: it is shown this once, and the server cannot show it again.`),
    el("code", { class: "secret", "data-testid": "signing-secret" }, endpoint.signing_secret),
  );
}

function eventTypeChoices(types, chosen) {
  return el(
    "fieldset",
    { class: "choices" },
    el("legend", {}, "Event types"),
    types.map((type) =>
      el("label", { class: "choice" }, el("input", { type: "checkbox", name: "event_types", value: type, checked: chosen.includes(type) }), type),
    ),
  );
}

async function webhooksPage(params, created) {
  const [list, types] = await Promise.all([
    api("GET", "/webhook_endpoints", { limit: 100, after: params.get("after") }),
    api("GET", "/webhook_event_types"),
  ]);
  const name = el("input", { name: "name", required: true, "aria-label": "Name" });
  const url = el("input", { name: "url", type: "url", required: true, placeholder: "https://", "aria-label": "URL", size: 40 });
  const form = el(
    "form",
    { class: "filters", "data-testid": "create-endpoint", onsubmit: (event) => {
      event.preventDefault();
      const eventTypes = [...event.target.querySelectorAll("input[name=event_types]:checked")].map((box) => box.value);
      act(async () => {
        const made = await apiSend("POST", "/webhook_endpoints", { name: name.value.trim(), url: url.value.trim(), event_types: eventTypes });
        await webhooksPage(new URLSearchParams(), made);
      });
    } },
    el("label", {}, "Name", name),
    el("label", {}, "URL", url),
    eventTypeChoices(types.data, ["response.completed", "batch.completed"]),
    el("button", { class: "primary", type: "submit" }, "Create endpoint"),
  );
  const rows = list.data.map((endpoint) =>
    el(
      "tr",
      { "data-testid": "endpoint-row" },
      el("td", {}, when(endpoint.created_at)),
      el("td", {}, endpointLink(endpoint)),
      el("td", {}, endpoint.url),
      el("td", {}, (endpoint.event_types || []).join(", ")),
      el("td", {}, statusBadge(endpoint.status)),
      el("td", {}, endpoint.signing_secret_hint || "-"),
    ),
  );
  let more = null;
  if (list.has_more) {
    more = el("p", {}, el("a", { href: `#/webhooks?after=${encodeURIComponent(list.last_id)}` }, "More endpoints"));
  }
  show(
    el("h1", {}, "Webhook endpoints"),
    created ? secretNotice(created, `Endpoint ${created.name} created`) : null,
    form,
    list.data.length
      ? el(
          "table",
          {},
          el("thead", {}, el("tr", {}, ["Created", "Name", "URL", "Events", "Status", "Secret"].map((title) => el("th", {}, title)))),
          el("tbody", {}, rows),
        )
      : el("p", { class: "muted", "data-testid": "empty" }, "No webhook endpoints yet."),
    more,
  );
}

function deliveryRow(delivery) {
  const answer = delivery.last_error || "";
  return el(
    "tr",
    { "data-testid": "delivery-row" },
    el("td", {}, when(delivery.created_at)),
    el("td", {}, delivery.event_type),
    el("td", {}, objectLink(delivery.data && delivery.data.id)),
    el("td", {}, statusBadge(delivery.status)),
    el("td", {}, delivery.attempts),
    el("td", {}, delivery.last_status_code === null || delivery.last_status_code === undefined ? "-" : delivery.last_status_code),
    el("td", {}, delivery.status === "pending" ? when(delivery.next_attempt_at) : when(delivery.delivered_at)),
    el("td", { class: "excerpt" }, answer.slice(0, 200)),
  );
}

async function webhookPage(id, params, notice) {
  const path = `/webhook_endpoints/${encodeURIComponent(id)}`;
  const [endpoint, deliveries, types] = await Promise.all([
    api("GET", path),
    api("GET", `${path}/deliveries`, { limit: DELIVERIES_PAGE, after: params.get("after") }),
    api("GET", "/webhook_event_types"),
  ]);
  const rerender = (shown) => webhookPage(id, new URLSearchParams(), shown);
  const testType = el("select", { name: "event_type", "aria-label": "Test event type" }, types.data.map((type) => el("option", { value: type }, type)));
  const enabled = endpoint.status === "enabled";
  const actions = el(
    "div",
    { class: "actions" },
    el("button", { type: "button", onclick: () => act(async () => {
      if (!confirm("Rotate the signing secret? Receivers must switch to the new one.")) return;
      const rotated = await apiSend("POST", `${path}/rotate_secret`, { keep_old_secret_active_for_24_hours: true });
      await rerender(secretNotice(rotated, "Secret rotated (the old one still signs for a grace period)"));
    }) }, "Rotate secret"),
    testType,
    el("button", { type: "button", onclick: () => act(async () => {
      const result = await apiSend("POST", `${path}/test`, { event_type: testType.value });
      await rerender(el("p", { class: "notice", "data-testid": "test-result" }, `Test ${result.event_type} sent: the endpoint answered ${result.status_code}.`));
    }) }, "Send test event"),
    el("button", { type: "button", onclick: () => act(async () => {
      await apiSend("POST", path, { status: enabled ? "disabled" : "enabled" });
      await rerender(null);
    }) }, enabled ? "Disable" : "Enable"),
    el("button", { type: "button", class: "danger", onclick: () => act(async () => {
      if (!confirm(`Delete the endpoint ${endpoint.name}? Its pending deliveries are dropped.`)) return;
      await api("DELETE", path);
      show(el("h1", {}, "Deleted"), el("p", { "data-testid": "deleted" }, `Webhook endpoint ${endpoint.id} was deleted.`),
        el("p", {}, el("a", { href: "#/webhooks" }, "Back to the webhook endpoints")));
    }) }, "Delete"),
  );
  let more = null;
  if (deliveries.has_more) {
    more = el("p", {}, el("a", { href: `#/webhooks/${encodeURIComponent(id)}?after=${encodeURIComponent(deliveries.last_id)}` }, "Older deliveries"));
  }
  show(
    el("h1", {}, "Webhook endpoint ", el("code", {}, endpoint.id)),
    notice || null,
    el("section", {}, facts([
      ["Name", endpoint.name],
      ["URL", endpoint.url],
      ["Status", statusBadge(endpoint.status)],
      ["Event types", (endpoint.event_types || []).join(", ")],
      ["Secret", endpoint.signing_secret_hint || "-"],
      ["Created", when(endpoint.created_at)],
      ["Updated", when(endpoint.updated_at)],
    ])),
    actions,
    el("h2", {}, "Recent deliveries"),
    deliveries.data.length
      ? el(
          "table",
          { "data-testid": "deliveries" },
          el("thead", {}, el("tr", {}, ["Created", "Event", "Object", "Status", "Attempts", "Last status", "Next / delivered", "Last answer"].map((title) => el("th", {}, title)))),
          el("tbody", {}, deliveries.data.map(deliveryRow)),
        )
      : el("p", { class: "muted", "data-testid": "no-deliveries" }, "No deliveries yet (test events are not stored)."),
    more,
  );
}
