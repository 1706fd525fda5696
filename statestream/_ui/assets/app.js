// The live view of a statestream run: polls /api/v1/topology about once a second and
// draws the topology graph (SVG, layered left to right), the component table, input
// progress, the checkpoint strip, the workers and, on Spark, the batches' jobs. Hand-written, no build step, no
// library: everything the page needs is served by the run itself.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 170, NODE_H = 64, COL_W = 320, ROW_H = 96, PAD = 24;

let previous = null; // the last snapshot, for rates: {elapsed, counts: {id: {emitted, executed}}}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function fmt(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "-";
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en-US") : n.toLocaleString("en-US", { maximumFractionDigits: 1 });
}

function duration(secs) {
  if (secs === null || secs === undefined || !Number.isFinite(secs)) return "-";
  secs = Math.max(0, Math.round(secs));
  const h = Math.floor(secs / 3600), m = Math.floor((secs % 3600) / 60), s = secs % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(s).padStart(2, "0")}s` : `${s}s`;
}

// Components as a list, whether the API gives a list or an object keyed by id.
function componentList(data) {
  const c = data.components || [];
  return Array.isArray(c) ? c : Object.entries(c).map(([id, m]) => Object.assign({ id }, m));
}

// Tuples per second per component since the last poll (null on the first one).
function rates(data, comps) {
  const out = {};
  const counts = {};
  for (const c of comps) {
    counts[c.id] = { emitted: c.emitted || 0, executed: c.executed || 0 };
    const before = previous && previous.counts[c.id];
    const dt = previous ? data.elapsed - previous.elapsed : 0;
    out[c.id] = before && dt > 0
      ? { emitted: (counts[c.id].emitted - before.emitted) / dt, executed: (counts[c.id].executed - before.executed) / dt }
      : { emitted: null, executed: null };
  }
  previous = { elapsed: data.elapsed, counts };
  return out;
}

// Capacity 0 (idle) .. 1 (saturated) as green .. yellow .. red; grey when unknown.
function capacityColour(cap) {
  if (cap === null || cap === undefined || !Number.isFinite(cap)) return "#dfe6f2";
  const x = Math.max(0, Math.min(1, cap));
  const hue = 130 - 130 * x;
  return `hsl(${hue}, 65%, 78%)`;
}

function drawGraph(graph, comps, rate) {
  const box = document.getElementById("graph");
  const byId = Object.fromEntries(comps.map((c) => [c.id, c]));
  const columns = {};
  for (const n of graph.nodes) (columns[n.layer] = columns[n.layer] || []).push(n);
  const pos = {};
  let rows = 1, cols = 1;
  for (const [layer, nodes] of Object.entries(columns)) {
    nodes.forEach((n, i) => { pos[n.id] = { x: PAD + Number(layer) * COL_W, y: PAD + i * ROW_H }; });
    rows = Math.max(rows, nodes.length);
    cols = Math.max(cols, Number(layer) + 1);
  }
  const width = PAD * 2 + (cols - 1) * COL_W + NODE_W, height = PAD * 2 + (rows - 1) * ROW_H + NODE_H;
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 10, markerHeight: 10, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
  marker.appendChild(el("svg:path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#7d879c" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const maxRate = Math.max(1, ...graph.edges.map((e) => (rate[e.source] && rate[e.source].emitted) || 0));
  for (const e of graph.edges) {
    const a = pos[e.source], b = pos[e.target];
    if (!a || !b) continue;
    const r = (rate[e.source] && rate[e.source].emitted) || 0;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const back = x2 <= x1;
    const mid = back ? Math.max(y1, y2) + NODE_H : (y1 + y2) / 2;
    const d = back
      ? `M ${x1} ${y1} C ${x1 + 60} ${mid}, ${x2 - 60} ${mid}, ${x2} ${y2}`
      : `M ${x1} ${y1} C ${(x1 + x2) / 2} ${y1}, ${(x1 + x2) / 2} ${y2}, ${x2} ${y2}`;
    const g = el("svg:g", { class: "edge", "data-source": e.source, "data-target": e.target });
    g.appendChild(el("svg:path", { d, "stroke-width": 1 + 5 * Math.sqrt(r / maxRate), "marker-end": "url(#arrow)" }));
    const stream = e.stream === "default" ? "" : `${e.stream}: `;
    const label = el("svg:text", { x: (x1 + x2) / 2, y: back ? mid - 4 : (y1 + y2) / 2 - 6, "text-anchor": "middle" });
    label.textContent = `${stream}${e.grouping}${r ? ` · ${fmt(r)}/s` : ""}`;
    g.appendChild(label);
    svg.appendChild(g);
  }
  for (const n of graph.nodes) {
    const p = pos[n.id], c = byId[n.id] || {};
    const kind = n.kind === "spout" ? "spout" : n.kind === "stateful bolt" ? "stateful" : "bolt";
    const g = el("svg:g", { class: `node ${kind}`, "data-id": n.id, transform: `translate(${p.x},${p.y})` });
    const title = el("svg:title", {}, `${n.id}: ${n.kind} ${n.cls}, ${n.parallelism} task(s)`);
    g.appendChild(title);
    g.appendChild(el("svg:rect", { width: NODE_W, height: NODE_H, rx: kind === "spout" ? 22 : 4, fill: capacityColour(c.capacity) }));
    g.appendChild(el("svg:text", { class: "id", x: 10, y: 18 }, n.id));
    g.appendChild(el("svg:text", { x: 10, y: 35 }, `${n.cls} ×${n.parallelism}`));
    const r = rate[n.id] || {};
    const done = kind === "spout" ? c.emitted : c.executed;
    const perSec = kind === "spout" ? r.emitted : r.executed;
    const cap = Number.isFinite(c.capacity) ? ` · cap ${c.capacity.toFixed(2)}` : "";
    g.appendChild(el("svg:text", { class: "count", x: 10, y: 53 }, `${fmt(done || 0)}${perSec !== null && perSec !== undefined ? ` · ${fmt(perSec)}/s` : ""}${cap}`));
    svg.appendChild(g);
  }
  box.replaceChildren(svg);
}

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows);
}

function componentRows(graph, comps, rate) {
  const tasks = Object.fromEntries(graph.nodes.map((n) => [n.id, n.parallelism]));
  return comps.map((c) => {
    const tr = el("tr", { "data-id": c.id });
    const r = rate[c.id] || {};
    // Seconds in the snapshot; a spout's is its complete latency (emit to the tree's ack).
    const secs = c.kind === "spout" ? c.complete_latency : c.execute_latency;
    const latency = secs === null || secs === undefined ? null : secs * 1000;
    const cells = [
      ["id", c.id], ["tasks", tasks[c.id] || c.parallelism], ["emitted", fmt(c.emitted)], ["executed", fmt(c.executed)],
      ["rate", fmt(r.executed !== null && r.executed !== undefined && c.executed ? r.executed : r.emitted)],
      ["acked", fmt(c.acked)], ["failed", fmt(c.failed)], ["capacity", Number.isFinite(c.capacity) ? c.capacity.toFixed(2) : "-"],
      ["latency", latency === null ? "-" : latency.toLocaleString("en-US", { maximumSignificantDigits: 3 })], ["queued", fmt(c.queued)], ["retrying", fmt(c.retrying)],
      ["dead", fmt(c.dead_lettered)], ["error", c.last_error || ""],
    ];
    for (const [cls, v] of cells) tr.appendChild(el("td", { class: cls }, v === undefined ? "-" : v));
    return tr;
  });
}

function drawProgress(list, data) {
  const box = document.getElementById("progress");
  if (!list || !list.length) return;
  box.replaceChildren(...list.map((p) => {
    const row = el("div", { class: "progress-row", "data-id": p.component || "" });
    row.appendChild(el("b", {}, p.component || "input"));
    if (list.length > 1) row.appendChild(el("span", {}, `task ${p.task_index}`));
    if (p.total) {
      const share = Math.max(0, Math.min(1, (p.done || 0) / p.total));
      const bar = el("div", { class: "bar" });
      const fill = el("div");
      fill.style.width = `${(share * 100).toFixed(1)}%`; // CSSOM: the CSP refuses style attributes
      bar.appendChild(fill);
      row.appendChild(document.createTextNode(" "));
      row.appendChild(bar);
      const eta = share > 0 && share < 1 && data.elapsed ? data.elapsed * (1 - share) / share : null;
      row.appendChild(el("span", {}, `${(share * 100).toFixed(1)}% of ${fmt(p.total)} ${p.unit || ""} · ETA ${share >= 1 ? "done" : duration(p.eta !== undefined ? p.eta : eta)}`));
    } else if (p.lag !== undefined) {
      row.appendChild(el("span", {}, `lag ${fmt(p.lag)} ${p.unit || "entries"}`));
    } else {
      row.appendChild(el("span", {}, `${fmt(p.done)} ${p.unit || ""} read`));
    }
    return row;
  }));
}

function drawCheckpoints(list) {
  const box = document.getElementById("checkpoints");
  if (!list || !list.length) return;
  box.replaceChildren(...list.slice(-30).map((c) => {
    const outcome = String(c.phase || c.outcome || "committed").toLowerCase();
    const ms = c.duration === null || c.duration === undefined ? null : c.duration * 1000;
    const div = el("div", { class: `checkpoint ${outcome}`, title: JSON.stringify(c) });
    div.appendChild(el("b", {}, `#${c.txid}`));
    div.appendChild(el("div", {}, `${ms === null ? "-" : fmt(ms) + " ms"} · ${outcome}`));
    // Keys changed (and state size, where the runtime knows it) summed over the
    // stateful tasks; each task's figure is in the title.
    const sum = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
    const changed = Object.keys(c.keys_changed || {}).length ? `${fmt(sum(c.keys_changed))} keys` : "";
    const size = Object.keys(c.state_size || {}).length ? `of ${fmt(sum(c.state_size))}` : "";
    if (changed || size) div.appendChild(el("div", { class: "keys" }, [changed, size].filter(Boolean).join(" ")));
    return div;
  }));
}

function workerRows(list) {
  document.getElementById("workers").hidden = !(list && list.length);
  return (list || []).map((w) => {
    const tr = el("tr", { "data-index": w.index });
    for (const v of [w.index, w.pid, (w.tasks || []).length, fmt(w.executed), fmt(w.rate), fmt(w.restarts)]) tr.appendChild(el("td", {}, v));
    return tr;
  });
}

// Spark: the last batches' jobs and stages (Spark's status tracker), newest first,
// and the run's totals; the section stays hidden on the other runtimes.
function drawSpark(list, totals) {
  document.getElementById("spark-section").hidden = !(list && list.length);
  if (!list || !list.length) return;
  const sum = (stages, key) => stages.reduce((a, s) => a + (s[key] || 0), 0);
  fillTable("spark", list.slice(-10).reverse().map((b) => {
    const stages = b.stages || [];
    const tr = el("tr", { "data-txid": b.txid, class: String(b.status || "").toLowerCase() });
    const cells = [
      ["txid", b.txid], ["jobs", (b.jobs || []).join(", ") || "-"], ["job-status", b.status],
      ["done", `${fmt(sum(stages, "completed"))}/${fmt(sum(stages, "tasks"))}`], ["failed", fmt(sum(stages, "failed"))],
      ["active", fmt(sum(stages, "active"))], ["seconds", b.duration === null || b.duration === undefined ? "-" : b.duration.toFixed(2)],
      ["stages", stages.map((s) => `${s.stage_id}: ${s.completed}/${s.tasks}${s.failed ? ` (${s.failed} failed)` : ""}`).join(" · ")],
    ];
    for (const [cls, v] of cells) tr.appendChild(el("td", { class: cls }, v));
    tr.lastChild.title = stages.map((s) => `${s.stage_id} ${s.name}`).join("\n");
    return tr;
  }));
  const box = document.getElementById("spark-totals");
  box.replaceChildren(...Object.entries(totals || {}).map(([k, v]) => {
    const span = el("span", {}, `${k.replace(/_/g, " ")} `);
    span.appendChild(el("b", {}, k === "job_seconds" ? v.toFixed(1) : fmt(v)));
    return span;
  }));
}

function drawCounters(counters) {
  const box = document.getElementById("counters");
  box.replaceChildren(...Object.entries(counters || {}).map(([k, v]) => {
    const span = el("span", {}, `${k} `);
    span.appendChild(el("b", {}, fmt(v)));
    return span;
  }));
}

// /api/v1/topology is {"graph": ..., "metrics": the run's snapshot}.
function render(body) {
  const data = Object.assign({ graph: body.graph }, body.metrics || body);
  const comps = componentList(data);
  const rate = rates(data, comps);
  const graph = data.graph || { nodes: [], edges: [] };
  document.getElementById("name").textContent = data.topology || "";
  document.title = `statestream · ${data.topology || ""}`;
  drawGraph(graph, comps, rate);
  fillTable("components", componentRows(graph, comps, rate));
  drawProgress(data.sources || data.progress, data);
  drawCheckpoints(data.checkpoints);
  fillTable("workers", workerRows(data.workers));
  drawSpark(data.spark, data.spark_totals);
  drawCounters(data.counters);
  const status = document.getElementById("status");
  status.className = "status";
  status.textContent = `running for ${duration(data.elapsed)} · updated ${new Date().toLocaleTimeString()}`;
}

async function poll() {
  try {
    const response = await fetch("/api/v1/topology", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (err) {
    const status = document.getElementById("status");
    status.className = "status lost";
    status.textContent = `no answer from the run (${err.message}); it may have ended`;
  }
  setTimeout(poll, POLL_MS);
}

poll();
