// Indexify web console: plain JavaScript over the API server's JSON routes.
// It polls; nothing here keeps state the API does not have.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ns: "", graph: "", graphs: [] };

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
      rows($("task-rows"), [], null, "no extraction graph");
      return;
    }
    const base = `/namespaces/${ns}/extraction_graphs/${encodeURIComponent(g.name)}`;
    const [{ content_list }, ...taskLists] = await Promise.all([
      getJSON(`${base}/content?limit=100`),
      ...g.extraction_policies.map((p) => getJSON(`${base}/extraction_policies/${encodeURIComponent(p.name)}/tasks?limit=100`)),
    ]);
    const tasks = taskLists.flatMap((t) => t.tasks);
    const byContent = {};
    for (const t of tasks) (byContent[t.content_id] = byContent[t.content_id] || []).push(t);
    rows($("content-rows"), content_list, (c) => el("tr", {},
      el("td", {}, el("code", {}, c.id)), el("td", {}, c.source), el("td", {}, c.parent_id || "—"),
      el("td", {}, c.mime_type), el("td", {}, c.size),
      el("td", {}, ...(byContent[c.id] || []).map((t) => el("span", { class: stateClass(taskState(t)) }, `${t.extraction_policy_name}: ${taskState(t)} `)))), "no content");
    rows($("task-rows"), tasks, (t) => el("tr", {},
      el("td", {}, el("code", {}, t.id)), el("td", {}, t.extraction_policy_name), el("td", {}, t.extractor),
      el("td", {}, el("code", {}, t.content_id)), el("td", { class: stateClass(taskState(t)) }, taskState(t)),
      el("td", {}, t.executor_id || "—"), el("td", {}, t.attempts), el("td", {}, t.last_error || "")), "no tasks");
  } catch (e) {
    setStatus(false, "namespace: " + e.message);
  }
}

$("ns-select").addEventListener("change", (e) => { state.ns = e.target.value; state.graph = ""; refreshNamespace(); });
$("graph-select").addEventListener("change", (e) => { state.graph = e.target.value; refreshNamespace(); });

function loop(fn, ms) {
  const run = async () => { await fn(); setTimeout(run, ms); };
  run();
}
loop(refreshCluster, 1000);
loop(refreshExecutors, 3000);
loop(refreshNamespace, 3000);
