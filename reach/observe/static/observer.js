// reach observer: plain JavaScript, no library, no build step.
//
// The token: taken once from a "#token=..." fragment (never sent to the server by the browser)
// or the sign-in field, kept in this tab's sessionStorage, and sent only in the Authorization
// header: the stream is read with fetch() for that reason (EventSource cannot send headers, and
// a token in a URL ends up in access logs, the history and Referer headers).
//
// Data from the cluster is put in the page with textContent and DOM nodes only, never as HTML.
"use strict";

const TOKEN_KEY = "reach.observe.token";
const API = "/observe/api";
const SVG = "http://www.w3.org/2000/svg";
const state = {
  token: null, parts: {}, view: "cluster", traceId: null, flashUntil: new Map(),
  agentsPage: 0, agentsSize: 50, agentsTotal: 0, lastMessage: 0, tracesReceived: null,
  stream: null, refused: false,
};

// -- small helpers ------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value; else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}
const $ = (sel) => document.querySelector(sel);
const fmt = (n, digits = 1) => (n === null || n === undefined ? "–" : Number(n).toFixed(digits));
const when = (seconds) => new Date(seconds * 1000).toLocaleTimeString();
const short = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);
function status(value) { return el("span", { class: "status " + (value || "unknown"), text: value || "unknown" }); }
function fill(tbody, rows) { tbody.replaceChildren(...rows); }
function cells(...values) { return values.map((v) => (v instanceof Node ? el("td", {}, v) : el("td", { text: String(v) }))); }
function debounce(fn, ms) { let t; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); }; }

// -- the token and the calls --------------------------------------------------------------
function takeToken() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search + "#cluster");
  }
  state.token = sessionStorage.getItem(TOKEN_KEY);
}
function refused(message) {
  state.refused = true;
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  if (state.stream) state.stream.abort();
  showLogin(message);
}
async function api(path) {
  const response = await fetch(API + path, {
    headers: { Authorization: "Bearer " + state.token }, cache: "no-store" });
  if (response.status === 401) {
    const body = await response.json().catch(() => ({}));
    refused("The gateway refused this token: " + (body.message || "unauthorized"));
    throw new Error("unauthorized");
  }
  return response.json();
}

// -- the stream ---------------------------------------------------------------------------
async function stream() {
  while (state.token && !state.refused) {
    const controller = new AbortController();
    state.stream = controller;
    try {
      const response = await fetch(API + "/stream", {
        headers: { Authorization: "Bearer " + state.token, Accept: "text/event-stream" },
        cache: "no-store", signal: controller.signal });
      if (response.status === 401) {
        const body = await response.json().catch(() => ({}));
        refused("The gateway refused this token: " + (body.message || "unauthorized"));
        return;
      }
      if (!response.ok) throw new Error("stream answered " + response.status);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).trim()).join("\n");
          if (data) receive(JSON.parse(data));
        }
      }
    } catch (err) {
      if (state.refused) return;
    }
    setLive("off");
    await new Promise((r) => setTimeout(r, 2000));  // then reconnect
  }
}
function setLive(mode) {
  const live = $("#live");
  live.className = "live " + mode;
  live.textContent = { on: "live", stale: "stale", off: "offline" }[mode];
}
setInterval(() => {
  if (state.lastMessage && Date.now() - state.lastMessage > 5000) setLive("stale");
}, 1000);

function receive(message) {
  state.lastMessage = Date.now();
  setLive("on");
  const changed = [];
  for (const name of ["cluster", "trees", "groups", "graph", "letters", "traces", "tasks"]) {
    if (name in message) { state.parts[name] = message[name]; changed.push(name); }
  }
  for (const r of message.restarts || []) state.flashUntil.set(r.child, Date.now() + 4000);
  if ((message.restarts || []).length && !changed.includes("trees")) changed.push("trees");
  document.body.dataset.seq = message.seq;
  render(changed);
}

// -- views --------------------------------------------------------------------------------
const VIEWS = ["cluster", "trees", "agents", "graph", "traces", "trace", "letters", "tasks"];
function route() {
  const hash = location.hash.replace(/^#/, "") || "cluster";
  if (hash.startsWith("trace/")) { state.view = "trace"; state.traceId = hash.slice(6); }
  else state.view = VIEWS.includes(hash) ? hash : "cluster";
  for (const v of VIEWS) $("#view-" + v).hidden = v !== state.view || !state.token;
  for (const a of document.querySelectorAll("#tabs a")) {
    const active = a.dataset.view === state.view || (state.view === "trace" && a.dataset.view === "traces");
    a.classList.toggle("active", active);
  }
  if (state.token) render(Object.keys(state.parts), true);
}
function render(changed, entering = false) {
  const has = (name) => changed.includes(name);
  if (state.view === "cluster" && has("cluster")) renderCluster();
  if (state.view === "cluster" && has("traces")) renderCluster();
  if (state.view === "trees" && has("trees")) renderTrees();
  if (state.view === "agents" && (has("groups") || entering)) { renderGroups(); loadAgents(); }
  if (state.view === "graph" && (has("graph") || entering)) renderGraph();
  if (state.view === "traces" && (has("traces") || entering)) maybeLoadTraces(entering);
  if (state.view === "trace" && entering) loadTrace(state.traceId);
  if (state.view === "letters" && (has("letters") || entering)) renderLetters();
  if (state.view === "tasks" && (has("tasks") || entering)) renderTasks();
}

function card(label, big, rows) {
  return el("div", { class: "card" }, el("div", { class: "label", text: label }),
    el("div", { class: "big", text: big }),
    rows ? el("div", { class: "rows" }, ...rows.map(([k, v]) => el("div", { text: k + ": " + v }))) : null);
}
function renderCluster() {
  const c = state.parts.cluster;
  if (!c) return;
  const agents = Object.values(c.agents).reduce((a, b) => a + b, 0);
  const hosts = Object.values(c.hosts).reduce((a, b) => a + b, 0);
  const t = state.parts.traces || {};
  $("#cluster-cards").replaceChildren(
    card("nodes", String(c.nodes), [["dead", c.nodes_dead]]),
    card("hosts", String(hosts), Object.entries(c.hosts)),
    card("agents", String(agents), Object.entries(c.agents)),
    card("messages / s", fmt(c.messages_per_s)),
    card("dead letters", String(c.dead_letters)),
    card("trace store", t.available ? String(t.spans) + " spans" : "not running",
      t.available ? [["traces", t.traces], ["dropped", t.dropped]] : null));
  fill($("#pools tbody"), Object.entries(c.pools).map(([p, n]) => el("tr", {}, ...cells(p, n))));
}

function treeNode(node) {
  if (node.kind === "supervisor") {
    const head = el("div", { class: "node supervisor", "data-supervisor": node.name },
      el("span", { text: node.name }), status(node.state),
      el("span", { class: "meta", text: node.strategy + (node.restart ? " · " + node.restart : "") }),
      node.restarts ? el("span", { class: "restarts some", text: "↻ " + node.restarts }) : null,
      node.detail ? el("span", { class: "reason", text: node.detail }) : null);
    const kids = node.children.map((c) => el("li", {}, treeNode(c)));
    const hidden = Object.entries(node.hidden || {});
    if (hidden.length) kids.push(el("li", {}, el("div", { class: "node" },
      el("span", { class: "meta", text: "and " + hidden.map(([s, n]) => n + " " + s).join(", ") + " more" }))));
    return el("div", {}, head, kids.length ? el("ul", {}, ...kids) : null);
  }
  const flashing = (state.flashUntil.get(node.child_id) || 0) > Date.now();
  return el("div", { class: "node agent" + (flashing ? " flash" : ""), "data-child": node.child_id,
                     title: node.host },
    el("span", { class: "id", text: node.child_id }), status(node.status),
    el("span", { class: "meta", text: node.host_kind + " · epoch " + node.epoch + " · " + node.restart }),
    el("span", { class: "restarts" + (node.restarts ? " some" : ""), "data-restarts": node.restarts,
                 text: "↻ " + node.restarts }),
    node.last_reason ? el("span", { class: "reason", title: node.last_reason,
                                    text: "last exit: " + node.last_reason }) : null);
}
function renderTrees() {
  const t = state.parts.trees;
  if (!t) return;
  const roots = t.roots.map((r) => el("ul", { class: "tree" }, el("li", {}, treeNode(r))));
  $("#trees").replaceChildren(...(roots.length ? roots : [el("p", { class: "hint", text: "No supervisor runs." })]));
}

async function loadAgents() {
  const params = new URLSearchParams({ page: state.agentsPage, size: state.agentsSize });
  const capability = $("#agent-capability").value.trim();
  const q = $("#agent-q").value.trim();
  const st = $("#agent-status").value;
  if (capability) params.set("capability", capability);
  if (q) params.set("q", q);
  if (st) params.set("status", st);
  const page = await api("/agents?" + params);
  state.agentsTotal = page.total;
  const first = page.total ? page.page * page.size + 1 : 0;
  $("#agents-range").textContent = first + "–" + (page.page * page.size + page.rows.length) + " of " + page.total;
  fill($("#agents tbody"), page.rows.map((a) => el("tr", { "data-agent": a.agent_id },
    ...cells(a.agent_id,
      el("span", {}, ...Object.entries(a.capabilities).map(([c, p]) => el("span", { class: "cap", text: c + " (" + p + ")" }))),
      status(a.status), el("span", { title: a.host, text: a.host_kind + " " + short(a.host, 28) }),
      short(a.node, 10), a.epoch, a.load, fmt(a.in_per_s, 2), fmt(a.out_per_s, 2), a.errors))));
}
function groupRows(groups) {
  return groups.map((g) => el("tr", {}, ...cells(short(g.key, 40), g.agents,
    Object.entries(g.statuses).map(([s, n]) => s + " " + n).join(", "), g.load)));
}
function renderGroups() {
  const g = state.parts.groups;
  if (!g) return;
  fill($("#by-host tbody"), groupRows(g.by_host));
  fill($("#by-capability tbody"), groupRows(g.by_capability));
}

function renderGraph() {
  const g = state.parts.graph;
  const area = $("#graph");
  if (!g || !g.available) {
    $("#graph-empty").textContent = "No trace store runs: the graph is drawn from traces.";
    area.replaceChildren();
    return;
  }
  $("#graph-empty").textContent = g.nodes.length ? (g.dropped ? g.dropped + " lighter edges not drawn." : "")
    : "No messages in the last minute.";
  const w = 800, h = 520, r = Math.min(w, h) / 2 - 70;
  const at = new Map(g.nodes.map((n, i) => {
    const angle = (2 * Math.PI * i) / g.nodes.length - Math.PI / 2;
    return [n.name, [w / 2 + r * Math.cos(angle), h / 2 + r * Math.sin(angle)]];
  }));
  const most = Math.max(1, ...g.edges.map((e) => e.per_s));
  const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "28", refY: "5",
    markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8b95b5" })));
  const edges = g.edges.filter((e) => at.has(e.source) && at.has(e.target)).map((e) => {
    const [x1, y1] = at.get(e.source), [x2, y2] = at.get(e.target);
    const width = 1 + 7 * Math.sqrt(e.per_s / most);
    const line = svg("line", { class: "edge" + (e.errors ? " error" : ""), x1, y1, x2, y2,
      "stroke-width": width.toFixed(1), "marker-end": "url(#arrow)",
      "data-edge": e.source + " -> " + e.target });
    line.append(svg("title", { text: e.source + " → " + e.target + ": " + e.count + " messages, " + e.errors + " errors" }));
    const label = svg("text", { class: "rate", x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, text: fmt(e.per_s, 2) + "/s" });
    return svg("g", {}, line, label);
  });
  const nodes = g.nodes.map((n) => {
    const [x, y] = at.get(n.name);
    return svg("g", { class: "gnode", "data-node": n.name }, svg("circle", { cx: x, cy: y, r: 22 }),
      svg("text", { x, y: y + 36, text: short(n.name, 24) }));
  });
  area.replaceChildren(defs, ...edges, ...nodes);
  fill($("#edges tbody"), g.edges.map((e) => el("tr", { class: e.errors ? "error" : "" },
    ...cells(e.source, e.target, e.count, fmt(e.per_s, 2), e.errors))));
}

let tracesLoaded = 0;
function maybeLoadTraces(force) {
  const t = state.parts.traces || {};
  if (!force && t.received === state.tracesReceived && Date.now() - tracesLoaded < 10000) return;
  if (!force && Date.now() - tracesLoaded < 2000) return;  // at most one listing every 2 s
  state.tracesReceived = t.received;
  loadTraces();
}
async function loadTraces() {
  tracesLoaded = Date.now();
  const params = new URLSearchParams({ limit: 50 });
  const agent = $("#trace-agent").value.trim(), capability = $("#trace-capability").value.trim();
  if (agent) params.set("agent", agent);
  if (capability) params.set("capability", capability);
  if ($("#trace-errors").checked) params.set("status", "error");
  if ($("#trace-slowest").checked) params.set("slowest", "1");
  const found = await api("/traces?" + params);
  $("#traces-empty").textContent = !found.available ? "No trace store runs in this cluster."
    : found.traces.length ? "" : "No trace matches.";
  fill($("#traces tbody"), found.traces.map((t) => el("tr", {
    class: "clickable", "data-trace": t.trace_id, onclick: () => { location.hash = "#trace/" + t.trace_id; } },
    ...cells(el("code", { text: t.trace_id.slice(0, 12) }), t.root, when(t.start_ns / 1e9),
      fmt(t.duration_ms, 1), t.spans, t.errors, t.agents.join(", ")))));
}

async function loadTrace(traceId) {
  $("#trace-id").textContent = traceId;
  const response = await fetch(API + "/traces/" + encodeURIComponent(traceId), {
    headers: { Authorization: "Bearer " + state.token }, cache: "no-store" });
  const body = await response.json();
  if (!response.ok) {
    $("#trace-summary").textContent = "";
    $("#waterfall").replaceChildren(el("p", { class: "error", text: body.message || "not found" }));
    return;
  }
  const total = Math.max(body.duration_ms, 0.001);
  const pct = (ms) => (100 * ms / total).toFixed(3) + "%";
  $("#trace-summary").textContent = fmt(body.duration_ms, 1) + " ms · " + body.rows.length + " spans · " + body.errors + " errors";
  const rows = body.rows.map((s) => {
    const track = el("div", { class: "wf-track" });
    if (s.queued_ms > 0) {
      const q = el("div", { class: "wf-queued", title: "queued " + fmt(s.queued_ms, 2) + " ms" });
      q.style.left = pct(s.offset_ms - s.queued_ms); q.style.width = pct(s.queued_ms);
      track.append(q);
    }
    const bar = el("div", { class: "wf-bar " + s.kind + (s.status === "error" ? " error" : ""),
      title: s.name + ": " + fmt(s.duration_ms, 2) + " ms" });
    bar.style.left = pct(s.offset_ms); bar.style.width = pct(s.duration_ms);
    const label = el("div", { class: "wf-time", text: (s.queued_ms > 0 ? "queued " + fmt(s.queued_ms, 2) + " + " : "") + fmt(s.duration_ms, 2) + " ms" });
    label.style.left = "calc(" + pct(s.offset_ms + s.duration_ms) + " + 4px)";
    track.append(bar, label);
    for (const e of s.events) {
      const mark = el("div", { class: "wf-event", title: e.name + " " + JSON.stringify(e.attributes) });
      mark.style.left = pct(e.offset_ms); track.append(mark);
    }
    const who = [s.agent, s.host].filter(Boolean).join(" @ ");
    const name = el("div", { class: "wf-label", title: s.name + (s.status_message ? ": " + s.status_message : "") },
      el("span", { text: "\u00a0".repeat(2 * s.depth) + s.name }), " ", el("span", { class: "who", text: who }));
    const row = el("div", { class: "wf-row" + (s.status === "error" ? " error" : ""), "data-span": s.span_id,
      "data-agent": s.agent, "data-kind": s.kind }, name, track);
    const events = s.events.length ? el("div", { class: "wf-events" },
      ...s.events.map((e) => el("div", { text: "⚑ " + e.name + " at " + fmt(e.offset_ms, 2) + " ms " +
        Object.entries(e.attributes).map(([k, v]) => k.replace(/^reach\./, "") + "=" + v).join(" ") }))) : null;
    return el("div", {}, row, events);
  });
  $("#waterfall").replaceChildren(el("div", { class: "wf" }, ...rows));
}

function renderLetters() {
  const l = state.parts.letters;
  if (!l) return;
  $("#letters-total").textContent = "(" + l.total + " held, the newest " + l.recent.length + " shown)";
  fill($("#letters tbody"), l.recent.slice().reverse().map((d) => el("tr", {
    class: d.code === "poison" ? "letter-poison" : "", "data-code": d.code },
    ...cells(when(d.at), d.code + (d.kills ? " (killed " + d.kills + ")" : ""), d.msg_type,
      d.sender, d.receiver, d.reason, d.trace_id ? el("code", { text: d.trace_id.slice(0, 12) }) : ""))));
}

function traceLink(traceId) {
  return traceId ? el("a", { href: "#trace/" + traceId }, el("code", { text: traceId.slice(0, 12) })) : "";
}
function renderTasks() {
  const t = state.parts.tasks;
  if (!t) return;
  if (!t.available) {
    $("#tasks-total").textContent = "(this gateway keeps no A2A tasks)";
    fill($("#tasks tbody"), []);
    return;
  }
  $("#tasks-total").textContent = "(the " + t.recent.length + " most recently updated)";
  $("#tasks-states").textContent = Object.entries(t.states).map(([s, n]) => n + " " + s).join(" · ");
  fill($("#tasks tbody"), t.recent.map((k) => el("tr", { class: "task-" + k.state, "data-task": k.task_id },
    ...cells(k.updated === null ? "" : when(k.updated), k.state, k.owner, k.target,
      el("code", { text: k.task_id }), el("code", { text: k.context_id.slice(0, 12) }), traceLink(k.trace_id)))));
}

// -- sign-in and start --------------------------------------------------------------------
function showLogin(message) {
  $("#login").hidden = false;
  $("#logout").hidden = true;
  $("#login-error").textContent = message || "";
  for (const v of VIEWS) $("#view-" + v).hidden = true;
  setLive("off");
}
function start() {
  state.refused = false;
  $("#login").hidden = true;
  $("#logout").hidden = false;
  route();
  stream();
}
document.addEventListener("DOMContentLoaded", () => {
  takeToken();
  window.addEventListener("hashchange", route);
  $("#login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("#token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    state.token = token;
    $("#token").value = "";
    start();
  });
  $("#logout").addEventListener("click", () => { refused(""); });
  const reloadAgents = debounce(() => { state.agentsPage = 0; loadAgents(); }, 250);
  for (const id of ["#agent-capability", "#agent-q", "#agent-status"]) $(id).addEventListener("input", reloadAgents);
  $("#agent-filter").addEventListener("submit", (e) => e.preventDefault());
  $("#agents-prev").addEventListener("click", () => { if (state.agentsPage > 0) { state.agentsPage--; loadAgents(); } });
  $("#agents-next").addEventListener("click", () => {
    if ((state.agentsPage + 1) * state.agentsSize < state.agentsTotal) { state.agentsPage++; loadAgents(); } });
  const reloadTraces = debounce(loadTraces, 250);
  for (const id of ["#trace-agent", "#trace-capability", "#trace-errors", "#trace-slowest"]) $(id).addEventListener("input", reloadTraces);
  $("#trace-filter").addEventListener("submit", (e) => e.preventDefault());
  if (state.token) start(); else showLogin("");
});
