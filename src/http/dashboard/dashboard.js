// floe dashboard: one page, live from the job's `/status` JSON.
//
// No build step and no dependencies: plain DOM and SVG. Every value shown is
// read from `/status` (records, time shares, watermarks, checkpoints,
// failures); the only derived figures are rates (difference of two polls)
// and each vertex's worst subtask. Elements carry `data-*` attributes with
// the raw values so a browser test can compare the page with `/status`.
"use strict";

const POLL_MS = 1000;
// Thresholds of Flink's backpressure levels: OK up to 10 %, LOW up to 50 %,
// HIGH above.
const AMBER_FROM = 0.1;
const RED_ABOVE = 0.5;

// The router may be nested under a prefix (`/floe/dashboard/`): every request
// is relative to the directory above the dashboard's own.
const BASE = (() => {
  const p = window.location.pathname;
  const i = p.lastIndexOf("/dashboard");
  return i >= 0 ? p.slice(0, i + 1) : "/";
})();

const S = {
  jobs: [],
  job: null,
  status: null,
  previous: null,
  rates: { in: null, out: null },
  error: null,
  pending: null,
};

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

const pct = (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)} %`);
const num = (x) => (x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US"));
function bytes(b) {
  if (b === null || b === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = b;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${u[i]}`;
}
function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
const level = (share) => (share > RED_ABOVE ? "red" : share > AMBER_FROM ? "amber" : "green");
const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "–");

function statusUrl() {
  return S.job ? `${BASE}jobs/${encodeURIComponent(S.job)}` : `${BASE}status`;
}

async function poll() {
  try {
    const jobs = await fetch(`${BASE}jobs`, { cache: "no-store" });
    if (jobs.ok) {
      const list = await jobs.json();
      S.jobs = (Array.isArray(list) ? list : list.jobs || []).map((j) => (typeof j === "string" ? j : j.name));
      if (!S.job || !S.jobs.includes(S.job)) S.job = S.jobs.length ? S.jobs[S.jobs.length - 1] : null;
    }
    const r = await fetch(statusUrl(), { cache: "no-store" });
    if (!r.ok) throw new Error(`${statusUrl()}: HTTP ${r.status}`);
    const status = await r.json();
    rates(status);
    S.previous = S.status;
    S.status = status;
    S.error = null;
  } catch (e) {
    S.error = String(e.message || e);
  }
  render();
  setTimeout(poll, POLL_MS);
}

// Records entering the job (out of its sources) and leaving it (into its
// sinks), per second between the last two polls.
function rates(now) {
  const before = S.status;
  if (!before || before.job !== now.job || now.elapsed_ms <= before.elapsed_ms) {
    S.rates = { in: null, out: null };
    return;
  }
  const dt = (now.elapsed_ms - before.elapsed_ms) / 1000;
  const ends = endpoints(now.graph);
  const sum = (st, ids, field) => st.operators.filter((o) => ids.has(o.id)).reduce((a, o) => a + o[field], 0);
  S.rates = {
    in: (sum(now, ends.sources, "records_out") - sum(before, ends.sources, "records_out")) / dt,
    out: (sum(now, ends.sinks, "records_in") - sum(before, ends.sinks, "records_in")) / dt,
  };
}

function endpoints(graph) {
  const hasIn = new Set(graph.edges.map((e) => e.to));
  const hasOut = new Set(graph.edges.map((e) => e.from));
  const ids = graph.operators.map((o) => o.id);
  return { sources: new Set(ids.filter((i) => !hasIn.has(i))), sinks: new Set(ids.filter((i) => !hasOut.has(i))) };
}

// Per vertex: its subtasks and the worst of them.
function vertexFacts(st) {
  const facts = new Map();
  for (const v of st.graph.vertices) facts.set(v.id, { vertex: v, subtasks: [], backpressured: 0, idle: 0, busy: 0 });
  for (const s of st.subtasks) {
    const f = facts.get(s.vertex);
    if (!f) continue;
    f.subtasks.push(s);
    f.backpressured = Math.max(f.backpressured, s.backpressured_share);
    f.idle = Math.max(f.idle, s.idle_share);
    f.busy = Math.max(f.busy, Math.max(0, 1 - s.backpressured_share - s.idle_share));
  }
  return facts;
}

function render() {
  const sel = document.getElementById("job-select");
  sel.replaceChildren(...S.jobs.map((j) => el("option", { value: j, selected: j === S.job }, j)));
  sel.hidden = S.jobs.length < 2;
  const banner = document.getElementById("banner");
  if (S.error) {
    banner.hidden = false;
    banner.className = "error";
    banner.textContent = `Cannot read the job's status: ${S.error}`;
  } else if (S.pending) {
    banner.hidden = false;
    banner.className = S.pending.error ? "error" : "info";
    banner.textContent = S.pending.text;
  } else {
    banner.hidden = true;
  }
  const running = S.status && !["Finished", "Failed", "Canceled"].includes(S.status.state);
  for (const id of ["btn-savepoint", "btn-stop", "btn-cancel"]) document.getElementById(id).disabled = !running;
  if (!S.status) return;
  // The snapshot drawn, for a browser test to compare the page with.
  window.floeStatus = S.status;
  const route = (window.location.hash || "#/overview").slice(2).split("/");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.id === `nav-${route[0]}`);
  let page;
  if (route[0] === "vertex") page = vertexPage(Number(route[1]));
  else if (route[0] === "checkpoints") page = checkpointsPage();
  else if (route[0] === "failures") page = failuresPage();
  else page = overviewPage();
  document.getElementById("page").replaceChildren(page);
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function card(label, value, id) {
  return el("div", { class: "card", id }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}

function overviewPage() {
  const st = S.status;
  const sec = (x) => (x === null ? "–" : `${num(Math.round(x))}/s`);
  return el(
    "section",
    { id: "overview" },
    el(
      "div",
      { class: "cards" },
      card("Job", st.job, "job-name"),
      card("State", el("span", { class: `state state-${st.state}`, "data-state": st.state }, st.state), "job-state"),
      card("Uptime", duration(st.elapsed_ms), "job-uptime"),
      card("Records in", sec(S.rates.in), "job-rate-in"),
      card("Records out", sec(S.rates.out), "job-rate-out"),
      card("Restarts", num(st.failover.restarts), "job-restarts"),
      card("Checkpoints", `${num(st.checkpoints.completed)} completed, ${num(st.checkpoints.failed)} failed`, "job-checkpoints"),
      // Facts the job's configuration gives (a group member's generation
      // and partitions), one card each.
      ...Object.entries(st.info || {}).map(([k, v]) => card(k, v, `job-info-${k}`)),
    ),
    el("h2", {}, "Job graph"),
    graphView(st),
    el(
      "p",
      { class: "legend" },
      "Vertices are coloured by their worst subtask's backpressured share: ",
      el("span", { class: "swatch green" }), " up to 10 %  ",
      el("span", { class: "swatch amber" }), " up to 50 %  ",
      el("span", { class: "swatch red" }), " above 50 %. ",
      "A vertex that backpressures others shows as busy: it is the bottleneck. Dashed boxes are pipelined regions; click a vertex for its subtasks.",
    ),
  );
}

// A layered drawing: vertices in columns by their longest distance from a
// source, edges between chains labelled with their partitioner.
function graphView(st) {
  const g = st.graph;
  const vOf = new Map(g.operators.map((o) => [o.id, o.vertex]));
  const links = new Map();
  for (const e of g.edges) {
    if (e.chained) continue;
    const from = vOf.get(e.from);
    const to = vOf.get(e.to);
    if (from === undefined || to === undefined || from === to) continue;
    const key = `${from}->${to}`;
    const l = links.get(key) || { from, to, partitioners: new Set() };
    l.partitioners.add(e.partitioner);
    links.set(key, l);
  }
  const depth = new Map(g.vertices.map((v) => [v.id, 0]));
  for (let round = 0; round < g.vertices.length; round++) {
    for (const l of links.values()) depth.set(l.to, Math.max(depth.get(l.to), depth.get(l.from) + 1));
  }
  const columns = [];
  for (const v of g.vertices) (columns[depth.get(v.id)] ||= []).push(v);
  const W = 230, H = 96, GX = 90, GY = 36, PAD = 24;
  const pos = new Map();
  columns.forEach((col, c) => col.forEach((v, r) => pos.set(v.id, { x: PAD + c * (W + GX), y: PAD + 18 + r * (H + GY) })));
  const width = PAD * 2 + columns.length * W + Math.max(0, columns.length - 1) * GX;
  const height = PAD * 2 + 18 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  const facts = vertexFacts(st);
  const root = svg("svg", { id: "job-graph", viewBox: `0 0 ${width} ${height}`, width, height });
  root.appendChild(
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))),
  );
  // Regions: the vertices each region's subtasks run; regions over the same
  // vertices are drawn once with their count.
  const groups = new Map();
  for (const r of g.regions || []) {
    const vs = [...new Set(r.subtasks.map((s) => s[0]))].sort((a, b) => a - b);
    const key = vs.join(",");
    const grp = groups.get(key) || { vertices: vs, regions: [] };
    grp.regions.push(r.id);
    groups.set(key, grp);
  }
  let inset = 0;
  for (const grp of groups.values()) {
    const ps = grp.vertices.map((v) => pos.get(v)).filter(Boolean);
    if (!ps.length) continue;
    const m = 10 + inset;
    const x0 = Math.min(...ps.map((p) => p.x)) - m, y0 = Math.min(...ps.map((p) => p.y)) - m - 8;
    const x1 = Math.max(...ps.map((p) => p.x)) + W + m, y1 = Math.max(...ps.map((p) => p.y)) + H + m;
    const label = grp.regions.length === 1 ? `region ${grp.regions[0]}` : `${grp.regions.length} regions (${grp.regions.join(", ")})`;
    root.appendChild(
      svg("g", { class: "region", "data-regions": grp.regions.join(",") }, svg("rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0, rx: 10 }), svg("text", { x: x0 + 8, y: y0 + 12 }, label)),
    );
    inset += 5;
  }
  for (const l of links.values()) {
    const a = pos.get(l.from), b = pos.get(l.to);
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const mx = (x1 + x2) / 2;
    root.appendChild(
      svg(
        "g",
        { class: "edge", "data-from": l.from, "data-to": l.to, "data-partitioner": [...l.partitioners].join(",") },
        svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: mx, y: (y1 + y2) / 2 - 6, "text-anchor": "middle" }, [...l.partitioners].join(", ").toUpperCase()),
      ),
    );
  }
  for (const v of g.vertices) {
    const p = pos.get(v.id);
    const f = facts.get(v.id);
    const lvl = level(f.backpressured);
    const names = v.operators.map((id) => (g.operators.find((o) => o.id === id) || { name: `op${id}` }).name);
    const node = svg(
      "g",
      {
        class: `vertex bp-${lvl}`,
        id: `vertex-${v.id}`,
        "data-vertex": v.id,
        "data-backpressure": f.backpressured.toFixed(4),
        "data-level": lvl,
        transform: `translate(${p.x},${p.y})`,
        onclick: () => (window.location.hash = `#/vertex/${v.id}`),
      },
      svg("title", {}, `${v.name}\nworst subtask: backpressured ${pct(f.backpressured)}, busy ${pct(f.busy)}, idle ${pct(f.idle)}`),
      svg("rect", { width: W, height: H, rx: 6 }),
      ...names.slice(0, 3).map((n, i) => svg("text", { x: 10, y: 20 + i * 15, class: i === 0 ? "head" : "chained" }, (i ? "→ " : "") + n)),
      names.length > 3 ? svg("text", { x: 10, y: 65, class: "chained" }, `… ${names.length - 3} more`) : null,
      svg("text", { x: 10, y: H - 10, class: "facts" }, `P=${v.parallelism}  backpressured ${pct(f.backpressured)}  busy ${pct(f.busy)}`),
    );
    root.appendChild(node);
  }
  return el("div", { class: "graph" }, root);
}

// A channel whose input ended carries Long.MAX_VALUE (it arrives rounded:
// JSON numbers beyond 2^53 lose digits): shown as "end".
const WATERMARK_END = 9.2e18;

function watermarkValue(w) {
  if (w === null || w === undefined) return "";
  return w >= WATERMARK_END ? "end" : String(w);
}

function watermark(w) {
  return watermarkValue(w) || "–";
}

function vertexPage(id) {
  const st = S.status;
  const f = vertexFacts(st).get(id);
  if (!f) return el("section", {}, el("p", {}, `No vertex ${id}. `, el("a", { href: "#/overview" }, "Back to the overview")));
  const ops = f.vertex.operators.map((o) => st.operators.find((x) => x.id === o)).filter(Boolean);
  const rows = f.subtasks.map((s) =>
    el(
      "tr",
      { "data-subtask": s.subtask },
      el("td", {}, `#${s.subtask}`),
      el("td", { class: "n", "data-records-in": s.records_in }, num(s.records_in)),
      el("td", { class: "n", "data-records-out": s.records_out }, num(s.records_out)),
      el("td", { class: `n bp-text-${level(s.backpressured_share)}`, "data-backpressure": s.backpressured_share }, pct(s.backpressured_share)),
      el("td", { class: "n" }, pct(s.idle_share)),
      el("td", { class: "n", "data-watermark": watermarkValue(s.watermark) }, watermark(s.watermark)),
      el("td", { class: "n" }, s.watermark_lag_ms === null || s.watermark_lag_ms === undefined ? "–" : `${num(s.watermark_lag_ms)} ms`),
      el("td", {}, queues(s.output_queued_batches, s.output_max_queued_batches)),
      el("td", { class: "n" }, num(s.state_entries)),
      el("td", { class: "n" }, bytes(s.state_bytes)),
    ),
  );
  const channels = f.subtasks.flatMap((s) =>
    s.inputs.map((c) =>
      el(
        "tr",
        { class: s.holding_back === c.channel ? "holding" : null, "data-subtask": s.subtask, "data-channel": c.channel, "data-holding": s.holding_back === c.channel ? "true" : "false" },
        el("td", {}, `#${s.subtask}`),
        el("td", {}, `ch${c.channel}`),
        el("td", { class: "n", "data-watermark": watermarkValue(c.watermark) }, watermark(c.watermark)),
        el("td", {}, c.ended ? "ended" : c.idle ? "idle" : "active"),
        el("td", {}, queues([c.queued_batches], [c.max_queued_batches])),
        el("td", {}, s.holding_back === c.channel ? "◀ holds the watermark back" : ""),
      ),
    ),
  );
  return el(
    "section",
    { id: "vertex-detail", "data-vertex": id },
    el("p", {}, el("a", { href: "#/overview" }, "← Overview")),
    el("h2", {}, f.vertex.name),
    el("p", { class: "muted" }, `Vertex ${id}, parallelism ${f.vertex.parallelism}. Worst subtask backpressured ${pct(f.backpressured)}, busy ${pct(f.busy)}, idle ${pct(f.idle)}.`),
    el("h3", {}, "Operators"),
    table(
      ["Operator", "Records in", "Records out", "State entries", "State bytes", "Late records", "Late dropped"],
      ops.map((o) =>
        el(
          "tr",
          { "data-operator": o.id },
          el("td", {}, o.name),
          el("td", { class: "n" }, num(o.records_in)),
          el("td", { class: "n" }, num(o.records_out)),
          el("td", { class: "n" }, num(o.state_entries)),
          el("td", { class: "n" }, bytes(o.state_bytes)),
          el("td", { class: "n" }, num(o.late_records)),
          el("td", { class: "n" }, num(o.late_records_dropped)),
        ),
      ),
      "operators",
    ),
    el("h3", {}, "Subtasks"),
    table(["Subtask", "Records in", "Records out", "Backpressured", "Idle", "Watermark", "Lag", "Output queues (now / max)", "State entries", "State bytes"], rows, "subtasks"),
    el("h3", {}, "Input channels"),
    channels.length ? table(["Subtask", "Channel", "Watermark", "Status", "Queued (now / max)", ""], channels, "channels") : el("p", { class: "muted" }, "A source: no input channels."),
  );
}

function queues(now, max) {
  if (!now || !now.length) return "–";
  return now.map((q, i) => `${q}/${max[i]}`).join("  ");
}

function table(head, rows, id) {
  return el("table", { id }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function checkpointsPage() {
  const c = S.status.checkpoints;
  const hist = c.history || [];
  const sp = c.savepoint;
  const latestSavepoint = [...hist].reverse().find((h) => h.savepoint && h.status === "completed");
  return el(
    "section",
    { id: "checkpoints" },
    el(
      "div",
      { class: "cards" },
      card("Completed", num(c.completed), "ckpt-completed"),
      card("Failed", num(c.failed), "ckpt-failed"),
      card("Longest", duration(c.max_duration_ms), "ckpt-longest"),
      card("Latest completed", c.last_completed === null || c.last_completed === undefined ? "–" : `chk-${c.last_completed}`, "ckpt-latest"),
      card(
        "Latest savepoint",
        sp ? (sp.Ok !== undefined ? sp.Ok : `failed: ${sp.Err}`) : latestSavepoint ? `#${latestSavepoint.id}` : "–",
        "ckpt-savepoint",
      ),
    ),
    el("h2", {}, "Duration"),
    durationChart(hist),
    el("h2", {}, "History"),
    hist.length
      ? table(
          ["ID", "Kind", "Triggered", "Duration", "Alignment", "Sync", "Async", "State", "Channel state", "Status"],
          [...hist].reverse().map((h) =>
            el(
              "tr",
              { class: `ckpt-${h.status}`, "data-checkpoint-id": h.id, "data-status": h.status, "data-duration": h.duration_ms },
              el("td", {}, String(h.id)),
              el("td", {}, h.savepoint ? "savepoint" : h.unaligned ? "checkpoint (unaligned)" : "checkpoint"),
              el("td", {}, when(h.trigger_ms)),
              el("td", { class: "n" }, duration(h.duration_ms)),
              el("td", { class: "n" }, duration(h.alignment_ms)),
              el("td", { class: "n" }, duration(h.sync_ms)),
              el("td", { class: "n" }, duration(h.async_ms)),
              el("td", { class: "n" }, bytes(h.state_bytes)),
              el("td", { class: "n" }, bytes(h.channel_state_bytes)),
              el("td", { title: h.failure || "" }, h.status + (h.failure ? `: ${h.failure}` : "")),
            ),
          ),
          "checkpoint-history",
        )
      : el("p", { class: "muted" }, "No checkpoint yet."),
  );
}

function durationChart(hist) {
  const W = 640, H = 140, P = 28;
  const max = Math.max(1, ...hist.map((h) => h.duration_ms));
  const bw = hist.length ? Math.min(40, (W - 2 * P) / hist.length) : 0;
  const root = svg("svg", { id: "checkpoint-chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H });
  root.appendChild(svg("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, class: "axis" }));
  root.appendChild(svg("text", { x: 2, y: P - 8, class: "axis-label" }, duration(max)));
  hist.forEach((h, i) => {
    const bh = Math.max(1, ((H - 2 * P) * h.duration_ms) / max);
    root.appendChild(
      svg(
        "rect",
        { x: P + i * bw + 2, y: H - P - bh, width: Math.max(1, bw - 4), height: bh, class: `bar ckpt-${h.status}`, "data-checkpoint-id": h.id },
        svg("title", {}, `#${h.id} ${h.status}: ${duration(h.duration_ms)}`),
      ),
    );
  });
  return el("div", { class: "chart" }, root);
}

function failuresPage() {
  const f = S.status.failures || [];
  const fo = S.status.failover;
  return el(
    "section",
    { id: "failures" },
    el(
      "div",
      { class: "cards" },
      card("Restarts", num(fo.restarts), "fo-restarts"),
      card("Restarted subtasks", num(fo.restarted_subtasks), "fo-subtasks"),
      card("Longest recovery", duration(fo.max_recovery_ms), "fo-recovery"),
    ),
    f.length
      ? table(
          ["At", "Subtask", "Error", "Restarted subtasks", "Restored checkpoint"],
          [...f].reverse().map((x) =>
            el(
              "tr",
              { "data-at": x.at_ms },
              el("td", {}, duration(x.at_ms)),
              el("td", {}, x.vertex ? `${x.vertex} #${x.subtask}` : "–"),
              el("td", { class: "error-text" }, x.message),
              el("td", { class: "n" }, x.restarted_subtasks === null || x.restarted_subtasks === undefined ? "–" : num(x.restarted_subtasks)),
              el("td", {}, x.restored_checkpoint === null || x.restored_checkpoint === undefined ? "–" : x.restored_checkpoint === 0 ? "none (from the beginning)" : `chk-${x.restored_checkpoint}`),
            ),
          ),
          "failure-history",
        )
      : el("p", { class: "muted", id: "no-failures" }, "No failures."),
  );
}

// Actions ask first, in the page (a test can answer too), then POST.
function confirmThen(question, action) {
  const dialog = el(
    "div",
    { id: "confirm", class: "modal" },
    el(
      "div",
      { class: "dialog" },
      el("p", {}, question),
      el("button", { id: "confirm-yes", type: "button", onclick: () => { dialog.remove(); action(); } }, "Yes"),
      el("button", { id: "confirm-no", type: "button", onclick: () => dialog.remove() }, "No"),
    ),
  );
  document.body.appendChild(dialog);
}

async function post(what, path) {
  S.pending = { text: `${what}…` };
  render();
  try {
    const r = await fetch(`${BASE}jobs/${encodeURIComponent(S.job || S.status.job)}/${path}`, { method: "POST" });
    const body = await r.text();
    let text = body;
    try {
      const j = JSON.parse(body);
      text = j.path || j.savepoint || j.message || j.error || body;
    } catch (_) {
      // plain text
    }
    S.pending = r.ok ? { text: `${what}: ${text}`, done: true } : { text: `${what} failed: ${text}`, error: true };
  } catch (e) {
    S.pending = { text: `${what} failed: ${e.message || e}`, error: true };
  }
  const banner = document.getElementById("banner");
  banner.setAttribute("data-result", S.pending.error ? "error" : "ok");
  render();
}

document.getElementById("btn-savepoint").addEventListener("click", () => confirmThen("Trigger a savepoint now?", () => post("Savepoint", "savepoint")));
document.getElementById("btn-stop").addEventListener("click", () => confirmThen("Stop the job with a final savepoint?", () => post("Stop with savepoint", "stop")));
document.getElementById("btn-cancel").addEventListener("click", () => confirmThen("Cancel the job? Its output since the last checkpoint is not committed.", () => post("Cancel", "cancel")));
document.getElementById("job-select").addEventListener("change", (e) => {
  // The running poll loop reads the new job on its next round.
  S.job = e.target.value;
  S.status = null;
});
window.addEventListener("hashchange", render);
poll();
