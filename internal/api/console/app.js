// Indexify web console: plain JavaScript over the API server's JSON routes.
// It polls; nothing here keeps state the API does not have.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ns: "", graph: "", graphs: [], index: "", parent: "", more: [], moreDone: false };

// The content table shows the first page (refreshed by polling), plus the
// pages "more" fetched with start_id; state.parent limits it to one
// content's children (?parent_id=).
const CONTENT_PAGE = 100;

// Task badges need the tasks of every content shown, wherever they fall in
// a policy's task list: each policy's tasks are read in pages of TASK_PAGE
// (the server's largest) with start_id, at most TASK_PAGES pages per poll.
// The task table lists the first TASK_ROWS of them.
const TASK_PAGE = 1000;
const TASK_PAGES = 20;
const TASK_ROWS = 100;

async function policyTasks(path) {
  let tasks = [];
  let total = 0;
  for (let i = 0; i < TASK_PAGES; i++) {
    const last = tasks.length ? "&start_id=" + encodeURIComponent(tasks[tasks.length - 1].id) : "";
    const page = await getJSON(`${path}?limit=${TASK_PAGE}${last}`);
    tasks = tasks.concat(page.tasks);
    total = page.total;
    if (page.tasks.length < TASK_PAGE) break;
  }
  return { tasks, total };
}

function resetContent(parent) {
  state.parent = parent || "";
  state.more = [];
  state.moreDone = false;
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

function rows(tbody, list, render, empty) {
  tbody.replaceChildren(...(list.length ? list.map(render) : [el("tr", {}, el("td", { colspan: "8", class: "muted" }, empty))]));
}

function ago(ms) {
  if (ms < 0) return "unknown";
  if (ms < 1000) return ms + " ms ago";
  return (ms / 1000).toFixed(1) + " s ago";
}

function since(unixSeconds) {
  if (!unixSeconds) return "never";
  return ago(Date.now() - unixSeconds * 1000);
}

function setStatus(ok, text) {
  const s = $("conn-status");
  s.textContent = text;
  s.className = "status" + (ok ? "" : " bad");
}

// health: the leader tracks every member, so a member it does not call
// healthy is unhealthy (a server it never reached since it was elected has
// no last contact). A follower knows only itself and the leader: the other
// members are "unknown" in its answer, not "unhealthy".
function health(m, answeredByLeader) {
  if (m.healthy) return el("td", { class: "ok" }, "healthy");
  if (!answeredByLeader && m.last_contact_ms < 0) return el("td", { class: "muted" }, "unknown");
  return el("td", { class: "bad" }, "unhealthy");
}

async function refreshCluster() {
  try {
    const c = await getJSON("/cluster");
    $("leader").textContent = c.leader_id || "none";
    $("term").textContent = "term " + c.term;
    $("cluster-id").textContent = c.cluster_id;
    $("answered-by").textContent = c.node_id + " (" + c.state + ")";
    $("commit-index").textContent = c.commit_index;
    $("applied-index").textContent = c.applied_index;
    rows($("cluster-members"), c.members, (m) => el("tr", { class: m.leader ? "leader" : "", "data-node": m.id },
      el("td", {}, m.id),
      el("td", {}, m.leader ? "leader" : "follower"),
      el("td", {}, m.voter ? "voter" : m.suffrage),
      el("td", {}, m.raft_addr),
      el("td", {}, m.grpc_addr),
      el("td", {}, ago(m.last_contact_ms)),
      health(m, c.state === "Leader")), "no members");
    setStatus(true, "updated " + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus(false, "cluster: " + e.message);
  }
}

async function refreshExecutors() {
  try {
    const { executors } = await getJSON("/executors");
    rows($("executor-rows"), executors, (x) => el("tr", {},
      el("td", {}, x.id), el("td", {}, x.address), el("td", {}, x.extractors.join(", ")),
      el("td", {}, x.max_pending_tasks), el("td", {}, since(x.last_seen))), "no executors registered");
  } catch (e) { /* shown by the cluster status line */ }
}

function fillSelect(sel, names, current) {
  const keep = names.includes(current) ? current : (names[0] || "");
  sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  sel.value = keep;
  return keep;
}

// drawGraph lays policies out in columns by depth: ingested content first,
// then every policy one column right of the policy it reads from.
function drawGraph(g) {
  const svg = $("graph-svg");
  const NS = "http://www.w3.org/2000/svg";
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  svg.replaceChildren();
  if (!g) return;
  const defs = mk("defs", {});
  const marker = mk("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "8", markerHeight: "8", orient: "auto" });
  marker.append(mk("path", { d: "M0,0 L10,5 L0,10 z", fill: "#4a6fd1" }));
  defs.append(marker);
  svg.append(defs);
  const byName = Object.fromEntries(g.extraction_policies.map((p) => [p.name, p]));
  const depth = {};
  const depthOf = (name, seen = new Set()) => {
    if (name === "" || !byName[name] || seen.has(name)) return 0;
    if (depth[name] !== undefined) return depth[name];
    seen.add(name);
    return (depth[name] = depthOf(byName[name].content_source, seen) + 1);
  };
  const columns = [["(ingested content)"]];
  for (const p of g.extraction_policies) {
    const d = depthOf(p.name);
    (columns[d] = columns[d] || []).push(p.name);
  }
  const W = 210, H = 44, GX = 60, GY = 18, pos = {};
  columns.forEach((col, x) => (col || []).forEach((name, y) => { pos[name] = { x: 10 + x * (W + GX), y: 10 + y * (H + GY) }; }));
  const height = Math.max(...columns.map((c) => (c || []).length)) * (H + GY) + 20;
  svg.setAttribute("height", String(height));
  for (const p of g.extraction_policies) {
    const from = pos[p.content_source && byName[p.content_source] ? p.content_source : "(ingested content)"];
    const to = pos[p.name];
    svg.append(mk("path", { class: "edge", d: `M${from.x + W},${from.y + H / 2} C${from.x + W + GX / 2},${from.y + H / 2} ${to.x - GX / 2},${to.y + H / 2} ${to.x},${to.y + H / 2}` }));
  }
  for (const [name, p] of Object.entries(pos)) {
    const pol = byName[name];
    const grp = mk("g", { class: "node" + (pol ? "" : " root"), "data-policy": name });
    grp.append(mk("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6 }));
    grp.append(mk("text", { x: p.x + 8, y: p.y + 18, "font-weight": "600" }, name));
    if (pol) grp.append(mk("text", { x: p.x + 8, y: p.y + 34, fill: "#5a6272" }, pol.extractor));
    svg.append(grp);
  }
}

// taskState names where a task is: the API's outcome "unknown" is
// "running" once an executor holds it and "pending" before.
function taskState(t) {
  if (t.outcome !== "unknown") return t.outcome;
  return t.executor_id ? "running" : "pending";
}

function stateClass(s) {
  return s === "success" ? "ok" : s === "failed" ? "bad" : "pending";
}

async function refreshNamespace() {
  try {
    const { namespaces } = await getJSON("/namespaces");
    state.ns = fillSelect($("ns-select"), namespaces.map((n) => n.name), state.ns);
    if (!state.ns) return;
    const ns = encodeURIComponent(state.ns);
    const { extraction_graphs } = await getJSON(`/namespaces/${ns}/extraction_graphs`);
    state.graphs = extraction_graphs;
    state.graph = fillSelect($("graph-select"), extraction_graphs.map((g) => g.name), state.graph);
    const g = extraction_graphs.find((x) => x.name === state.graph);
    $("graph-name").textContent = g ? g.name : "(none)";
    $("graph-description").textContent = g ? g.description : "";
    drawGraph(g);
    if (!g) {
      rows($("content-rows"), [], null, "no extraction graph");
      $("content-scope").textContent = "";
      $("content-more").hidden = true;
      rows($("task-rows"), [], null, "no extraction graph");
      $("task-scope").textContent = "";
      return;
    }
    const base = `/namespaces/${ns}/extraction_graphs/${encodeURIComponent(g.name)}`;
    const [{ content_list: first, total }, ...taskLists] = await Promise.all([
      getJSON(contentPath(base, "")),
      ...g.extraction_policies.map((p) => policyTasks(`${base}/extraction_policies/${encodeURIComponent(p.name)}/tasks`)),
    ]);
    const tasks = taskLists.flatMap((t) => t.tasks);
    const taskTotal = taskLists.reduce((n, t) => n + t.total, 0);
    const byContent = {};
    for (const t of tasks) (byContent[t.content_id] = byContent[t.content_id] || []).push(t);
    const seen = new Set(first.map((c) => c.id));
    const content_list = first.concat(state.more.filter((c) => !seen.has(c.id)));
    const contentURL = (c, what) => `/namespaces/${ns}/content/${encodeURIComponent(c.id)}/${what}`;
    rows($("content-rows"), content_list, (c) => el("tr", { "data-content": c.id },
      el("td", {}, el("a", { href: contentURL(c, "download"), target: "_blank", title: "open the bytes" }, el("code", {}, c.id))),
      el("td", {}, c.name || "—"), el("td", {}, c.source), el("td", {}, c.parent_id ? parentLink(c.parent_id) : "—"),
      el("td", {}, c.mime_type), el("td", {}, c.size),
      el("td", {}, ...(byContent[c.id] || []).map((t) => el("span", { class: stateClass(taskState(t)) }, `${t.extraction_policy_name}: ${taskState(t)} `))),
      el("td", {}, el("a", { href: contentURL(c, "metadata"), target: "_blank" }, "metadata"), " ", childrenButton(c.id))),
      state.parent ? "no children" : "no content");
    $("content-scope").replaceChildren(...(state.parent
      ? ["children of ", el("code", {}, state.parent), " · ", el("button", { type: "button", id: "content-all" }, "all content")]
      : []), ` ${content_list.length} of ${total} shown`);
    const all = $("content-all");
    if (all) all.addEventListener("click", () => { resetContent(""); refreshNamespace(); });
    $("content-more").hidden = state.moreDone || content_list.length >= total || first.length < CONTENT_PAGE;
    state.contentBase = base;
    state.contentLast = content_list.length ? content_list[content_list.length - 1].id : "";
    const shownTasks = tasks.slice(0, TASK_ROWS);
    $("task-scope").textContent = `${shownTasks.length} of ${taskTotal} shown` +
      (tasks.length < taskTotal ? ` · extraction states from the first ${tasks.length}` : "");
    rows($("task-rows"), shownTasks, (t) => el("tr", {},
      el("td", {}, el("code", {}, t.id)), el("td", {}, t.extraction_policy_name), el("td", {}, t.extractor),
      el("td", {}, el("code", {}, t.content_id)), el("td", { class: stateClass(taskState(t)) }, taskState(t)),
      el("td", {}, t.executor_id || "—"), el("td", {}, t.attempts), el("td", {}, t.last_error || "")), "no tasks");
  } catch (e) {
    setStatus(false, "namespace: " + e.message);
  }
}

function contentPath(base, startID) {
  let q = `limit=${CONTENT_PAGE}`;
  if (state.parent) q += "&parent_id=" + encodeURIComponent(state.parent);
  if (startID) q += "&start_id=" + encodeURIComponent(startID);
  return `${base}/content?${q}`;
}

function parentLink(id) {
  const b = el("button", { type: "button", class: "link", title: "show this content's children" }, el("code", {}, id));
  b.addEventListener("click", () => { resetContent(id); refreshNamespace(); });
  return b;
}

function childrenButton(id) {
  const b = el("button", { type: "button", class: "children" }, "children");
  b.addEventListener("click", () => { resetContent(id); refreshNamespace(); });
  return b;
}

$("content-more").addEventListener("click", async () => {
  if (!state.contentBase || !state.contentLast) return;
  try {
    const { content_list } = await getJSON(contentPath(state.contentBase, state.contentLast));
    state.more = state.more.concat(content_list);
    if (content_list.length < CONTENT_PAGE) state.moreDone = true;
    await refreshNamespace();
  } catch (e) {
    setStatus(false, "content: " + e.message);
  }
});

$("ns-select").addEventListener("change", (e) => { state.ns = e.target.value; state.graph = ""; resetContent(""); refreshNamespace(); });
$("graph-select").addEventListener("change", (e) => { state.graph = e.target.value; resetContent(""); refreshNamespace(); });

async function postJSON(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: { Accept: "application/json", "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error || path + ": HTTP " + r.status);
  return j;
}

// refreshRetrieval keeps the index picker and the table list current.
async function refreshRetrieval() {
  if (!state.ns) return;
  const ns = encodeURIComponent(state.ns);
  try {
    const { indexes } = await getJSON(`/namespaces/${ns}/indexes`);
    state.index = fillSelect($("index-select"), indexes.map((i) => i.name), state.index);
    const { schemas } = await getJSON(`/namespaces/${ns}/schemas`);
    $("sql-tables").textContent = schemas.length
      ? schemas.map((t) => t.extraction_graph_name + " (" + Object.keys(t.columns).sort().join(", ") + ")").join("; ")
      : "none yet";
  } catch (e) {
    setStatus(false, "retrieval: " + e.message);
  }
}

function labelText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => k + "=" + JSON.stringify(v)).join(", ");
}

$("index-select").addEventListener("change", (e) => { state.index = e.target.value; });
// A namespace change (handled above) also changes the indexes and tables:
// refresh them now rather than at the next poll, and drop the old answers.
$("ns-select").addEventListener("change", () => {
  state.index = "";
  for (const id of ["search-results", "sql-head", "sql-rows"]) $(id).replaceChildren();
  $("search-status").textContent = $("sql-status").textContent = "";
  refreshRetrieval();
});

$("search-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const ns = encodeURIComponent(state.ns);
  const name = $("index-select").value;
  const filter = $("search-filter").value.trim();
  if (!name) {
    $("search-status").textContent = "no index in this namespace: create an extraction graph with an embedding extractor";
    return;
  }
  $("search-status").textContent = "searching…";
  try {
    const { results } = await postJSON(`/namespaces/${ns}/indexes/${encodeURIComponent(name)}/search`, {
      query: $("search-query").value, k: Number($("search-k").value) || 5, filters: filter ? [filter] : [],
    });
    $("search-status").textContent = results.length + " result(s) from " + name;
    $("search-results").replaceChildren(...results.map((r) => el("li", { class: "hit" },
      el("div", {}, el("span", { class: "score" }, r.confidence_score.toFixed(3)), " ",
        el("a", { href: `/namespaces/${ns}/content/${encodeURIComponent(r.content_id)}/download`, target: "_blank" }, r.content_id),
        " ", el("span", { class: "muted hit-labels" }, labelText(r.labels))),
      el("p", { class: "hit-text" }, r.text))));
  } catch (e) {
    $("search-status").textContent = "search failed: " + e.message;
    $("search-results").replaceChildren();
  }
});

$("sql-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const ns = encodeURIComponent(state.ns);
  $("sql-status").textContent = "running…";
  try {
    const { rows: list } = await postJSON(`/namespaces/${ns}/sql_query`, { query: $("sql-query").value });
    const cols = [...new Set(list.flatMap((r) => Object.keys(r.data)))].sort();
    $("sql-head").replaceChildren(el("tr", {}, ...cols.map((c) => el("th", {}, c))));
    rows($("sql-rows"), list, (r) => el("tr", {}, ...cols.map((c) => {
      const v = r.data[c];
      return el("td", {}, v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : v);
    })), "no rows");
    $("sql-status").textContent = list.length + " row(s)";
  } catch (e) {
    $("sql-status").textContent = "query failed: " + e.message;
    $("sql-head").replaceChildren();
    $("sql-rows").replaceChildren();
  }
});

function loop(fn, ms) {
  const run = async () => { await fn(); setTimeout(run, ms); };
  run();
}
loop(refreshCluster, 1000);
loop(refreshExecutors, 3000);
loop(refreshNamespace, 3000);
loop(refreshRetrieval, 3000);
