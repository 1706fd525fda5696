// The live view of a statestream run: polls /api/v1/topology about once a second and
// draws the topology graph (SVG, layered left to right), the component table, input
// progress, the checkpoint strip, the workers and, on Spark, the batches' jobs. Hand-written, no build step, no
// library: everything the page needs is served by the run itself.
"use strict";

const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";
// A node is as wide as its longest line (at least NODE_MIN, at most NODE_MAX: a longer
// line is cut with an ellipsis, whole in the node's tooltip); GAP between columns
// holds an edge's label, its grouping above the line and its rate below.
const NODE_MIN = 150, NODE_MAX = 260, NODE_H = 78, GAP = 170, ROW_H = 104, PAD = 24, TEXT_X = 10;
const LINES = [["id", 18], ["", 35], ["count", 52], ["cap", 68]]; // class and baseline of each line

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

// The width ``text`` takes in the graph with CSS class ``cls``, measured by the browser
// in a hidden SVG (the fonts are the page's, so no guess of a character's width).
let measurer = null;
function textWidth(text, cls) {
  if (!measurer) {
    const svg = el("svg:svg", { class: "measure", "aria-hidden": "true" });
    const g = el("svg:g", { class: "node" });
    measurer = el("svg:text");
    g.appendChild(measurer);
    svg.appendChild(g);
    document.body.appendChild(svg);
  }
  measurer.setAttribute("class", cls || "");
  measurer.textContent = text;
  return measurer.getComputedTextLength();
}

// ``text`` cut with an ellipsis to fit ``width`` (as is when it fits).
function fit(text, cls, width) {
  if (textWidth(text, cls) <= width) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) { // the longest prefix that fits with the ellipsis
    const mid = Math.ceil((lo + hi) / 2);
    if (textWidth(text.slice(0, mid) + "…", cls) <= width) lo = mid; else hi = mid - 1;
  }
  return text.slice(0, lo) + "…";
}

// Node widths only grow during a run (the counts lengthen): the graph does not jitter.
const widths = {};

// The lines of a node: its id, class and tasks, what it did and its rate, its capacity.
function nodeLines(n, c, r) {
  const spout = n.kind === "spout";
  const done = spout ? c.emitted : c.executed;
  const perSec = spout ? r.emitted : r.executed;
  const rate = perSec !== null && perSec !== undefined ? ` · ${fmt(perSec)}/s` : "";
  const cap = spout ? "spout" : Number.isFinite(c.capacity) ? `capacity ${c.capacity.toFixed(2)}` : "capacity -";
  return [n.id, `${n.cls} ×${n.parallelism}`, `${fmt(done || 0)} ${spout ? "emitted" : "executed"}${rate}`, cap];
}

function drawGraph(graph, comps, rate) {
  const box = document.getElementById("graph");
  const byId = Object.fromEntries(comps.map((c) => [c.id, c]));
  const lines = {};
  for (const n of graph.nodes) {
    lines[n.id] = nodeLines(n, byId[n.id] || {}, rate[n.id] || {});
    const longest = Math.max(...lines[n.id].map((t, i) => textWidth(t, LINES[i][0])));
    widths[n.id] = Math.max(widths[n.id] || NODE_MIN, Math.min(NODE_MAX, Math.ceil(longest) + 2 * TEXT_X));
  }
  const columns = {};
  for (const n of graph.nodes) (columns[n.layer] = columns[n.layer] || []).push(n);
  const layers = Object.keys(columns).map(Number).sort((a, b) => a - b);
  const colW = {}, colX = {};
  let x = PAD, rows = 1;
  for (const layer of layers) {
    colX[layer] = x;
    colW[layer] = Math.max(...columns[layer].map((n) => widths[n.id]));
    x += colW[layer] + GAP;
    rows = Math.max(rows, columns[layer].length);
  }
  const pos = {};
  for (const layer of layers) columns[layer].forEach((n, i) => { pos[n.id] = { x: colX[layer], y: PAD + i * ROW_H, w: widths[n.id] }; });
  const width = Math.max(x - GAP + PAD, NODE_MIN + 2 * PAD), height = PAD * 2 + (rows - 1) * ROW_H + NODE_H + 20;
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
    const x1 = a.x + a.w, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const back = x2 <= x1;
    const mid = back ? Math.max(y1, y2) + NODE_H : (y1 + y2) / 2;
    const d = back
      ? `M ${x1} ${y1} C ${x1 + 60} ${mid}, ${x2 - 60} ${mid}, ${x2} ${y2}`
      : `M ${x1} ${y1} C ${(x1 + x2) / 2} ${y1}, ${(x1 + x2) / 2} ${y2}, ${x2} ${y2}`;
    const g = el("svg:g", { class: "edge", "data-source": e.source, "data-target": e.target });
    g.appendChild(el("svg:path", { d, "stroke-width": 1 + 5 * Math.sqrt(r / maxRate), "marker-end": "url(#arrow)" }));
    const stream = e.stream === "default" ? "" : `${e.stream}: `;
    const grouping = `${stream}${e.grouping}`;
    // The label sits in the gap of the edge's source column (a back edge: below it).
    const lx = back ? (x1 + x2) / 2 : x1 + GAP / 2, ly = back ? mid : y1, room = GAP - 16;
    g.appendChild(el("svg:title", {}, `${e.source} → ${e.target}: ${grouping}${r ? `, ${fmt(r)} tuples/s` : ""}`));
    g.appendChild(el("svg:text", { x: lx, y: ly - 6, "text-anchor": "middle" }, fit(grouping, "", room)));
    if (r) g.appendChild(el("svg:text", { x: lx, y: ly + 14, "text-anchor": "middle" }, fit(`${fmt(r)}/s`, "", room)));
    svg.appendChild(g);
  }
  for (const n of graph.nodes) {
    const p = pos[n.id], c = byId[n.id] || {};
    const kind = n.kind === "spout" ? "spout" : n.kind === "stateful bolt" ? "stateful" : "bolt";
    const g = el("svg:g", { class: `node ${kind}`, "data-id": n.id, transform: `translate(${p.x},${p.y})` });
    // The whole of every line is in the tooltip, whatever was cut to fit the box.
    g.appendChild(el("svg:title", {}, `${n.id}: ${n.kind} ${n.cls}, ${n.parallelism} task(s)\n${lines[n.id].slice(2).join("\n")}`));
    g.appendChild(el("svg:rect", { width: p.w, height: NODE_H, rx: kind === "spout" ? 22 : 4, fill: capacityColour(c.capacity) }));
    lines[n.id].forEach((t, i) => {
      const [cls, y] = LINES[i];
      g.appendChild(el("svg:text", { class: cls, x: TEXT_X, y }, fit(t, cls, p.w - 2 * TEXT_X)));
    });
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

// A byte count for people: 24,924 -> "24.9 kB".
function bytes(n) {
  const units = ["bytes", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return i ? `${n.toFixed(1)} ${units[i]}` : `${fmt(n)} bytes`;
}

function drawCheckpoints(list) {
  const box = document.getElementById("checkpoints");
  if (!list || !list.length) return;
  box.replaceChildren(...list.slice(-30).map((c) => {
    const outcome = String(c.phase || c.outcome || "committed").toLowerCase();
    const ms = c.duration === null || c.duration === undefined ? null : c.duration * 1000;
    const div = el("div", { class: `checkpoint ${outcome}`, "data-txid": c.txid });
    div.appendChild(el("b", {}, `#${c.txid}`));
    div.appendChild(el("div", {}, `${ms === null ? "-" : fmt(ms) + " ms"} · ${outcome}`));
    // The keys this checkpoint's commit changes (its prepared delta), summed over the
    // stateful tasks, and the bytes they sent the store; each task's in the tooltip.
    const sum = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
    const keys = c.keys_changed || {}, sizes = c.state_size || {};
    const tip = [`checkpoint ${c.txid}: ${outcome}${ms === null ? "" : ` in ${fmt(ms)} ms`}`];
    const parts = [];
    if (Object.keys(keys).length) {
      parts.push(`${fmt(sum(keys))} keys changed`);
      tip.push(`${fmt(sum(keys))} keys changed (written by its commit), per task:`);
    }
    if (Object.keys(sizes).length) {
      parts.push(bytes(sum(sizes)));
      tip.push(`${fmt(sum(sizes))} bytes sent to the store for them`);
    }
    for (const ns of Object.keys({ ...keys, ...sizes }).sort()) {
      const k = ns in keys ? `${fmt(keys[ns])} keys` : "", b = ns in sizes ? `${fmt(sizes[ns])} bytes` : "";
      tip.push(`  ${ns}: ${[k, b].filter(Boolean).join(", ")}`);
    }
    if (parts.length) div.appendChild(el("div", { class: "keys" }, parts.join(" · ")));
    div.title = tip.join("\n");
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
