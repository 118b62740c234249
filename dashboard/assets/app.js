// Plumeria dashboard: polls api/view every second and api/series every
// interval, and redraws. No libraries; charts are drawn on <canvas>.
// Elements carry stable ids and data attributes for tests
// (e.g. <tr data-brick="b1" data-state="down">).
"use strict";

const VIEW_EVERY_MS = 1000;
let seriesEveryMs = 2000;
let windowMs = 10 * 60 * 1000;
let lastSeries = [];

const $ = (id) => document.getElementById(id);

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function bytes(n) {
  if (n == null) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
}

function num(n, digits) {
  if (n == null) return "-";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return n.toFixed(digits ?? 0);
}

function ms(n) {
  if (n == null) return "-";
  if (n >= 1000) return (n / 1000).toFixed(2) + " s";
  if (n >= 10) return n.toFixed(0) + " ms";
  if (n >= 1) return n.toFixed(1) + " ms";
  return (n * 1000).toFixed(0) + " µs";
}

function ago(msAgo) {
  if (msAgo == null || msAgo < 0) return "never";
  if (msAgo < 1000) return msAgo + " ms ago";
  if (msAgo < 120000) return (msAgo / 1000).toFixed(1) + " s ago";
  return Math.round(msAgo / 60000) + " min ago";
}

function age(msAge) {
  if (msAge == null || msAge < 0) return "unknown";
  const s = Math.floor(msAge / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function pill(state) { return `<span class="pill ${esc(state)}">${esc(state)}</span>`; }

function bar(pct, cls) {
  const p = Math.max(0, Math.min(100, pct || 0));
  return `<div class="bar" title="${p.toFixed(1)}%"><span class="${cls || ""}" style="width:${p}%"></span></div>`;
}

function rows(tbody, items, cols, render) {
  tbody.innerHTML = items.length ? items.map(render).join("") : `<tr class="empty"><td colspan="${cols}">none</td></tr>`;
}

function tile(id, cls) {
  const t = $(id);
  t.classList.remove("ok", "warn", "bad");
  if (cls) t.classList.add(cls);
}

function renderSummary(v) {
  const s = v.summary;
  const h = $("health");
  h.dataset.health = s.health;
  h.textContent = s.health.replace("-", " ");
  $("leader").textContent = v.leader || "(election)";
  $("epoch").textContent = v.map_epoch;

  const total = s.bricks_up + s.bricks_down;
  $("bricks-count").textContent = `${s.bricks_up} / ${total} up`;
  $("bricks-count").dataset.up = s.bricks_up;
  $("bricks-count").dataset.down = s.bricks_down;
  $("bricks-sub").textContent = `${s.bricks_down} down, ${s.bricks_draining} draining`;
  tile("tile-bricks", s.bricks_down > 0 ? "bad" : s.bricks_draining > 0 ? "warn" : "ok");

  const usedPct = s.capacity_bytes > 0 ? (100 * s.used_bytes) / s.capacity_bytes : 0;
  $("capacity").textContent = bytes(s.used_bytes);
  $("capacity-sub").textContent = `${usedPct.toFixed(1)}% of ${bytes(s.capacity_bytes)} used`;
  $("capacity-bar").style.width = usedPct + "%";
  $("capacity-bar").className = usedPct > 90 ? "bad" : usedPct > 75 ? "warn" : "";

  $("degraded").textContent = `${num(s.degraded_chunks)} chunks`;
  $("degraded").dataset.chunks = s.degraded_chunks;
  $("degraded-sub").textContent = `${s.degraded_pgs} of ${s.pgs} PGs degraded, ${num(s.chunks)} chunks in all`;
  tile("tile-degraded", s.degraded_pgs > 0 ? "bad" : "ok");

  const rb = v.rebuild;
  const pct = 100 * rb.progress;
  $("rebuild").textContent = rb.peak_chunks > 0 ? `${pct.toFixed(0)}%` : "nothing to do";
  $("rebuild").dataset.progress = rb.progress.toFixed(3);
  $("rebuild-bar").style.width = pct + "%";
  $("rebuild-bar").className = rb.peak_chunks > 0 ? "warn" : "ok";
  tile("tile-rebuild", rb.active ? "warn" : rb.peak_chunks > 0 ? "bad" : "ok");
  $("rebuild-sub").textContent = rb.peak_chunks === 0 ? "every chunk has all its replicas"
    : `${num(rb.degraded_chunks)} of ${num(rb.peak_chunks)} chunks left` +
      (rb.active ? `, backfilling ${s.syncing_pgs} PGs` : ", waiting for a brick to copy to");

  const l = v.latest || {};
  $("throughput").textContent = l.read_bytes_per_s == null ? "-" : `${bytes((l.read_bytes_per_s || 0) + (l.write_bytes_per_s || 0))}/s`;
  $("throughput-sub").textContent = l.read_bytes_per_s == null ? "no sample yet"
    : `read ${bytes(l.read_bytes_per_s)}/s · write ${bytes(l.write_bytes_per_s)}/s · ${num((l.read_ops_per_s || 0) + (l.write_ops_per_s || 0), 1)} ops/s`;
  const busy = l.write_p99_ms != null || l.read_p99_ms != null;
  $("latency").textContent = busy ? ms(Math.max(l.write_p99_ms || 0, l.read_p99_ms || 0)) : l.t ? "idle" : "-";
  $("latency-sub").textContent = busy ? `read p50 ${ms(l.read_p50_ms)} p99 ${ms(l.read_p99_ms)} · write p50 ${ms(l.write_p50_ms)} p99 ${ms(l.write_p99_ms)}`
    : "no reads or writes in the last sample";
}

function renderMap(v) {
  const byName = Object.fromEntries(v.bricks.map((b) => [b.name, b]));
  $("map").innerHTML = v.domains.length ? v.domains.map((d) =>
    `<div class="domain${d.down ? " hasdown" : ""}" data-domain="${esc(d.label)}"><div class="dlabel">${esc(d.label)}</div>` +
    d.bricks.map((n) => {
      const b = byName[n];
      return `<div class="brick" data-map-brick="${esc(n)}" data-state="${esc(b.state)}" title="${esc(b.addr)} · ${esc(b.state)} · ${b.pgs} PGs">` +
        `${esc(n)}<small>${esc(b.state)}</small></div>`;
    }).join("") + `</div>`).join("") : `<p class="note">no bricks registered</p>`;
}

function renderTables(v) {
  rows($("bricks").tBodies[0], v.bricks, 8, (b) =>
    `<tr data-brick="${esc(b.name)}" data-state="${esc(b.state)}" data-draining="${b.draining}">` +
    `<td><b>${esc(b.name)}</b></td><td>${pill(b.state)}</td><td>${esc(b.domain_label)}</td><td>${esc(b.addr)}</td>` +
    `<td class="num">${bytes(b.used_bytes)}</td><td class="barcol">${bar(b.used_pct, b.used_pct > 90 ? "bad" : b.used_pct > 75 ? "warn" : "")}` +
    `<small>${b.used_pct.toFixed(1)}% of ${bytes(b.capacity_bytes)}</small></td>` +
    `<td class="num">${b.pgs}</td><td class="num">${ago(b.last_seen_ms_ago)}</td></tr>`);

  rows($("volumes").tBodies[0], v.volumes, 11, (x) =>
    `<tr data-volume="${esc(x.name)}" data-state="${esc(x.state)}">` +
    `<td><b>${esc(x.name)}</b></td><td>${pill(x.state)}</td><td class="num">${x.replicas}</td>` +
    `<td class="barcol">${bar(x.in_sync_pct, x.in_sync_pct < 100 ? "warn" : "ok")}<small>${x.pgs - x.degraded_pgs} of ${x.pgs}</small></td>` +
    `<td class="num">${num(x.chunks)}</td><td class="num">${num(x.degraded_chunks)}</td><td class="num">${x.degraded_pgs}</td>` +
    `<td class="num">${x.syncing_pgs}</td><td class="num">${x.snapshots}</td>` +
    `<td class="num">${x.live_bytes < 0 ? "–" : bytes(x.live_bytes)}</td><td class="num">${x.history_bytes < 0 ? "–" : bytes(x.history_bytes)}</td></tr>`);

  rows($("sessions").tBodies[0], v.sessions, 5, (s) =>
    `<tr data-session="${esc(s.clerk)}/${s.session}" data-clerk="${esc(s.clerk)}" data-state="${esc(s.state)}">` +
    `<td><b>${esc(s.clerk)}</b></td><td class="num">${s.session}</td><td>${esc(s.tables.join(", "))}</td>` +
    `<td>${pill(s.state)}</td><td class="num">${age(s.age_ms)}</td></tr>`);

  rows($("recoveries").tBodies[0], v.recoveries, 4, (s) =>
    `<tr data-recovery="${esc(s.clerk)}/${s.session}" data-state="${esc(s.state)}">` +
    `<td><b>${esc(s.clerk)}</b></td><td class="num">${s.session}</td><td>${esc(s.tables.join(", "))}</td><td>${pill(s.state)}</td></tr>`);

  rows($("coordinators").tBodies[0], v.coordinators, 5, (c) =>
    `<tr data-coordinator="${esc(c.name)}" data-role="${esc(c.role)}" data-state="${esc(c.state)}">` +
    `<td><b>${esc(c.name)}</b></td><td>${esc(c.addr)}</td><td>${pill(c.role)}</td><td>${pill(c.state)}</td>` +
    `<td class="num">${c.role === "leader" ? "-" : ago(c.last_seen_ms_ago)}</td></tr>`);

  rows($("lockservers").tBodies[0], v.lock_servers, 5, (l) =>
    `<tr data-lockserver="${esc(l.name)}" data-state="${esc(l.state)}">` +
    `<td><b>${esc(l.name)}</b></td><td>${esc(l.addr)}</td><td>${pill(l.state)}</td><td class="num">${l.groups || 0}</td>` +
    `<td class="num">${ago(l.last_seen_ms_ago)}</td></tr>`);
}

// ---- charts ----

const CHARTS = {
  throughput: { fmt: (y) => bytes(y) + "/s", lines: [
    { key: "read_bytes_per_s", label: "read", color: "#2f6fbf" },
    { key: "write_bytes_per_s", label: "write", color: "#d9730d" }] },
  ops: { fmt: (y) => num(y, 1), lines: [
    { key: "read_ops_per_s", label: "read", color: "#2f6fbf" },
    { key: "write_ops_per_s", label: "write", color: "#d9730d" }] },
  latency: { fmt: ms, lines: [
    { key: "read_p50_ms", label: "read p50", color: "#7fa7dd" },
    { key: "read_p99_ms", label: "read p99", color: "#2f6fbf" },
    { key: "write_p50_ms", label: "write p50", color: "#efb27a" },
    { key: "write_p99_ms", label: "write p99", color: "#d9730d" }] },
  degraded: { fmt: (y) => num(y), integer: true, lines: [
    { key: "degraded_chunks", label: "degraded chunks", color: "#d64545" },
    { key: "degraded_pgs", label: "degraded PGs", color: "#8e44ad" },
    { key: "syncing_pgs", label: "rebuilding PGs", color: "#d99a00" }] },
};

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart(canvas, spec, samples) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const L = 70, R = 10, T = 24, B = 22;
  const now = samples.length ? samples[samples.length - 1].t : Date.now();
  // The x axis spans the samples there are: at least a minute, at most the window.
  const span = Math.min(windowMs, Math.max(60000, samples.length ? now - samples[0].t : 0));
  const t0 = now - span;
  let ymax = 0;
  for (const s of samples) for (const l of spec.lines) if (s[l.key] != null) ymax = Math.max(ymax, s[l.key]);
  ymax = spec.integer ? Math.max(4, niceMax(ymax)) : niceMax(ymax * 1.05);
  const x = (t) => L + ((t - t0) / span) * (w - L - R);
  const y = (v) => T + (1 - v / ymax) * (h - T - B);

  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#e6eaf0"; g.fillStyle = "#6b7687"; g.lineWidth = 1;
  g.textAlign = "right"; g.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const v = (ymax * i) / 4, yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(L, yy); g.lineTo(w - R, yy); g.stroke();
    g.fillText(spec.fmt(v), L - 6, yy);
  }
  g.textAlign = "center"; g.textBaseline = "top";
  const steps = [10, 15, 30, 60, 120, 300, 600].map((s) => s * 1000);
  const step = steps.find((s) => span / s <= 6) || steps[steps.length - 1];
  for (let d = 0; d <= span; d += step) {
    const label = d === 0 ? "now" : d < 60000 || d % 60000 ? `-${d / 1000} s` : `-${d / 60000} min`;
    g.textAlign = d === 0 ? "right" : "center";
    g.fillText(label, x(now - d), h - B + 6);
  }

  const gap = 2.5 * seriesEveryMs;
  for (const l of spec.lines) {
    g.strokeStyle = l.color; g.lineWidth = 1.8; g.beginPath();
    let prevT = null;
    for (const s of samples) {
      const v = s[l.key];
      if (v == null || s.t < t0) { prevT = null; continue; }
      if (prevT == null || s.t - prevT > gap) g.moveTo(x(s.t), y(v)); else g.lineTo(x(s.t), y(v));
      prevT = s.t;
    }
    g.stroke();
  }
  // legend with the newest value
  g.textAlign = "left"; g.textBaseline = "middle";
  let lx = L;
  const last = samples[samples.length - 1] || {};
  for (const l of spec.lines) {
    g.fillStyle = l.color; g.fillRect(lx, 8, 10, 3);
    g.fillStyle = "#1d2430";
    const text = `${l.label} ${last[l.key] == null ? "-" : spec.fmt(last[l.key])}`;
    g.fillText(text, lx + 14, 10);
    lx += g.measureText(text).width + 30;
  }
  if (samples.length < 2) {
    g.fillStyle = "#6b7687"; g.textAlign = "center";
    g.fillText("collecting samples…", L + (w - L - R) / 2, T + (h - T - B) / 2);
  }
  canvas.dataset.samples = samples.length;
}

function drawCharts() {
  for (const c of document.querySelectorAll("canvas[data-chart]")) drawChart(c, CHARTS[c.dataset.chart], lastSeries);
}

// ---- polling ----

function showError(msg) {
  const e = $("error");
  e.hidden = !msg;
  e.textContent = msg ? `Cannot get the cluster status: ${msg}. Showing the last data; retrying.` : "";
  document.body.dataset.stale = msg ? "1" : "0";
}

async function fetchJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `${url}: HTTP ${r.status}`);
  return body;
}

async function pollView() {
  try {
    const v = await fetchJSON("api/view");
    if (v.series) {
      seriesEveryMs = v.series.interval_ms || seriesEveryMs;
      windowMs = v.series.window_ms || windowMs;
      $("series-note").textContent = `last ${Math.round(windowMs / 60000)} minutes, a sample every ${(seriesEveryMs / 1000).toFixed(0)} s`;
    }
    renderSummary(v);
    renderMap(v);
    renderTables(v);
    const u = $("updated");
    u.dataset.updated = v.generated_ms;
    u.textContent = "updated " + new Date(v.generated_ms).toLocaleTimeString();
    showError("");
    document.body.dataset.ready = "1";
  } catch (err) {
    showError(err.message || String(err));
  }
  setTimeout(pollView, VIEW_EVERY_MS);
}

async function pollSeries() {
  try {
    lastSeries = await fetchJSON("api/series");
    drawCharts();
  } catch (err) {
    // the view poll reports errors
  }
  setTimeout(pollSeries, seriesEveryMs);
}

window.addEventListener("resize", drawCharts);
pollView();
pollSeries();
