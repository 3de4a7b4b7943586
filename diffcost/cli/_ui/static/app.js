// diffcost explorer: the page draws what the server's JSON API answers (diffcost/cli/_ui/answers.py);
// it computes nothing of its own beyond unit formatting and chart geometry.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const SVGNS = "http://www.w3.org/2000/svg";
const state = { meta: null, seq: { train: 0, serve: 0 }, timings: [], search: null };
window.diffcostTimings = state.timings; // read by the browser tests and the benchmark

// --- server ---------------------------------------------------------------------------------
async function api(method, path, body) {
  const init = { method, headers: { "Content-Type": "application/json" } };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const obj = await response.json();
  if (!response.ok) {
    const err = new Error(obj.message || response.statusText);
    err.payload = obj;
    throw err;
  }
  return obj;
}

// --- formatting -----------------------------------------------------------------------------
function fmtTime(s) {
  if (s === null || s === undefined) return "n/a";
  if (s >= 1) return s.toFixed(3) + " s";
  if (s >= 1e-3) return (s * 1e3).toFixed(3) + " ms";
  return (s * 1e6).toFixed(1) + " µs";
}
const fmtGB = (b) => (b / 1e9).toFixed(2) + " GB";
const fmtPct = (x) => (100 * x).toFixed(1) + "%";
function fmtNum(x, digits = 1) {
  if (x === null || x === undefined) return "n/a";
  return x.toLocaleString("en-US", { maximumFractionDigits: digits });
}
function fmtSI(x, unit) {
  const prefixes = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [v, p] of prefixes) if (Math.abs(x) >= v) return (x / v).toPrecision(3) + " " + p + unit;
  return x.toPrecision(3) + " " + unit;
}

// --- small DOM and SVG helpers ---------------------------------------------------------------
function el(tag, attrs = {}, parent = null, text = null) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVGNS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
const s = (tag, attrs, parent, text = null) => el("svg:" + tag, attrs, parent, text);
function svgIn(container, width, height) {
  container.replaceChildren();
  return s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" }, container);
}
const COLORS = ["#2f6fdb", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#d4ac0d", "#7f8c8d", "#2c3e50", "#f39c12", "#1abc9c"];

// Horizontal bars: rows [{label, value, text}], all >= 0.
function hbars(container, rows) {
  const width = 720, rowH = 20, left = 250, right = 110;
  const shown = rows.filter((r) => r.value > 0);
  const height = Math.max(1, shown.length) * rowH + 10;
  const svg = svgIn(container, width, height);
  const max = Math.max(...shown.map((r) => r.value), 1e-30);
  shown.forEach((r, i) => {
    const y = 5 + i * rowH;
    s("text", { x: left - 6, y: y + 14, "text-anchor": "end" }, svg, r.label);
    const w = ((width - left - right) * r.value) / max;
    s("rect", { x: left, y: y + 3, width: Math.max(w, 1), height: rowH - 6, fill: COLORS[i % COLORS.length] }, svg);
    s("text", { x: left + w + 6, y: y + 14 }, svg, r.text);
  });
}

// One stacked bar of memory segments against a capacity line.
function memoryStack(container, segments, capacity, testid) {
  const width = 720, height = 92, left = 10, right = 10;
  const svg = svgIn(container, width, height);
  const total = segments.reduce((a, g) => a + Math.max(g.value, 0), 0);
  const scale = (width - left - right) / Math.max(total, capacity, 1);
  let x = left;
  segments.forEach((g, i) => {
    const w = Math.max(g.value, 0) * scale;
    s("rect", { x, y: 10, width: w, height: 28, fill: COLORS[i % COLORS.length] }, svg);
    if (w > 0) {
      s("rect", { x: left + (i % 4) * 178, y: 52 + Math.floor(i / 4) * 18, width: 10, height: 10, fill: COLORS[i % COLORS.length] }, svg);
      s("text", { x: left + (i % 4) * 178 + 14, y: 61 + Math.floor(i / 4) * 18 }, svg, `${g.label} ${fmtGB(g.value)}`);
    }
    x += w;
  });
  const cx = left + capacity * scale;
  s("line", { x1: cx, x2: cx, y1: 4, y2: 44, stroke: total > capacity ? "#c0392b" : "#1d2430", "stroke-width": 2, "stroke-dasharray": "4 2" }, svg);
  const over = total > capacity ? `: ${fmtGB(total - capacity)} over` : "";
  s("text", { x: cx - 4, y: 8, "text-anchor": "end", "data-testid": testid }, svg, `capacity ${fmtGB(capacity)}, used ${fmtGB(total)}${over}`);
}

// Tornado: rows [{label, value}] around zero, largest first.
function tornadoChart(container, rows) {
  const width = 720, rowH = 18, left = 300, mid = 300 + (720 - 300) / 2;
  const height = Math.max(1, rows.length) * rowH + 24;
  const svg = svgIn(container, width, height);
  const max = Math.max(...rows.map((r) => Math.abs(r.value)), 1e-9);
  const half = (width - left - 110) / 2;
  rows.forEach((r, i) => {
    const y = 4 + i * rowH;
    s("text", { x: left - 8, y: y + 13, "text-anchor": "end" }, svg, r.label);
    const w = (half * Math.abs(r.value)) / max;
    const x = r.value >= 0 ? mid : mid - w;
    s("rect", { x, y: y + 2, width: Math.max(w, 1), height: rowH - 5, fill: r.plan ? "#e67e22" : r.value >= 0 ? "#c0392b" : "#2f6fdb" }, svg);
    s("text", { x: r.value >= 0 ? mid + w + 4 : mid - w - 4, y: y + 13, "text-anchor": r.value >= 0 ? "start" : "end" }, svg, (r.value >= 0 ? "+" : "") + r.value.toFixed(3));
  });
  s("line", { x1: mid, x2: mid, y1: 0, y2: height - 18, stroke: "#1d2430" }, svg);
  s("text", { x: mid, y: height - 4, "text-anchor": "middle" }, svg, "orange: plan inputs; red: raises the time; blue: lowers it");
}

// Log-log axes helper: returns {x(v), y(v)} and draws decades.
function logAxes(svg, box, xr, yr, xlabel, ylabel) {
  const [x0, x1] = xr.map(Math.log10), [y0, y1] = yr.map(Math.log10);
  const X = (v) => box.left + ((Math.log10(v) - x0) / (x1 - x0)) * (box.right - box.left);
  const Y = (v) => box.bottom - ((Math.log10(v) - y0) / (y1 - y0)) * (box.bottom - box.top);
  s("rect", { x: box.left, y: box.top, width: box.right - box.left, height: box.bottom - box.top, fill: "none", stroke: "#d8dde5" }, svg);
  for (let d = Math.ceil(x0); d <= Math.floor(x1); d++) {
    s("line", { x1: X(10 ** d), x2: X(10 ** d), y1: box.top, y2: box.bottom, stroke: "#eef0f3" }, svg);
    s("text", { x: X(10 ** d), y: box.bottom + 14, "text-anchor": "middle" }, svg, "1e" + d);
  }
  for (let d = Math.ceil(y0); d <= Math.floor(y1); d++) {
    s("line", { x1: box.left, x2: box.right, y1: Y(10 ** d), y2: Y(10 ** d), stroke: "#eef0f3" }, svg);
    s("text", { x: box.left - 4, y: Y(10 ** d) + 4, "text-anchor": "end" }, svg, "1e" + d);
  }
  s("text", { x: (box.left + box.right) / 2, y: box.bottom + 30, "text-anchor": "middle" }, svg, xlabel);
  s("text", { x: 14, y: (box.top + box.bottom) / 2, transform: `rotate(-90 14 ${(box.top + box.bottom) / 2})`, "text-anchor": "middle" }, svg, ylabel);
  return { X, Y };
}

function rooflineChart(container, rf) {
  const width = 720, height = 330;
  const svg = svgIn(container, width, height);
  const box = { left: 70, right: width - 20, top: 14, bottom: height - 44 };
  const ridge = rf.ridge_flop_per_byte;
  const xs = [ridge, ...rf.points.map((p) => p.intensity)];
  const xr = [Math.min(...xs) / 30, Math.max(...xs) * 30];
  const yr = [rf.memory_bandwidth_bytes_per_s * xr[0] * 0.5, rf.peak_flop_per_s * 3];
  const { X, Y } = logAxes(svg, box, xr, yr, "arithmetic intensity, FLOP / byte", "FLOP/s per chip");
  const roof = (i) => Math.min(rf.peak_flop_per_s, rf.memory_bandwidth_bytes_per_s * i);
  const pts = [xr[0], ridge, xr[1]].map((i) => `${X(i)},${Y(roof(i))}`).join(" ");
  s("polyline", { points: pts, fill: "none", stroke: "#1d2430", "stroke-width": 2 }, svg);
  s("text", { x: X(ridge) + 6, y: Y(rf.peak_flop_per_s) - 5 }, svg, `peak ${fmtSI(rf.peak_flop_per_s, "FLOP/s")} (${rf.format}); ridge ${ridge.toFixed(0)} FLOP/B`);
  rf.points.forEach((p, i) => {
    const cx = X(p.intensity), cy = Y(p.attained_flop_per_s);
    s("circle", { cx, cy, r: 6, fill: COLORS[i], "data-testid": "roofline-" + p.name }, svg);
    s("text", { x: cx + 9, y: cy + 4 }, svg, `${p.name}: ${p.intensity.toFixed(1)} FLOP/B, ${fmtSI(p.attained_flop_per_s, "FLOP/s")}`);
  });
}

function scatterChart(container, points) {
  const width = 720, height = 330;
  const svg = svgIn(container, width, height);
  const box = { left: 70, right: width - 20, top: 14, bottom: height - 44 };
  const run = points.filter((p) => p.runs && p.tokens_per_s_per_user > 0 && p.tokens_per_s_per_chip > 0);
  if (!run.length) { s("text", { x: 20, y: 30 }, svg, "no running point"); return; }
  const u = run.map((p) => p.tokens_per_s_per_user), c = run.map((p) => p.tokens_per_s_per_chip);
  const { X, Y } = logAxes(svg, box, [Math.min(...u) / 1.5, Math.max(...u) * 1.5], [Math.min(...c) / 1.5, Math.max(...c) * 1.5],
    "output tokens / s per user", "output tokens / s per chip");
  const front = run.filter((p) => p.front).sort((a, b) => a.tokens_per_s_per_user - b.tokens_per_s_per_user);
  s("polyline", { points: front.map((p) => `${X(p.tokens_per_s_per_user)},${Y(p.tokens_per_s_per_chip)}`).join(" "), fill: "none", stroke: "#2f6fdb" }, svg);
  run.forEach((p) => {
    const t = s("circle", { cx: X(p.tokens_per_s_per_user), cy: Y(p.tokens_per_s_per_chip), r: 4, fill: p.front ? "#2f6fdb" : "white", stroke: "#2f6fdb" }, svg);
    s("title", {}, t, `tp ${p.plan.tp} pp ${p.plan.pp} ${p.plan.weight_format} batch ${p.plan.batch}`);
  });
}

function groupedBars(container, rows, series) {
  const width = 720, rowH = 16 * series.length + 10, left = 180;
  const height = rows.length * rowH + 40;
  const svg = svgIn(container, width, height);
  const max = Math.max(...rows.flatMap((r) => series.map((k) => Math.abs(r[k.key]))), 1e-9);
  const mid = left + (width - left) / 2, half = (width - left - 80) / 2;
  rows.forEach((r, i) => {
    const y0 = 4 + i * rowH;
    s("text", { x: left - 8, y: y0 + rowH / 2 + 2, "text-anchor": "end" }, svg, r.group);
    series.forEach((k, j) => {
      const v = r[k.key], w = (half * Math.abs(v)) / max, y = y0 + j * 16;
      s("rect", { x: v >= 0 ? mid : mid - w, y, width: Math.max(w, 1), height: 13, fill: COLORS[j] }, svg);
      s("text", { x: v >= 0 ? mid + w + 4 : mid - w - 4, y: y + 11, "text-anchor": v >= 0 ? "start" : "end" }, svg, v.toFixed(2));
    });
  });
  s("line", { x1: mid, x2: mid, y1: 0, y2: rows.length * rowH, stroke: "#1d2430" }, svg);
  series.forEach((k, j) => {
    s("rect", { x: left + j * 180, y: height - 20, width: 10, height: 10, fill: COLORS[j] }, svg);
    s("text", { x: left + j * 180 + 14, y: height - 11 }, svg, k.label);
  });
}

// --- cards and errors -------------------------------------------------------------------------
function card(parent, id, label, value, text, band = "", bad = false) {
  const c = el("div", { class: "card" + (bad ? " bad" : ""), "data-testid": id, "data-value": value }, parent);
  el("div", { class: "label" }, c, label);
  el("div", { class: "value" }, c, text);
  if (band) el("div", { class: "band" }, c, band);
  return c;
}
function band(answer, key, fmt) {
  const lo = answer[key + "_p10"], hi = answer[key + "_p90"];
  return lo !== undefined && hi !== undefined && lo !== hi ? `p10–p90 ${fmt(lo)} – ${fmt(hi)}` : "";
}
function showError(tab, err) {
  const box = $(`[data-testid=${tab}-errors]`);
  box.textContent = err ? (err.payload && err.payload.message) || String(err) : "";
}
function notes(tab, lines, problems = []) {
  const ul = $(`[data-testid=${tab}-notes]`);
  ul.replaceChildren();
  for (const p of problems) el("li", { class: "warn" }, ul, "infeasible: " + p);
  for (const line of lines) el("li", { class: /IMPLAUSIBLE|outside|extrapolat/.test(line) ? "warn" : "" }, ul, line);
}

// --- controls ---------------------------------------------------------------------------------
const AUTO = { dp: "auto: fills the chips", replicas: "auto: fills the chips" };
const MAX_EXP = { seq_len: 20, global_batch: 16, input_len: 20, output_len: 16, batch: 12, prefill_chunk: 16 };

function buildKnobs(kind) {
  const box = $(`#${kind}-controls .knobs`);
  for (const k of state.meta.knobs[kind]) {
    const label = el("label", { title: k.doc }, box);
    el("span", {}, label, `${k.name.replaceAll("_", " ")}${k.unit ? ", " + k.unit : ""}`);
    const row = el("div", { class: "knob" }, label);
    if (k.kind === "categorical") {
      const sel = el("select", { name: k.name, "data-knob": k.name, "data-testid": `${kind}-${k.name}` }, row);
      for (const o of k.options) el("option", { value: o }, sel, String(o));
    } else if (k.kind === "bool") {
      el("input", { type: "checkbox", name: k.name, "data-knob": k.name, "data-testid": `${kind}-${k.name}` }, row);
    } else {
      const maxExp = MAX_EXP[k.name] || 9;
      const range = el("input", { type: "range", min: 0, max: maxExp, step: 1, "data-range": k.name, "aria-label": k.name + " (powers of two)" }, row);
      const num = el("input", { type: "number", name: k.name, min: k.kind === "count" ? k.minimum : 1, step: 1, "data-knob": k.name, "data-testid": `${kind}-${k.name}`, placeholder: AUTO[k.name] ? "auto" : "" }, row);
      if (AUTO[k.name]) num.title = AUTO[k.name];
      range.addEventListener("input", () => { num.value = 2 ** Number(range.value); num.dispatchEvent(new Event("input", { bubbles: true })); });
      num.addEventListener("input", () => { const v = Number(num.value); range.value = v > 0 ? Math.round(Math.log2(v)) : 0; });
      range.value = 0;
    }
  }
}

function fillSelect(sel, items, value) {
  sel.replaceChildren();
  for (const it of items) el("option", { value: it.name }, sel, `${it.display_name} (${it.name})`);
  if (value) sel.value = value;
}

function setDefaults(kind) {
  const d = state.meta.defaults[kind], form = $(`#${kind}-controls`);
  fillSelect(form.elements.model, state.meta.models, d.model);
  fillSelect(form.elements.system, state.meta.systems, d.system);
  form.elements.chips.value = d.chips;
  for (const [name, value] of Object.entries(d.plan)) {
    const input = form.querySelector(`[data-knob=${name}]`);
    if (!input || AUTO[name]) continue;
    if (input.type === "checkbox") input.checked = !!value; else input.value = value;
    input.dispatchEvent(new Event("input"));
  }
}

function readRequest(kind) {
  const form = $(`#${kind}-controls`);
  const plan = {};
  for (const input of $$("[data-knob]", form)) {
    if (input.type === "checkbox") { plan[input.name] = input.checked; continue; }
    if (input.value === "") continue;
    plan[input.name] = input.type === "number" ? Number(input.value) : (/^\d+$/.test(input.value) ? Number(input.value) : input.value);
  }
  const req = { model: form.elements.model.value, system: form.elements.system.value, plan };
  if (form.elements.chips.value !== "") req.chips = Number(form.elements.chips.value);
  if (kind === "serve") {
    for (const key of ["qps", "ttft_slo_ms", "tpot_slo_ms", "ttft_p99_ms", "tpot_p99_ms"]) {
      const v = form.elements[key].value;
      if (v !== "") req[key] = Number(v);
    }
  }
  return req;
}

// --- the two prediction tabs --------------------------------------------------------------------
let timers = {};
function schedule(kind) {
  clearTimeout(timers[kind]);
  timers[kind] = setTimeout(() => run(kind), 30);
}

async function run(kind) {
  const id = ++state.seq[kind];
  const t0 = performance.now();
  $("#status").textContent = "computing…";
  const request = readRequest(kind);
  try {
    const res = await api("POST", `/api/${kind}`, request);
    if (id !== state.seq[kind]) return; // a newer change is on its way
    showError(kind, null);
    (kind === "train" ? renderTrain : renderServe)(res);
    document.body.dataset[kind + "Model"] = request.model; // which model the drawn answer is for
    const ms = performance.now() - t0;
    state.timings.push({ kind, ms, server_ms: 1e3 * res.server_s });
    $("#status").textContent = `answered in ${ms.toFixed(0)} ms (model ${(1e3 * res.server_s).toFixed(0)} ms)`;
    document.body.dataset[kind + "Ready"] = String(id);
  } catch (err) {
    if (id !== state.seq[kind]) return;
    showError(kind, err);
    $("#status").textContent = "input problem: see the message";
    document.body.dataset[kind + "Ready"] = String(id);
  }
}

function elasticityRows(el_) {
  const rows = el_.hardware.map((r) => ({ label: r.parameter, value: r.elasticity }));
  for (const r of el_.plan) rows.push({ label: r.parameter, value: r.elasticity, plan: true });
  rows.sort((a, b) => Math.abs(b.value) - Math.abs(a.value));
  return rows;
}

function renderTrain(res) {
  const a = res.answer, cards = $("#train-cards");
  cards.replaceChildren();
  const chips = a.chips;
  card(cards, "train-step_time_s", "step time", a.step_time_s, fmtTime(a.step_time_s), band(a, "step_time_s", fmtTime));
  card(cards, "train-tokens_per_s", "tokens / s", a.tokens_per_s, fmtNum(a.tokens_per_s, 0), band(a, "tokens_per_s", (v) => fmtNum(v, 0)));
  card(cards, "train-tokens_per_s_per_chip", "tokens / s / chip", a.tokens_per_s / chips, fmtNum(a.tokens_per_s / chips));
  const mfuNote = a.coverage && a.coverage.mfu;
  card(cards, "train-mfu", "MFU", a.mfu, fmtPct(a.mfu), band(a, "mfu", fmtPct), !!(mfuNote && mfuNote.above_best_published));
  card(cards, "train-hfu", "HFU (with recompute)", a.hfu, fmtPct(a.hfu));
  card(cards, "train-memory", "memory / chip", a.memory_bytes.total_bytes, `${fmtGB(a.memory_bytes.total_bytes)} / ${fmtGB(a.capacity_bytes)}`, "", !a.fits);
  card(cards, "train-feasible", "plan", a.feasible ? 1 : 0, a.feasible ? "feasible" : "infeasible", a.problems.join("; "), !a.feasible);
  hbars($("#train-breakdown"), [
    ["compute (fwd+bwd)", a.compute_time_s], ["recompute", a.recompute_time_s], ["tensor-parallel comm", a.tp_comm_time_s],
    ["context-parallel comm (exposed)", a.cp_comm_time_s], ["expert-parallel all-to-all", a.ep_comm_time_s],
    ["pipeline bubble", a.pp_bubble_time_s], ["pipeline p2p", a.pp_p2p_time_s], ["data-parallel comm (exposed)", a.dp_comm_time_s],
    ["optimizer update", a.optimizer_time_s], ["jitter (wait for last rank)", a.jitter_time_s],
  ].map(([label, v]) => ({ label, value: v, text: fmtTime(v) })));
  const m = a.memory_bytes;
  memoryStack($("#train-memory"), [
    { label: "weights", value: m.weights_bytes }, { label: "gradients", value: m.gradients_bytes },
    { label: "optimizer", value: m.optimizer_bytes }, { label: "activations", value: m.activations_bytes },
    { label: "reserve", value: m.reserved_bytes },
  ], a.capacity_bytes, "train-capacity");
  tornadoChart($("#train-tornado"), elasticityRows(res.elasticities));
  notes("train", res.notes, a.problems);
}

function renderServe(res) {
  const a = res.answer, cards = $("#serve-cards");
  cards.replaceChildren();
  card(cards, "serve-ttft_s", "time to first token", a.ttft_s, fmtTime(a.ttft_s), band(a, "ttft_s", fmtTime));
  card(cards, "serve-tpot_s", "time per output token", a.tpot_s, fmtTime(a.tpot_s), band(a, "tpot_s", fmtTime));
  card(cards, "serve-output_tokens_per_s_per_chip", "output tokens / s / chip", a.output_tokens_per_s_per_chip, fmtNum(a.output_tokens_per_s_per_chip), band(a, "output_tokens_per_s_per_chip", (v) => fmtNum(v)));
  card(cards, "serve-output_tokens_per_s_per_user", "output tokens / s / user", a.output_tokens_per_s_per_user, fmtNum(a.output_tokens_per_s_per_user));
  card(cards, "serve-max_batch", "largest batch that fits", a.max_batch, fmtNum(Math.max(a.max_batch, 0), 0));
  card(cards, "serve-latency_floor", "latency floor per token (weights / bandwidth)", a.decode_weight_read_s, fmtTime(a.decode_weight_read_s));
  card(cards, "serve-feasible", "request", a.feasible ? 1 : 0, a.feasible ? "feasible" : "infeasible", a.problems.join("; "), !a.feasible);
  if (a.slo) card(cards, "serve-slo", "best batch within the limits", a.slo.batch, a.slo.feasible ? `batch ${a.slo.batch}: ${fmtNum(a.slo.output_tokens_per_s_per_chip)} tok/s/chip` : "none meets them", "", !a.slo.feasible);
  rooflineChart($("#serve-roofline"), res.roofline);
  hbars($("#serve-breakdown"), [
    ["GEMMs", a.decode_gemm_s], ["attention", a.decode_attention_s], ["memory-bound kernels", a.decode_memory_s],
    ["kernel launches", a.decode_launch_s], ["tensor-parallel all-reduce", a.decode_tp_comm_s],
    ["pipeline hand-offs + waits", a.decode_pp_comm_s + a.decode_pipeline_wait_s], ["draft passes", a.decode_draft_s],
  ].map(([label, v]) => ({ label, value: v, text: fmtTime(v) })));
  const m = a.memory_bytes;
  memoryStack($("#serve-memory"), [
    { label: "weights", value: m.weights_bytes }, { label: "KV cache", value: m.kv_cache_bytes - m.kv_block_waste_bytes },
    { label: "KV block waste", value: m.kv_block_waste_bytes }, { label: "activations", value: m.activations_bytes },
    { label: "reserve", value: m.reserved_bytes },
  ], a.capacity_bytes, "serve-capacity");
  renderLoad(a.load);
  tornadoChart($("#serve-tornado"), elasticityRows(res.elasticities));
  notes("serve", res.notes, a.problems);
}

function renderLoad(load) {
  const box = $("#serve-load");
  box.replaceChildren();
  if (!load) { el("p", { class: "hint" }, box, "Give an arrival rate to predict the latency percentiles and goodput under load."); return; }
  const t = el("table", { class: "data" }, box);
  const rows = [
    ["arrival rate", fmtNum(load.qps, 2) + " requests/s", load.qps],
    ["stable (queue drains)", load.stable ? "yes" : "no: beyond saturation", load.stable ? 1 : 0],
    ["utilisation", load.utilisation !== null ? fmtPct(load.utilisation) : "n/a", load.utilisation],
    ["TTFT p50 / p90 / p99", [load.ttft_p50_s, load.ttft_p90_s, load.ttft_p99_s].map(fmtTime).join(" / "), load.ttft_p99_s],
    ["TPOT mean / p90 / p99", [load.tpot_s, load.tpot_p90_s, load.tpot_p99_s].map(fmtTime).join(" / "), load.tpot_p99_s],
    ["largest stable rate", load.max_stable_qps !== undefined && load.max_stable_qps !== null ? fmtNum(load.max_stable_qps, 2) + " requests/s" : "n/a", load.max_stable_qps],
  ];
  if ("goodput_qps" in load) rows.push(["goodput at the p99 limits", fmtNum(load.goodput_qps, 2) + " requests/s", load.goodput_qps]);
  for (const [k, v, raw] of rows) {
    const tr = el("tr", { "data-testid": "load-" + k.split(" ")[0], "data-value": raw }, t);
    el("td", {}, tr, k); el("td", {}, tr, v);
  }
}

// --- uploads ------------------------------------------------------------------------------------
async function upload(kind, input) {
  const file = input.files[0];
  if (!file) return;
  try {
    const res = await api("POST", "/api/upload", { filename: file.name, text: await file.text() });
    state.meta.models.push({ name: res.model, display_name: res.display_name });
    for (const tab of ["train", "serve", "search"]) {
      const sel = $(`#${tab}-controls`).elements.model, keep = sel.value;
      fillSelect(sel, state.meta.models, tab === kind ? res.model : keep);
    }
    showError(kind, null);
    schedule(kind);
  } catch (err) {
    showError(kind, err);
    document.body.dataset[kind + "Ready"] = "upload-error";
  }
  input.value = "";
}

// --- search ---------------------------------------------------------------------------------
// How each objective of `diffcost plan` reads (its --json name -> heading, formatter), as the
// command line prints it (diffcost/cli/_plan_cmd.py: _UNITS, _SERVE_UNITS).
const OBJECTIVES = {
  step_time_s: ["step time", fmtTime],
  step_time_s_p90: ["p90 step time", fmtTime],
  cost_usd_per_token: ["$ / Mtok", (v) => "$" + (v * 1e6).toFixed(3)],
  energy_j_per_token: ["J / token", (v) => v.toFixed(3)],
  chip_s_per_output_token: ["tokens / s / chip", (v) => fmtNum(1 / v, 0)],
  request_latency_s: ["request latency", fmtTime],
  usd_per_million_tokens: ["$ / Mtok", (v) => "$" + v.toFixed(3)],
  tpot_s_p90: ["p90 TPOT", fmtTime],
  tpot_s: ["TPOT", fmtTime],
  chips_per_goodput_qps: ["requests / s / chip", (v) => (1 / v).toFixed(3)],
};
function searchRequest() {
  const f = $("#search-controls").elements, kind = f.kind.value;
  const req = { model: f.model.value, system: f.system.value, chips: Number(f.chips.value) };
  const fields = kind === "train" ? ["global_batch", "seq_len"] : ["input_len", "output_len", "ttft_slo_ms", "tpot_slo_ms"];
  for (const k of fields) if (f[k].value !== "") req[k] = Number(f[k].value);
  req.objective = f["objective_" + kind].value;
  return { kind, req };
}

async function startSearch() {
  const { kind, req } = searchRequest();
  showError("search", null);
  $("#search-result").replaceChildren();
  $("#search-pareto-panel").hidden = true;
  try {
    const job = await api("POST", `/api/search/${kind}`, req);
    state.search = { id: job.id, kind, req };
    $("#search-cancel").disabled = false;
    $("#search-run").disabled = true;
    $("[data-testid=search-progress]").classList.add("running");
    pollSearch();
  } catch (err) { showError("search", err); }
}

async function pollSearch() {
  if (!state.search) return;
  const job = await api("GET", `/api/search/${state.search.id}`);
  $("[data-testid=search-progress] span").textContent = `${job.state}: ${job.elapsed_s.toFixed(1)} s — ${job.command}`;
  if (job.state === "running") { setTimeout(pollSearch, 400); return; }
  $("[data-testid=search-progress]").classList.remove("running");
  $("#search-cancel").disabled = true;
  $("#search-run").disabled = false;
  document.body.dataset.searchState = job.state;
  if (job.state === "done") renderSearch(job.result, state.search);
  else if (job.state === "failed") showError("search", { payload: { message: job.error } });
  else $("#search-result").textContent = `search cancelled after ${job.elapsed_s.toFixed(1)} s`;
}

async function cancelSearch() {
  if (state.search) await api("POST", `/api/search/${state.search.id}/cancel`);
}

function renderSearch(r, search) {
  const box = $("#search-result");
  box.replaceChildren();
  el("p", {}, box, `${r.method}: ${fmtNum(r.evaluated, 0)} exact evaluations, ${fmtNum(r.feasible_count, 0)} feasible, ${r.search_wall_s.toFixed(2)} s. Binding: ${r.binding}`);
  if (!r.feasible) {
    el("p", { class: "infeasible" }, box, "no feasible plan");
    for (const sug of r.suggestions) el("p", {}, box, sug);
    return;
  }
  const plans = [r.best_plan, ...r.alternatives.map((x) => x.plan)];
  const show = OBJECTIVES[r.objective] || [r.objective, (v) => Number(v).toPrecision(4)];
  const values = [r.best_objective, ...r.alternatives.map((x) => x.objective_value)];
  const keys = Object.keys(r.best_plan).filter((k) => !["global_batch", "seq_len"].includes(k));
  const t = el("table", { class: "data", "data-testid": "search-table" }, box);
  const head = el("tr", {}, t);
  for (const h of ["#", ...keys, show[0]]) el("th", {}, head, h);
  plans.forEach((p, i) => {
    const tr = el("tr", { "data-testid": i === 0 ? "search-best" : "search-alt" }, t);
    el("td", {}, tr, i === 0 ? "best" : String(i + 1));
    for (const k of keys) el("td", {}, tr, String(p[k]));
    el("td", { "data-value": values[i] }, tr, values[i] === null ? "n/a" : show[1](values[i]));
  });
  for (const line of r.launch) {
    const head2 = el("div", { class: "launch-head" }, box);
    el("h4", {}, head2, `launch (${line.framework})${line.refused ? ": refused — " + line.refused : ""}`);
    const btn = el("button", { type: "button", "data-testid": "copy-" + line.framework }, head2, "Copy");
    const pre = el("pre", { class: "launch", "data-testid": "launch-" + line.framework }, box, line.text);
    btn.addEventListener("click", () => copyText(pre.textContent, btn));
  }
  if (search.kind === "serve") pareto(r, search);
}

async function copyText(text, btn) {
  try { await navigator.clipboard.writeText(text); }
  catch (_) {
    const area = el("textarea", {}, document.body, text);
    area.select(); document.execCommand("copy"); area.remove();
  }
  btn.textContent = "Copied";
  setTimeout(() => (btn.textContent = "Copy"), 1500);
}

async function pareto(r, search) {
  const req = { model: search.req.model, system: search.req.system, chips: search.req.chips,
    input_len: r.settings.input_len, output_len: r.settings.output_len, mode: r.settings.mode,
    plans: [r.best_plan, ...r.alternatives.map((x) => x.plan)] };
  try {
    const res = await api("POST", "/api/pareto", req);
    $("#search-pareto-panel").hidden = false;
    scatterChart($("#search-pareto"), res.points);
    document.body.dataset.paretoReady = String(res.points.length);
  } catch (err) { showError("search", err); }
}

// --- compare and why --------------------------------------------------------------------------
function side(kind, name) {
  const f = $("#compare-controls").elements, base = readRequest(kind);
  const req = { ...base, plan: { ...base.plan }, system: f[name + ".system"].value };
  if (f[name + ".chips"].value !== "") req.chips = Number(f[name + ".chips"].value);
  for (const k of ["tp", "pp"]) if (f[`${name}.${k}`].value !== "") req.plan[k] = Number(f[`${name}.${k}`].value);
  if (kind === "train") delete req.plan.dp; // dp fills each side's chips
  for (const k of ["qps", "ttft_slo_ms", "tpot_slo_ms", "ttft_p99_ms", "tpot_p99_ms"]) delete req[k];
  return req;
}

async function runCompare() {
  const kind = $("#compare-controls").elements.kind.value;
  showError("compare", null);
  try {
    const res = await api("POST", "/api/compare", { kind, a: side(kind, "a"), b: side(kind, "b") });
    const box = $("#compare-result");
    box.replaceChildren();
    const t = el("table", { class: "data" }, box);
    const head = el("tr", {}, t);
    for (const h of ["", `A: ${res.a.model} on ${res.a.system}`, `B: ${res.b.model} on ${res.b.system}`, "B / A"]) el("th", {}, head, h);
    const feas = el("tr", {}, t);
    el("td", {}, feas, "feasible");
    for (const sd of [res.a, res.b]) el("td", { class: sd.feasible ? "feasible" : "infeasible" }, feas, sd.feasible ? "yes" : "no: " + sd.problems.join("; "));
    el("td", {}, feas, "");
    for (const row of res.rows) {
      const tr = el("tr", { "data-testid": "compare-" + row.key }, t);
      el("td", {}, tr, row.label);
      const fmt = row.unit === "s" ? fmtTime : row.unit === "B" ? fmtGB : row.unit === "" ? fmtPct : row.unit === "$" ? (v) => (v > 0 ? "$" + v.toPrecision(4) : "n/a (no price)") : (v) => fmtNum(v);
      const better = row.lower_is_better ? (row.a < row.b ? "a" : row.b < row.a ? "b" : "") : (row.a > row.b ? "a" : row.b > row.a ? "b" : "");
      el("td", { class: better === "a" ? "better" : "", "data-value": row.a }, tr, fmt(row.a));
      el("td", { class: better === "b" ? "better" : "", "data-value": row.b }, tr, fmt(row.b));
      el("td", {}, tr, row.a > 0 && row.b > 0 ? (row.b / row.a).toFixed(2) + "x" : "n/a");
    }
    document.body.dataset.compareReady = "1";
  } catch (err) { showError("compare", err); document.body.dataset.compareReady = "error"; }
}

async function runWhy() {
  const system = $("#compare-controls").elements["why.system"].value;
  const pick = (kind) => { const r = readRequest(kind); delete r.chips; delete r.plan.dp; delete r.plan.replicas;
    for (const k of ["qps", "ttft_slo_ms", "tpot_slo_ms", "ttft_p99_ms", "tpot_p99_ms"]) delete r[k];
    return { ...r, system }; };
  showError("compare", null);
  try {
    const res = await api("POST", "/api/why", { train: pick("train"), serve: pick("serve") });
    $("#why-panel").hidden = false;
    groupedBars($("#why-chart"), res.rows, [
      { key: "train.step_time_s", label: "training step time" }, { key: "serve.ttft_s", label: "serving TTFT" },
      { key: "serve.tpot_s", label: "serving TPOT" }]);
    document.body.dataset.whyReady = "1";
  } catch (err) { showError("compare", err); }
}

// --- co-design: a chip for each job ------------------------------------------------------------
const CD_ROWS = [
  ["peak bf16 TFLOP/s", (r) => r.chip.peak_tflop_per_s.bf16],
  ["matrix area, mm²", (r) => r.design.matrix_area_mm2],
  ["SRAM, MB", (r) => r.design.sram_mb],
  ["HBM stacks", (r) => r.design.hbm_stacks],
  ["LPDDR channels", (r) => r.design.lpddr_channels],
  ["clock, GHz", (r) => r.design.clock_ghz],
  ["scale-up, GB/s", (r) => r.design.scale_up_gb_per_s],
  ["memory, GB", (r) => r.chip.memory_gb],
  ["memory bandwidth, TB/s", (r) => r.chip.memory_tb_per_s],
  ["power at full activity, W", (r) => r.chip.full_activity_power_w],
  ["nearest existing chip", (r) => r.nearest_chips[0].chip],
];

async function runCodesign() {
  const f = $("#compare-controls").elements;
  const base = { node: f["cd.node"].value, steps: Number(f["cd.steps"].value), starts: Number(f["cd.starts"].value) };
  if (f["cd.power_w"].value !== "") base.power_w = Number(f["cd.power_w"].value);
  showError("compare", null);
  $("#cd-panel").hidden = true;
  try {
    const jobs = {};
    for (const workload of ["train", "serve"]) jobs[workload] = await api("POST", "/api/search/codesign", { ...base, workload });
    state.codesign = jobs;
    $("#cd-run").disabled = true;
    $("#cd-cancel").disabled = false;
    $("[data-testid=codesign-progress]").classList.add("running");
    pollCodesign();
  } catch (err) { showError("compare", err); }
}

async function pollCodesign() {
  const jobs = state.codesign, now = {};
  for (const [w, j] of Object.entries(jobs)) now[w] = await api("GET", `/api/search/${j.id}`);
  $("[data-testid=codesign-progress] span").textContent = Object.entries(now).map(([w, j]) => `${w}: ${j.state} ${j.elapsed_s.toFixed(1)} s`).join("; ");
  if (Object.values(now).some((j) => j.state === "running")) { setTimeout(pollCodesign, 500); return; }
  $("[data-testid=codesign-progress]").classList.remove("running");
  $("#cd-run").disabled = false;
  $("#cd-cancel").disabled = true;
  const states = Object.values(now).map((j) => j.state);
  document.body.dataset.codesignState = states.every((x) => x === "done") ? "done" : states.includes("cancelled") ? "cancelled" : "failed";
  if (document.body.dataset.codesignState !== "done") {
    const failed = Object.values(now).find((j) => j.state === "failed");
    if (failed) showError("compare", { payload: { message: failed.error } });
    return;
  }
  const box = $("#cd-result");
  box.replaceChildren();
  const t = el("table", { class: "data" }, box);
  const head = el("tr", {}, t);
  for (const h of ["", "designed for training", "designed for serving"]) el("th", {}, head, h);
  for (const [label, get] of CD_ROWS) {
    const tr = el("tr", {}, t);
    el("td", {}, tr, label);
    for (const w of ["train", "serve"]) {
      const v = get(now[w].result);
      el("td", {}, tr, typeof v === "number" ? fmtNum(v, 2) : String(v));
    }
  }
  $("#cd-panel").hidden = false;
}

async function cancelCodesign() {
  for (const j of Object.values(state.codesign || {})) await api("POST", `/api/search/${j.id}/cancel`);
}

// --- start --------------------------------------------------------------------------------------
async function main() {
  state.meta = await api("GET", "/api/meta");
  for (const kind of ["train", "serve"]) {
    buildKnobs(kind);
    setDefaults(kind);
    const form = $(`#${kind}-controls`);
    form.addEventListener("input", (e) => { if (e.target.type !== "file") schedule(kind); });
    form.addEventListener("change", (e) => { if (e.target.type === "file") upload(kind, e.target); else schedule(kind); });
    form.addEventListener("submit", (e) => e.preventDefault());
  }
  const sf = $("#search-controls").elements;
  fillSelect(sf.model, state.meta.models, "llama-3-8b");
  fillSelect(sf.system, state.meta.systems, "dgx-h100");
  sf.kind.addEventListener("change", () => {
    for (const fs of $$("#search-controls fieldset[data-for]")) fs.hidden = fs.dataset.for !== sf.kind.value;
  });
  $("#search-run").addEventListener("click", startSearch);
  $("#search-cancel").addEventListener("click", cancelSearch);
  const cf = $("#compare-controls").elements;
  fillSelect(cf["a.system"], state.meta.systems, "dgx-h100");
  fillSelect(cf["b.system"], state.meta.systems, "dgx-b200");
  fillSelect(cf["why.system"], state.meta.systems, "dgx-h100");
  $("#compare-run").addEventListener("click", runCompare);
  $("#why-run").addEventListener("click", runWhy);
  $("#cd-run").addEventListener("click", runCodesign);
  $("#cd-cancel").addEventListener("click", cancelCodesign);
  for (const b of $$("#tabs button")) {
    b.addEventListener("click", () => {
      for (const x of $$("#tabs button")) x.classList.toggle("active", x === b);
      for (const t of $$(".tab")) t.classList.toggle("active", t.id === "tab-" + b.dataset.tab);
    });
  }
  await run("train");
  await run("serve");
  $("#status").textContent = "ready";
  document.body.dataset.ready = "1";
}
main().catch((err) => { $("#status").textContent = "failed to start: " + err.message; });
