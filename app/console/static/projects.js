// The project chooser of an admin key: the projects come from the key API (GET /v1/keys, admin keys only), and the
// one chosen is sent as the OpenAI-Project header on every request (console.js's authHeaders), so every page shows
// that project's data. For any other key the key API answers 403 and the chooser stays hidden, as does the link to
// the admins' server overview (server.js; shown too before a key is entered: an open server has no roles).
"use strict";

const PROJECT_STORAGE = "llama-responses-project";

function chosenProject() {
  return sessionStorage.getItem(PROJECT_STORAGE) || "";
}

function forgetProject() {
  sessionStorage.removeItem(PROJECT_STORAGE);
}

// Fills the header's chooser once a key is known; hides it (and forgets a choice) for a key that is not an admin's.
async function loadProjects() {
  const chooser = document.getElementById("project");
  const serverLink = document.getElementById("server-link");
  if (!sessionStorage.getItem(KEY_STORAGE)) {
    chooser.hidden = true;
    serverLink.hidden = false;
    return;
  }
  let keys;
  try {
    // Without the header: the key API's answer does not depend on it, and a stale choice must not break it.
    const reply = await fetch(new URL("/v1/keys", location.origin), { headers: { Authorization: authHeaders().Authorization } });
    if (!reply.ok) throw new ApiError(reply.status, reply.statusText);
    keys = await reply.json();
  } catch (error) {
    chooser.hidden = true;
    serverLink.hidden = true;
    if (chosenProject()) {
      forgetProject();
      render();
    }
    return;
  }
  const projects = new Map();
  for (const key of keys.data || []) projects.set(key.project_id, key.project);
  const select = chooser.querySelector("select");
  select.replaceChildren(
    el("option", { value: "" }, "This key's own data"),
    ...[...projects].map(([id, name]) => el("option", { value: id, selected: id === chosenProject() }, `${name} (${id})`)),
  );
  chooser.hidden = false;
  serverLink.hidden = false;
}

function chooseProject(id) {
  if (id) sessionStorage.setItem(PROJECT_STORAGE, id);
  else forgetProject();
  render();
}

document.querySelector("#project select").addEventListener("change", (event) => chooseProject(event.target.value));
