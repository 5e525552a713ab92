// The once console: reads /console/api/state every two seconds and draws it.
// Every value from the server is placed with textContent, never parsed as
// HTML. The admin token lives in this tab's session storage only.
"use strict";

const REFRESH_MS = 2000;
const TOKEN = "once.adminToken";
const ACTOR = "once.actor";

const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (cell instanceof Node) td.appendChild(cell);
    else td.textContent = cell === null || cell === undefined ? "—" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tableId, rows) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren(...rows);
}

const time = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "—");

function token() {
  return sessionStorage.getItem(TOKEN);
}

function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function showProblem(text) {
  const box = $("problem");
  box.textContent = text;
  box.hidden = !text;
}

function askForToken(why) {
  sessionStorage.removeItem(TOKEN);
  $("console").hidden = true;
  $("login").hidden = false;
  showProblem(why);
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + token() }, options.headers || {});
  return fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
}

let pendingFailback = null;

function openFailback(region) {
  pendingFailback = region;
  $("failback-title").textContent = `Fail ${region} back: its tenants go home`;
  $("failback-actor").value = sessionStorage.getItem(ACTOR) || "";
  $("failback-reason").value = "";
  $("failback").hidden = false;
  $("failback-actor").focus();
}

function drawRegions(regions) {
  fill(
    "regions",
    regions.map((r) => {
      const action = el("span");
      if (r.phase === "awaiting-failback") {
        const button = el("button", "fail back", "failback");
        button.type = "button";
        button.dataset.region = r.name;
        button.addEventListener("click", () => openFailback(r.name));
        action.appendChild(button);
      } else if (r.phase === "recovering") {
        action.textContent = "wait until healthy";
      }
      const phase = el("span", r.phase, "phase phase-" + r.phase);
      const checks = r.up
        ? `up (${r.consecutiveFailures} failed in a row)`
        : `down (${r.consecutiveSuccesses} passed in a row)`;
      const tr = row([
        r.name + (r.cut ? " (cut off by a drill)" : ""),
        phase,
        checks,
        r.published ? r.published.toLowerCase() : null,
        r.tenantsHere,
        `${r.ownTenantsAway} of ${r.ownTenants}`,
        r.nodes.join(" "),
        action,
      ]);
      tr.dataset.region = r.name;
      tr.dataset.phase = r.phase;
      return tr;
    }),
  );
}

function drawMembers(members) {
  fill(
    "members",
    members.map((m) => {
      const s = m.status;
      if (!s) {
        const tr = row([m.endpoint, el("span", "unreachable", "fail"), null, null, null, null, null, null, m.error]);
        tr.dataset.state = "unreachable";
        return tr;
      }
      const lag = Object.entries(s.follower_lag || {})
        .map(([id, l]) => `${id}: ${l === null ? "?" : l}`)
        .join(", ");
      const tr = row([
        `${s.id} ${m.endpoint}`,
        s.state,
        s.leader,
        s.term,
        s.last_log_index,
        s.committed_index,
        s.applied_index,
        m.applyLag,
        lag || null,
      ]);
      tr.dataset.state = s.state;
      return tr;
    }),
  );
}

function drawTenants(tenants) {
  fill(
    "tenants",
    tenants.map((t) => row([t.tenant, t.home, t.preferredHome, t.standbys.join(", "), t.epoch])),
  );
}

let pending = null;

function openResolve(record, outcome) {
  pending = { record, outcome };
  $("resolve-title").textContent =
    `Resolve ${record.tenant} / ${record.key} as ${outcome === "charged" ? "charged" : "not charged"}`;
  $("resolve-actor").value = sessionStorage.getItem(ACTOR) || "";
  $("resolve-reason").value = "";
  $("resolve").hidden = false;
  $("resolve-actor").focus();
}

function drawOperators(operators) {
  const note = $("records-note");
  if (!operators) {
    note.textContent = "This router was started without --node-admins: records are not shown.";
    fill("records", []);
    $("resolutions").replaceChildren();
    return;
  }
  note.textContent = operators.unreachable.length
    ? "Not reachable: " + operators.unreachable.join("; ")
    : `${operators.stuck.length} record(s) unknown or in progress past their lease.`;
  fill(
    "records",
    operators.stuck.map((r) => {
      const actions = el("span");
      if (r.status === "UNKNOWN_REQUIRES_RECOVERY") {
        for (const [outcome, label] of [["charged", "charged"], ["not-charged", "not charged"]]) {
          const button = el("button", label, "resolve");
          button.type = "button";
          button.dataset.outcome = outcome;
          button.addEventListener("click", () => openResolve(r, outcome));
          actions.appendChild(button);
        }
      } else {
        actions.textContent = "waiting for a takeover";
      }
      const tr = row([r.tenant, r.key, r.status, r.step, r.paymentId, time(r.createdAt), r.takeovers, actions]);
      tr.dataset.key = r.key;
      tr.dataset.status = r.status;
      return tr;
    }),
  );
  if (!operators.resolutions.length) {
    $("resolutions").replaceChildren(el("li", "No resolution yet.", "muted"));
    return;
  }
  $("resolutions").replaceChildren(
    ...operators.resolutions.map((a) => {
      const li = el(
        "li",
        `${time(a.resolvedAt)} ${a.actor} resolved ${a.tenant} / ${a.key} as ${a.outcome} in ${a.region}: ${a.reason}`,
      );
      li.dataset.key = a.key;
      li.dataset.actor = a.actor;
      return li;
    }),
  );
}

function drawFailbacks(failbacks) {
  if (!failbacks.length) {
    $("failbacks").replaceChildren(el("li", "No failback asked for from this console yet.", "muted"));
    return;
  }
  $("failbacks").replaceChildren(
    ...failbacks.map((f) => {
      const li = el(
        "li",
        `${time(f.requestedAt)} ${f.actor} asked to fail ${f.region} back: ${f.outcome}` +
          ` (${f.moved} tenant(s) moved): ${f.reason}`,
      );
      li.dataset.region = f.region;
      li.dataset.actor = f.actor;
      return li;
    }),
  );
}

function drawTimeline(div, timeline) {
  const start = timeline.length ? timeline[0].at : 0;
  const list = el("ol");
  for (const e of timeline) {
    list.appendChild(el("li", `+${((e.at - start) / 1000).toFixed(3)} s ${e.what}`));
  }
  div.appendChild(list);
}

function drawChaos(div, d) {
  const ok = d.passed ?? d.invariants_held;
  const verdict = d.verdict || (d.invariants_held ? "no violation" : "VIOLATIONS FOUND");
  div.dataset.kind = "chaos";
  div.dataset.passed = String(ok);
  div.appendChild(el("h3", `${d.name}: chaos, seed ${d.seed} — ${verdict}`, ok ? "pass" : "fail"));
  div.appendChild(
    el(
      "p",
      `${d.duration_seconds} s at ${d.rate}/s, nemeses ${d.nemeses.join(",")}; ` +
        `${d.faults.length} faults, ${d.operations} operations, ${d.attempts} attempts`,
    ),
  );
  const table = el("table", null, "nemeses");
  table.appendChild(document.createElement("thead")).appendChild(row(["nemesis", "injected", "took effect"]));
  const body = table.appendChild(document.createElement("tbody"));
  for (const [nemesis, c] of Object.entries(d.by_nemesis)) {
    const tr = row([nemesis, c.injected, c.took_effect]);
    if (c.took_effect < c.injected) tr.className = "fail";
    body.appendChild(tr);
  }
  div.appendChild(table);
  const away = d.homecoming ? d.homecoming.left_away : [];
  if (away.length) {
    div.appendChild(
      el(
        "p",
        "Left away from home: " + away.map((t) => `${t.tenant} (on ${t.home}, home ${t.preferred_home})`).join(", "),
        "fail",
      ),
    );
  }
  drawTimeline(div, d.timeline);
}

function drawDrills(drills) {
  const box = $("drills");
  if (!drills) {
    box.replaceChildren(el("p", "This router was started without --drill-reports.", "muted"));
    return;
  }
  if (!drills.length) {
    box.replaceChildren(el("p", "No drill has run yet.", "muted"));
    return;
  }
  box.replaceChildren(
    ...drills.map((d) => {
      const div = el("div", null, "drill");
      div.dataset.name = d.name;
      if (!d.kind) {
        div.appendChild(el("p", `${d.name}: unreadable (${d.error})`, "fail"));
        return div;
      }
      if (d.kind === "chaos") {
        drawChaos(div, d);
        const failed = d.checks.filter((c) => !c.passed).map((c) => c.name);
        if (failed.length) div.appendChild(el("p", "Failed checks: " + failed.join(", "), "fail"));
        return div;
      }
      const ok = d.passed ?? d.invariants_held;
      const verdict = d.verdict || (d.invariants_held ? "every invariant held" : "INVARIANTS BROKEN");
      div.dataset.kind = "failover";
      div.dataset.passed = String(ok);
      div.appendChild(el("h3", `${d.name}: ${d.fault.mode} of ${d.region} — ${verdict}`, ok ? "pass" : "fail"));
      const m = d.measurements;
      div.appendChild(
        el(
          "p",
          `detection ${m.max_detection_ms ?? "—"} ms, recovery ${m.max_recovery_ms ?? "—"} ms, ` +
            `${m.successes_per_second.toFixed(1)} successes/s over ${d.duration_seconds} s`,
        ),
      );
      drawTimeline(div, d.timeline);
      const failed = d.checks.filter((c) => !c.passed).map((c) => c.name);
      if (failed.length) div.appendChild(el("p", "Failed checks: " + failed.join(", "), "fail"));
      return div;
    }),
  );
}

async function refresh() {
  if (!token()) return;
  let response;
  try {
    response = await api("/console/api/state");
  } catch (e) {
    showProblem("The router did not answer: " + e.message);
    return;
  }
  if (response.status === 401) {
    askForToken("The admin token was not accepted.");
    return;
  }
  if (!response.ok) {
    showProblem(`The router answered ${response.status}.`);
    return;
  }
  const state = await response.json();
  showProblem(state.storeError ? "raft-store: " + state.storeError : "");
  $("login").hidden = true;
  $("console").hidden = false;
  $("router-region").textContent = `router in ${state.routerRegion}` + (state.autoFailover ? "" : " (automatic failover off)");
  drawRegions(state.regions);
  drawMembers(state.members);
  drawTenants(state.tenants);
  drawOperators(state.operators);
  drawFailbacks(state.failbacks);
  drawDrills(state.drills);
  const refreshed = $("refreshed");
  refreshed.textContent = "refreshed " + time(state.generatedAtMs) + " UTC";
  refreshed.dataset.at = String(state.generatedAtMs);
}

async function submitResolve(event) {
  event.preventDefault();
  if (!pending) return;
  const { record, outcome } = pending;
  const actor = $("resolve-actor").value.trim();
  const reason = $("resolve-reason").value.trim();
  sessionStorage.setItem(ACTOR, actor);
  const result = $("resolve-result");
  result.textContent = "resolving …";
  // An earlier attempt's outcome is not this one's.
  delete result.dataset.outcome;
  const response = await api("/console/api/resolve", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      region: record.via,
      tenant: record.tenant,
      principal: record.principal,
      key: record.key,
      outcome,
      reason,
      actor,
    }),
  });
  const body = await response.json().catch(() => ({}));
  if (response.ok) {
    result.textContent = `${record.key} is ${body.status} now (resolved by ${actor}).`;
    result.dataset.outcome = "resolved";
    $("resolve").hidden = true;
    pending = null;
  } else {
    result.textContent = `Not resolved: ${body.errorCode || response.status} ${body.message || ""}`;
    result.dataset.outcome = "refused";
  }
  await refresh();
}

async function submitFailback(event) {
  event.preventDefault();
  if (!pendingFailback) return;
  const region = pendingFailback;
  const actor = $("failback-actor").value.trim();
  const reason = $("failback-reason").value.trim();
  sessionStorage.setItem(ACTOR, actor);
  const result = $("failback-result");
  result.textContent = `failing ${region} back …`;
  delete result.dataset.outcome;
  const response = await api("/console/api/failback", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ region, actor, reason }),
  });
  const body = await response.json().catch(() => ({}));
  if (response.ok) {
    result.textContent = `${region} failed back by ${actor}: ${body.moved.length} tenant(s) moved home.`;
    result.dataset.outcome = "failed-back";
    $("failback").hidden = true;
    pendingFailback = null;
  } else {
    result.textContent = `Not failed back: ${body.errorCode || response.status} ${body.message || ""}`;
    result.dataset.outcome = "refused";
  }
  await refresh();
}

function start() {
  takeTokenFromFragment();
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN, $("token").value.trim());
    $("token").value = "";
    refresh();
  });
  // A console URL with a token, opened in a tab already on the console,
  // changes only the fragment: no page load.
  window.addEventListener("hashchange", () => {
    takeTokenFromFragment();
    refresh();
  });
  $("resolve").addEventListener("submit", submitResolve);
  $("failback").addEventListener("submit", submitFailback);
  $("failback-cancel").addEventListener("click", () => {
    $("failback").hidden = true;
    pendingFailback = null;
  });
  $("resolve-cancel").addEventListener("click", () => {
    $("resolve").hidden = true;
    pending = null;
  });
  if (token()) refresh();
  else askForToken("");
  setInterval(refresh, REFRESH_MS);
}

start();
