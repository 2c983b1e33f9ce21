// The live page's script: follows /live/events (one JSON frame a second)
// and redraws the numbers, tables and chart the server rendered first.
// No framework; the chart is an SVG polyline. The server's page.html and
// handler.go (ChartMax, ChartPoints) draw the same on the first load.
"use strict";

const W = 900, H = 160;

function $(id) { return document.getElementById(id); }

function fmtRate(v) { return String(Math.round(v * 10) / 10); }

function clock(iso) {
  const d = new Date(iso);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

// cell appends a td with text and class names to tr.
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function row(cls, id) {
  const tr = document.createElement("tr");
  if (cls) tr.className = cls;
  if (id) tr.dataset.row = id;
  return tr;
}

// countCells appends the in-use, waiting, rate and refused cells of r.
function countCells(tr, r) {
  cell(tr, String(r.in_use), "n in-use");
  cell(tr, String(r.waiting), "n waiting");
  cell(tr, fmtRate(r.refused_per_sec), "n rate" + (r.refused_per_sec ? " hot" : ""));
  cell(tr, String(r.refused), "n refused");
}

function fill(table, rows, empty, cols) {
  const body = table.tBodies[0];
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    const tr = row("empty");
    cell(tr, empty).colSpan = cols;
    body.appendChild(tr);
  }
}

function drawListeners(ls) {
  const rows = [];
  for (const l of ls || []) {
    const tr = row("listener", l.id);
    const name = cell(tr, l.name + " ", "name");
    const small = document.createElement("small");
    small.textContent = l.protocol + " " + l.addr;
    name.appendChild(small);
    for (const w of l.warnings || []) {
      const warn = document.createElement("small");
      warn.className = "warn";
      warn.textContent = " ⚠ " + w;
      name.appendChild(warn);
    }
    for (const p of l.paths || []) {
      const path = document.createElement("small");
      path.className = "path";
      path.textContent = " " + p;
      name.appendChild(path);
    }
    cell(tr, l.limit, "bound");
    countCells(tr, l);
    rows.push(tr);
    for (const r of l.limits || []) {
      const lr = row("limit", r.id);
      cell(lr, r.name, "name");
      cell(lr, r.limit, "bound");
      countCells(lr, r);
      rows.push(lr);
    }
  }
  fill($("listeners"), rows, "no listener", 6);
}

// classes matches pageClasses in handler.go: 1xx counts in the total only.
const classes = ["2xx", "3xx", "4xx", "499", "5xx"];

function drawRequests(ls) {
  const rows = [];
  for (const l of ls || []) {
    const q = l.requests;
    if (!q) continue;
    const tr = row("", l.id);
    cell(tr, l.name, "name");
    cell(tr, fmtRate(q.per_sec), "n per-sec");
    cell(tr, String(q.total), "n total");
    for (const name of classes) {
      const c = (q.classes || []).find((x) => x.name === name) || { name: name, count: 0, per_sec: 0 };
      const td = cell(tr, "", "n c" + name + (c.per_sec && name === "5xx" ? " hot" : ""));
      const small = document.createElement("small");
      small.textContent = fmtRate(c.per_sec) + "/s";
      td.replaceChildren(span("count", String(c.count)), " ", small);
    }
    rows.push(tr);
  }
  fill($("requests"), rows, "no HTTP listener", 8);
}

function drawUpstream(us) {
  fill($("upstream"), (us || []).map((u) => {
    const tr = row("", u.id);
    cell(tr, u.listener + (u.route ? " / " + u.route : ""), "name");
    cell(tr, u.kind, "kind");
    cell(tr, fmtRate(u.per_sec), "n per-sec" + (u.per_sec ? " hot" : ""));
    cell(tr, String(u.count), "n count");
    return tr;
  }), "no upstream error", 4);
}

function drawShadow(ss) {
  fill($("shadow"), (ss || []).map((s) => {
    const tr = row("", s.id);
    cell(tr, s.name, "name");
    cell(tr, s.limit, "bound");
    cell(tr, fmtRate(s.per_sec), "n per-sec" + (s.per_sec ? " warn" : ""));
    cell(tr, String(s.would_refuse), "n count");
    return tr;
  }), "no shadow limit or dry-run rate", 4);
}

function drawKeys(keys) {
  fill($("keys"), (keys || []).map((k) => {
    const tr = row();
    cell(tr, k.key, "key");
    cell(tr, k.where);
    cell(tr, String(k.in_use), "n");
    cell(tr, String(k.waiting), "n");
    cell(tr, String(k.refused), "n");
    return tr;
  }), "no client holds a connection or a permit", 5);
}

function drawQUIC(qs) {
  fill($("quic"), (qs || []).map((q) => {
    const tr = row();
    cell(tr, q.listener);
    cell(tr, String(q.in_progress), "n");
    cell(tr, String(q.threshold), "n");
    cell(tr, String(q.max_in_progress), "n");
    cell(tr, q.retry_on ? "on" : "off");
    return tr;
  }), "no http3 listener", 5);
}

function span(cls, text) {
  const s = document.createElement("span");
  s.className = cls;
  s.textContent = text;
  return s;
}

function drawRedis(r) {
  const p = $("redis");
  if (!r) { p.replaceChildren("no cluster: every limit counts on this node"); return; }
  const parts = r.reachable
    ? [span("ok", "reachable"), ", PING " + fmtRate(r.ping_ms) + " ms"]
    : [span("bad", "unreachable"), ": " + (r.error || "")];
  parts.push(" · ");
  parts.push(r.open_breakers ? span("bad", r.open_breakers + " circuit breakers open") : "no circuit breaker open");
  if (r.open_breakers) parts.push(" since " + clock(r.outage_since));
  if (r.degraded && r.degraded.length) parts.push(" · ", span("bad", "degraded (" + r.degraded.join(", ") + "): limits decide on this node by on_error"));
  parts.push(" · on_error " + r.on_error + " · " + (r.addrs || []).join(", "));
  p.replaceChildren(...parts);
}

// chartMax matches ChartMax in handler.go.
function chartMax(series) {
  let top = 1;
  for (const s of series) for (const v of s) top = Math.max(top, v);
  const p = Math.pow(10, Math.floor(Math.log10(top)));
  for (const m of [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (top <= m * p) return m * p;
  return 10 * p;
}

// chartSpan, xLabels and points match ChartSpan, XLabels and ChartPoints
// in handler.go.
function chartSpan(n) { return Math.min(Math.max(n, 60), 900); }

function xLabels(sp) {
  const ago = (s) => sp < 180 ? "−" + s + " s" : "−" + Math.floor((s + 30) / 60) + " min";
  return [ago(sp), ago(Math.floor(sp * 2 / 3)), ago(Math.floor(sp / 3)), "now"];
}

function points(vals, top, sp) {
  const step = W / Math.max(sp - 1, 1), n = vals.length;
  return vals.map((v, i) => (W - (n - 1 - i) * step).toFixed(1) + "," + (H - Math.min(v / top, 1) * (H - 4)).toFixed(1)).join(" ");
}

function drawChart(h) {
  const acc = h.accept || [], req = h.requests || [];
  const top = chartMax([acc, req]), sp = chartSpan(acc.length);
  $("chart-max").textContent = fmtRate(top);
  $("chart-accept").setAttribute("points", points(acc, top, sp));
  $("chart-requests").setAttribute("points", points(req, top, sp));
  $("xaxis").replaceChildren(...xLabels(sp).map((l) => span("", l)));
  const n = acc.length;
  $("refused-now").textContent = n ? fmtRate(acc[n - 1] + req[n - 1]) : "0";
}

function draw(f) {
  drawChart(f.history || {});
  drawRequests(f.listeners);
  drawUpstream(f.upstream);
  drawShadow(f.shadow);
  drawListeners(f.listeners);
  drawKeys(f.keys);
  drawQUIC(f.quic);
  drawRedis(f.redis);
  const t = $("updated");
  t.dateTime = f.time;
  t.textContent = clock(f.time);
  document.body.dataset.drawn = f.time; // for the tests: the script has drawn this frame
}

function follow() {
  const link = $("link");
  const es = new EventSource("/live/events");
  es.onopen = () => { link.textContent = "live"; link.className = "link live"; };
  es.onerror = () => { link.textContent = "reconnecting…"; link.className = "link lost"; };
  es.onmessage = (e) => draw(JSON.parse(e.data));
}

follow();
