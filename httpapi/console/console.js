// Oxbow's console: one page with a tab for each question an operator asks
// of a running application. Everything comes from the instance's HTTP API
// (relative to this page: the API is one level up), with the operator's
// token when one is given; nothing here holds data of its own.

const pollMs = 2000;
const historyMs = 15 * 60 * 1000; // the lag chart's span, as the instances keep it (GET /lag)

// ---------------------------------------------------------------------------
// DOM helpers. Text always goes in as text nodes, never as HTML.

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const svgNS = "http://www.w3.org/2000/svg";

function s(tag, attrs, ...children) {
  const el = document.createElementNS(svgNS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "style") Object.assign(el.style, v); // through the CSSOM: the page's CSP allows no inline style
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

function fmt(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function duration(seconds) {
  if (!Number.isFinite(seconds)) return "–";
  if (seconds < 60) return Math.round(seconds) + " s";
  if (seconds < 3600) return Math.round(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

function json(v) {
  return JSON.stringify(v);
}

// ---------------------------------------------------------------------------
// The API.

const base = new URL("..", location.href);

const token = {
  get: () => sessionStorage.getItem("oxbow-token") || "",
  set: (v) => (v ? sessionStorage.setItem("oxbow-token", v) : sessionStorage.removeItem("oxbow-token")),
};

class APIError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || "HTTP " + status);
    this.status = status;
    this.problem = problem;
  }
}

function apiURL(path) {
  return new URL(path.replace(/^\//, ""), base);
}

function headers(extra) {
  const hs = { Accept: "application/json", ...extra };
  const t = token.get();
  if (t) hs.Authorization = "Bearer " + t;
  return hs;
}

// refusal is the APIError of an answer that is not 2xx, with its problem
// document when it has one.
async function refusal(resp) {
  let problem;
  try {
    problem = await resp.json();
  } catch {
    problem = { title: resp.statusText };
  }
  return new APIError(resp.status, problem);
}

async function api(path, opts = {}) {
  const resp = await fetch(apiURL(path), { ...opts, headers: headers(opts.headers) });
  if (!resp.ok) throw await refusal(resp);
  return resp.json();
}

// why says why a call failed, in words an operator acts on.
function why(err) {
  if (err instanceof APIError) {
    if (err.status === 401) return "Refused: this needs a token (give one above). " + err.message;
    if (err.status === 403) return "Refused: the token lacks the permission. " + err.message;
    return err.status + " " + (err.problem.title || "") + ": " + err.message;
  }
  return String(err && err.message ? err.message : err);
}

function banner(err) {
  return h("div", { class: "banner", role: "alert" }, why(err));
}

// groupStatus is every member's status: this instance's, and each other
// member's asked through it. A member that does not answer has an error.
async function groupStatus() {
  const own = await api("/status");
  const members = own.instances && own.instances.length ? own.instances : [{ id: own.instance }];
  const out = new Map();
  await Promise.all(
    members.map(async (m) => {
      if (m.id === own.instance) {
        out.set(m.id, { member: m, status: own });
        return;
      }
      try {
        out.set(m.id, { member: m, status: await api("/status?instance=" + encodeURIComponent(m.id)) });
      } catch (err) {
        out.set(m.id, { member: m, error: err });
      }
    }),
  );
  return { own, members: [...out.values()].sort((a, b) => a.member.id.localeCompare(b.member.id)) };
}

let graphCache = null;

async function graph() {
  if (!graphCache) graphCache = api("/topology?format=json").catch((err) => ((graphCache = null), Promise.reject(err)));
  return graphCache;
}

// every runs fn now and then every ms until the returned stop is called;
// one run at a time.
function every(ms, fn) {
  let stopped = false;
  let timer = null;
  const run = async () => {
    try {
      await fn();
    } catch (err) {
      console.warn(err);
    }
    if (!stopped) timer = setTimeout(run, ms);
  };
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

// ---------------------------------------------------------------------------
// The topology: each sub-topology drawn in layers, left to right, with each
// node's rate; stores hang off the processors that use them.

const nodeW = 210;
const lineH = 14; // a wrapped name's line
let nodeH = 54; // for a one-line name; topologyPage makes room for the longest
const gapX = 50;
const gapY = 16;

function layout(sub) {
  const byName = new Map(sub.nodes.map((n) => [n.name, n]));
  const layer = new Map();
  const depth = (n, seen = new Set()) => {
    if (layer.has(n.name)) return layer.get(n.name);
    if (seen.has(n.name)) return 0;
    seen.add(n.name);
    const parents = (n.parents || []).map((p) => byName.get(p)).filter(Boolean);
    const d = parents.length ? 1 + Math.max(...parents.map((p) => depth(p, seen))) : 0;
    layer.set(n.name, d);
    return d;
  };
  sub.nodes.forEach((n) => depth(n));
  const layers = [];
  const put = (d, item) => (layers[d] = layers[d] || []).push(item);
  for (const n of sub.nodes) put(layer.get(n.name), { kind: n.kind, node: n, name: n.name });
  // Each store sits in the layer after the first processor that uses it.
  const placed = new Set();
  for (const n of sub.nodes) {
    for (const st of n.stores || []) {
      if (placed.has(st)) continue;
      placed.add(st);
      put(layer.get(n.name) + 1, { kind: "store", name: st, users: [] });
    }
  }
  const storeItems = new Map();
  layers.forEach((l) => (l || []).forEach((it) => it.kind === "store" && storeItems.set(it.name, it)));
  for (const n of sub.nodes) for (const st of n.stores || []) storeItems.get(st).users.push(n.name);
  // Order each layer by the mean place of what leads into it.
  const pos = new Map();
  const place = () => layers.forEach((l) => (l || []).forEach((it, i) => pos.set(it.kind + ":" + it.name, i)));
  place();
  for (let pass = 0; pass < 3; pass++) {
    for (let d = 1; d < layers.length; d++) {
      const l = layers[d] || [];
      const key = (it) => {
        const from = it.kind === "store" ? it.users : it.node.parents || [];
        const ps = from.map((p) => pos.get((byName.get(p) || {}).kind + ":" + p)).filter((x) => x !== undefined);
        return ps.length ? ps.reduce((a, b) => a + b, 0) / ps.length : pos.get(it.kind + ":" + it.name);
      };
      l.sort((a, b) => key(a) - key(b));
    }
    place();
  }
  const height = Math.max(...layers.map((l) => (l || []).length)) * (nodeH + gapY);
  const at = new Map();
  layers.forEach((l, d) =>
    (l || []).forEach((it, i) => at.set(it.kind + ":" + it.name, { x: d * (nodeW + gapX), y: i * (nodeH + gapY), it })),
  );
  return { at, width: layers.length * (nodeW + gapX) - gapX, height: height - gapY, byName };
}

// wrap breaks a name into lines of at most n characters, after the
// separators of its words ("-", ".", "_", "/"), a word longer than a line
// broken where it must be.
function wrap(text, n) {
  const lines = [];
  let line = "";
  for (const word of text.match(/[^-._/]+[-._/]*|[-._/]+/g) || [""]) {
    for (let w = word; w.length; ) {
      if (line.length + w.length <= n) {
        line += w;
        w = "";
      } else if (line.length) {
        lines.push(line);
        line = "";
      } else {
        lines.push(w.slice(0, n));
        w = w.slice(n);
      }
    }
  }
  if (line.length || !lines.length) lines.push(line);
  return lines;
}

// nameText is a node's name, wrapped, as SVG text at x, y.
function nameText(name, x, y) {
  return s("text", { class: "name", x, y }, wrap(name, 26).map((l, i) => s("tspan", { x, dy: i ? lineH : 0 }, l)));
}

// clip shortens text to n characters by cutting out its middle, where
// the names of a group's topics and stores repeat the application's.
function clip(text, n) {
  if (text.length <= n) return text;
  const tail = Math.floor((n - 1) / 2);
  return text.slice(0, n - 1 - tail) + "…" + text.slice(text.length - tail);
}

async function topologyPage(el) {
  const g = await graph();
  // Every node as tall as the longest name needs.
  const names = g.subTopologies.flatMap((sub) => sub.nodes.map((n) => n.name)).concat((g.stores || []).map((st) => st.name));
  const extra = lineH * (Math.max(1, ...names.map((n) => wrap(n, 26).length)) - 1);
  nodeH = 54 + extra;
  let views = [];
  try {
    views = (await api("/views")).views || [];
  } catch {
    // Without the permission to read views, stores link to nothing.
  }
  const viewOf = new Map(views.map((v) => [v.store, v.name]));
  const svg = s("svg", { role: "img", "aria-label": "the topology", id: "topology" });
  svg.append(
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8c99a6" }))),
  );
  const rates = new Map();
  let y = 10;
  let width = 0;
  for (const sub of g.subTopologies) {
    const lay = layout(sub);
    const ox = 20;
    const oy = y + 26;
    svg.append(
      s("rect", { class: "frame", x: 8, y, width: lay.width + 24, height: lay.height + 44, rx: 6 }),
      s("text", { class: "frame-label", x: 16, y: y + 17 }, "Sub-topology " + sub.id + (sub.global ? " (global store)" : "")),
    );
    const edges = s("g", {});
    svg.append(edges);
    const pt = (key) => lay.at.get(key);
    for (const n of sub.nodes) {
      const a = pt(n.kind + ":" + n.name);
      for (const c of n.children || []) {
        const child = lay.byName.get(c);
        if (!child) continue;
        const b = pt(child.kind + ":" + c);
        const x1 = ox + a.x + nodeW, y1 = oy + a.y + nodeH / 2, x2 = ox + b.x, y2 = oy + b.y + nodeH / 2;
        edges.append(s("path", { class: "edge", d: `M ${x1} ${y1} C ${x1 + gapX / 2} ${y1}, ${x2 - gapX / 2} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)" }));
      }
      for (const st of n.stores || []) {
        const b = pt("store:" + st);
        const x1 = ox + a.x + nodeW, y1 = oy + a.y + nodeH / 2 + 8, x2 = ox + b.x, y2 = oy + b.y + nodeH / 2;
        edges.append(s("path", { class: "edge store-edge", d: `M ${x1} ${y1} C ${x1 + gapX / 2} ${y1}, ${x2 - gapX / 2} ${y2}, ${x2} ${y2}` }));
      }
    }
    for (const [key, p] of lay.at) {
      const it = p.it;
      const x = ox + p.x, yy = oy + p.y;
      if (it.kind === "store") {
        const store = (g.stores || []).find((st) => st.name === it.name) || { name: it.name, kind: "" };
        const view = viewOf.get(it.name);
        const gEl = s("g", { class: "store", "data-store": it.name, tabindex: 0 },
          s("title", {}, view ? "open the view " + view : "no view reads this store"),
          s("rect", { x, y: yy, width: nodeW, height: nodeH, rx: 12 }),
          nameText(it.name, x + 10, yy + 18),
          s("text", { class: "detail", x: x + 10, y: yy + extra + 34 }, clip(store.kind + (view ? " · view " + view : ""), 30)),
          s("text", { class: "detail", x: x + 10, y: yy + extra + 48 }, clip(store.changelog ? "⇄ " + store.changelog : store.inMemory ? "in memory" : "no changelog", 30)),
        );
        gEl.addEventListener("click", () => {
          if (view) location.hash = "#/views?view=" + encodeURIComponent(view);
        });
        svg.append(gEl);
        continue;
      }
      const n = it.node;
      const detail = n.kind === "processor" ? n.op : (n.kind === "source" ? "← " : "→ ") + n.topic;
      const rate = s("text", { class: "rate", x: x + 10, y: yy + extra + 48 }, "");
      rates.set(n.name, rate);
      svg.append(
        s("g", { class: "node " + n.kind, "data-node": n.name },
          s("title", {}, n.name + " (" + n.op + (n.topic ? ", " + n.topic : "") + ")"),
          s("rect", { x, y: yy, width: nodeW, height: nodeH, rx: 4 }),
          nameText(n.name, x + 10, yy + 16),
          s("text", { class: "detail", x: x + 10, y: yy + extra + 31 }, clip(detail, 30)),
          rate,
        ),
      );
    }
    width = Math.max(width, lay.width + 40);
    y += lay.height + 56;
  }
  svg.setAttribute("width", width);
  svg.setAttribute("height", y);
  const note = h("p", { class: "muted" }, "Rates are records per second reaching each node, summed over the group's members. Click a store to open its view.");
  const err = h("div");
  replace(el, h("h2", {}, "Topology"), note, err, h("div", { class: "graph" }, svg));
  let prev = null;
  return every(pollMs, async () => {
    let sum = new Map();
    try {
      const { members } = await groupStatus();
      for (const m of members) for (const [k, v] of Object.entries((m.status && m.status.nodes) || {})) sum.set(k, (sum.get(k) || 0) + v);
      replace(err);
    } catch (e) {
      replace(err, banner(e));
      return;
    }
    const now = performance.now();
    if (prev) {
      const dt = (now - prev.t) / 1000;
      for (const [name, text] of rates) {
        const d = (sum.get(name) || 0) - (prev.sum.get(name) || 0);
        text.textContent = fmt(Math.max(d, 0) / dt) + " records/s";
        text.setAttribute("data-total", sum.get(name) || 0);
      }
    }
    prev = { t: now, sum };
  });
}

// ---------------------------------------------------------------------------
// Instances and tasks.

function sourceTopicsBySub(g) {
  const out = new Map();
  for (const sub of g.subTopologies) out.set(String(sub.id), sub.nodes.filter((n) => n.kind === "source").map((n) => n.topic));
  return out;
}

function taskLag(task, status, topics) {
  const [sub, part] = task.split("_");
  let sum = 0;
  let known = false;
  for (const t of topics.get(sub) || []) {
    const l = status && status.lag && status.lag[t] && status.lag[t][part];
    if (l !== undefined) {
      sum += l;
      known = true;
    }
  }
  return known ? sum : undefined;
}

async function instancesPage(el) {
  const g = await graph();
  const topics = sourceTopicsBySub(g);
  const find = h("input", { type: "search", placeholder: "a task, say 1_3", "aria-label": "find a task" });
  const err = h("div");
  const tasks = h("div");
  const cards = h("div", { class: "cards" });
  replace(el, h("h2", {}, "Instances and tasks"), err, h("form", { class: "inline", onsubmit: (e) => e.preventDefault() }, "Find ", find), tasks, h("h3", {}, "Members"), cards);
  let last = null;
  const prevRestore = new Map();
  const draw = () => {
    if (!last) return;
    const { own, members } = last;
    const byID = new Map(members.map((m) => [m.member.id, m]));
    const want = find.value.trim();
    const rows = (own.assignment || []).map((p) => {
      const active = byID.get(p.active);
      const lag = taskLag(p.task, active && active.status, topics);
      return h("tr", { class: want && p.task === want ? "match" : null, "data-task": p.task },
        h("td", { class: "mono" }, p.task),
        h("td", {}, p.active),
        h("td", { class: "num" }, lag === undefined ? "–" : fmt(lag)),
        h("td", {}, (p.standbys || []).join(", ") || "–"),
        h("td", { class: "muted" }, p.why || ""),
      );
    });
    replace(tasks, rows.length
      ? h("table", { id: "tasks" }, h("tr", {}, h("th", {}, "Task"), h("th", {}, "Active on"), h("th", { class: "num" }, "Records behind"), h("th", {}, "Standbys"), h("th", {}, "Why there")), rows)
      : h("p", { class: "muted" }, "No assignment yet: the instance has not joined its group."));
    replace(cards, members.map((m) => {
      if (m.error) return h("div", { class: "card", "data-instance": m.member.id }, h("h3", {}, m.member.id), banner(m.error));
      const st = m.status;
      const tags = Object.entries(st.tags || {}).map(([k, v]) => k + "=" + v).join(", ");
      const restoring = (st.restoring || []).map((r) => {
        const key = m.member.id + "/" + r.task + "/" + r.store;
        const prev = prevRestore.get(key);
        const now = performance.now();
        const rate = prev ? ((r.restored - prev.restored) * 1000) / (now - prev.t) : NaN;
        prevRestore.set(key, { restored: r.restored, t: now });
        const total = r.restored + r.remaining;
        const share = total ? r.restored / total : 1;
        return h("tr", {},
          h("td", { class: "mono" }, r.task), h("td", {}, r.store),
          h("td", {}, h("span", { class: "bar" }, h("span", { style: { width: Math.round(share * 100) + "%" } })), " ", Math.round(share * 100) + "%"),
          h("td", { class: "num" }, fmt(rate) + "/s"), h("td", {}, "ETA " + duration(r.remaining / rate)));
      });
      const standbys = Object.entries(st.standbyLag || {}).map(([t, l]) => t + " (" + fmt(l) + " behind)");
      return h("div", { class: "card", "data-instance": m.member.id },
        h("h3", {}, m.member.id, " ", h("span", { class: "badge" + (st.state === "running" && !st.stalled ? " good" : " warn") }, st.stalled ? "stalled" : st.state)),
        h("div", { class: "muted" }, [m.member.addr, tags, st.version && "version " + st.version].filter(Boolean).join(" · ")),
        st.stalled ? h("div", { class: "stalled" }, st.stalled) : null,
        h("div", {}, "Active tasks: ", h("span", { class: "mono" }, (st.tasks || []).join(" ") || "none")),
        h("div", {}, "Standby tasks: ", h("span", { class: "mono" }, standbys.join(", ") || "none")),
        h("div", {}, "Workers: " + (st.workers || "–") + " · restored " + fmt(st.restoredRecords) + " records"),
        restoring.length ? h("table", {}, h("tr", {}, h("th", {}, "Restoring"), h("th", {}, "Store"), h("th", {}, "Done"), h("th", { class: "num" }, "Rate"), h("th", {}, "Left")), restoring) : null,
        (st.deciders || []).length ? h("table", { class: "deciders" },
          h("tr", {}, h("th", {}, "Decides"), h("th", {}, "Group"), h("th", {}, "State"), h("th", {}, "Tasks"), h("th", { class: "num" }, "Behind")),
          st.deciders.map((d) => {
            const behind = d.lag ? Object.values(d.lag).flatMap((ps) => Object.values(ps)).reduce((a, b) => a + b, 0) : null;
            return h("tr", { "data-decider": d.aggregate },
              h("td", {}, d.aggregate), h("td", { class: "mono" }, d.group || "–"),
              h("td", {}, h("span", { class: "badge" + (d.state === "running" && !d.stalled ? " good" : " warn"), title: d.stalled || "" }, d.stalled ? "stalled" : d.state)),
              h("td", { class: "mono" }, (d.tasks || []).join(" ") || "–"),
              h("td", { class: "num" }, behind === null ? "–" : fmt(behind)));
          })) : null,
      );
    }));
  };
  find.addEventListener("input", draw);
  return every(pollMs, async () => {
    try {
      last = await groupStatus();
      replace(err);
    } catch (e) {
      replace(err, banner(e));
      return;
    }
    draw();
  });
}

// ---------------------------------------------------------------------------
// Lag: per input partition, live, with the last minutes drawn.

function polyline(points, w, hgt, maxV, cls) {
  if (points.length < 2) return null;
  const t0 = points[0].t;
  const span = Math.max(points[points.length - 1].t - t0, 1);
  const pts = points.map((p) => ((p.t - t0) / span) * w + "," + (hgt - (maxV ? (p.v / maxV) * (hgt - 4) : 0) - 2).toFixed(1)).join(" ");
  return s("polyline", { class: cls, points: pts });
}

// pastTotals sums the members' own lag histories (GET /lag) by their
// sampling interval, before the time before: [{t, lag, rate}], oldest first.
async function pastTotals(members, before) {
  const buckets = new Map(); // interval index -> Map(instance -> sample)
  let every = 5000;
  await Promise.all(members.map(async (m) => {
    let hist;
    try {
      hist = await api("/lag?instance=" + encodeURIComponent(m.member.id));
    } catch {
      return; // an instance without the route or out of reach: its past is not drawn
    }
    every = (hist.intervalSeconds || 5) * 1000;
    for (const x of hist.samples || []) {
      const t = Date.parse(x.t);
      if (t >= before) continue;
      const i = Math.floor(t / every);
      if (!buckets.has(i)) buckets.set(i, new Map());
      buckets.get(i).set(m.member.id, x);
    }
  }));
  const sum = (m) => Object.values(m || {}).flatMap((ps) => Object.values(ps)).reduce((a, b) => a + b, 0);
  const out = [];
  let prev = null;
  for (const i of [...buckets.keys()].sort((a, b) => a - b)) {
    const samples = [...buckets.get(i).values()];
    const lag = samples.reduce((a, x) => a + sum(x.lag), 0);
    const pos = samples.reduce((a, x) => a + sum(x.positions), 0);
    const t = i * every;
    const rate = prev && prev.n === samples.length ? Math.max(pos - prev.pos, 0) / ((t - prev.t) / 1000) : 0;
    out.push({ t, lag, rate });
    prev = { t, pos, n: samples.length };
  }
  return out;
}

async function lagPage(el) {
  const err = h("div");
  const chart = s("svg", { class: "chart", width: 640, height: 160, role: "img", "aria-label": "lag over the last minutes", id: "lag-chart" });
  const legend = h("p", { class: "muted" });
  const table = h("div");
  replace(el, h("h2", {}, "Lag"), err, chart, legend, table);
  const history = new Map(); // "topic/partition" -> [{t, lag, pos}]
  const totals = []; // {t, lag, rate}
  let past = null; // the instances' own, before the first poll
  let prevPos = null;
  return every(pollMs, async () => {
    let members;
    try {
      ({ members } = await groupStatus());
      replace(err);
    } catch (e) {
      replace(err, banner(e));
      return;
    }
    const now = Date.now();
    const rows = [];
    let total = 0;
    let pos = 0;
    for (const m of members) {
      if (!m.status) continue;
      for (const [topic, parts] of Object.entries(m.status.lag || {})) {
        for (const [p, lag] of Object.entries(parts)) {
          const key = topic + "/" + p;
          const at = ((m.status.positions || {})[topic] || {})[p] || 0;
          const hist = history.get(key) || [];
          hist.push({ t: now, v: lag });
          while (hist.length && hist[0].t < now - historyMs) hist.shift();
          history.set(key, hist);
          total += lag;
          pos += at;
          rows.push({ topic, p: Number(p), lag, at, instance: m.member.id, hist });
        }
      }
    }
    const rate = prevPos === null ? 0 : Math.max(pos - prevPos.pos, 0) / ((now - prevPos.t) / 1000);
    prevPos = { pos, t: now };
    totals.push({ t: now, lag: total, rate });
    while (totals.length && totals[0].t < now - historyMs) totals.shift();
    // Before this tab's first poll: what each instance measured itself
    // (GET /lag, every 5 s over its LagHistory), summed by interval;
    // fetched once, the tab's own polls carry on from it.
    if (past === null) past = await pastTotals(members, totals[0].t);
    const series = past.filter((x) => x.t >= now - historyMs).concat(totals);
    const maxLag = Math.max(1, ...series.map((x) => x.lag));
    const maxRate = Math.max(1, ...series.map((x) => x.rate));
    const w = 600, hgt = 130;
    chart.replaceChildren(
      s("line", { class: "axis", x1: 20, y1: hgt + 5, x2: w + 20, y2: hgt + 5 }),
      s("g", { transform: "translate(20,5)" },
        polyline(series.map((x) => ({ t: x.t, v: x.lag })), w, hgt, maxLag, "lag"),
        polyline(series.map((x) => ({ t: x.t, v: x.rate })), w, hgt, maxRate, "rate")),
      s("text", { x: 22, y: 14 }, "lag (max " + fmt(maxLag) + ")  ·  records/s read (max " + fmt(maxRate) + ")"),
      s("text", { x: 22, y: hgt + 20 }, "the last " + duration((now - series[0].t) / 1000)),
    );
    chart.setAttribute("data-points", series.length);
    chart.setAttribute("data-past-points", past.length);
    chart.setAttribute("data-total-lag", total);
    chart.setAttribute("data-rate", Math.round(rate));
    replace(legend, "Now: " + fmt(total) + " records behind, " + fmt(rate) + " records/s read. Red: records behind; blue: records read a second.");
    rows.sort((a, b) => a.topic.localeCompare(b.topic) || a.p - b.p);
    replace(table, rows.length
      ? h("table", { id: "lag" }, h("tr", {}, h("th", {}, "Topic"), h("th", { class: "num" }, "Partition"), h("th", {}, "Instance"), h("th", { class: "num" }, "Position"), h("th", { class: "num" }, "Behind"), h("th", {}, "Last minutes")),
        rows.map((r) => {
          const maxV = Math.max(1, ...r.hist.map((x) => x.v));
          return h("tr", {}, h("td", {}, r.topic), h("td", { class: "num" }, r.p), h("td", {}, r.instance), h("td", { class: "num" }, fmt(r.at)), h("td", { class: "num" }, fmt(r.lag)),
            h("td", {}, s("svg", { class: "spark", width: 120, height: 24 }, polyline(r.hist, 120, 24, maxV, "lag"))));
        }))
      : h("p", { class: "muted" }, "No input partition yet (the instance needs Brokers in its httpapi.Config to measure lag)."));
  });
}

// ---------------------------------------------------------------------------
// Versions.

function confirmDialog(text, action) {
  return new Promise((resolve) => {
    const close = (ok) => {
      back.remove();
      resolve(ok);
    };
    const back = h("div", { class: "modal-back" },
      h("div", { class: "modal", role: "dialog", "aria-modal": "true" },
        h("p", {}, text),
        h("div", { class: "actions" },
          h("button", { type: "button", onclick: () => close(false) }, "Cancel"),
          h("button", { type: "button", class: "danger", id: "confirm", onclick: () => close(true) }, action))));
    document.body.append(back);
  });
}

async function versionsPage(el) {
  const err = h("div");
  const result = h("div", { id: "result" });
  const table = h("div");
  replace(el, h("h2", {}, "Versions"), err, result, table);
  const act = async (question, label, path, done) => {
    if (!(await confirmDialog(question, label))) return;
    try {
      const r = await api(path, { method: "POST" });
      replace(result, h("div", { class: "banner ok", role: "status" }, done + " " + r.active + " is active."));
    } catch (e) {
      replace(result, banner(e));
    }
  };
  return every(pollMs, async () => {
    let v;
    try {
      v = await api("/versions");
      replace(err);
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        replace(table, h("p", { class: "muted" }, "This instance serves one version: it runs without httpapi.Config.Versions."));
        return;
      }
      replace(err, banner(e));
      return;
    }
    const withLag = v.versions.some((x) => x.lag || x.lagError);
    replace(table,
      h("table", { id: "versions" },
        h("tr", {}, h("th", {}, "Version"), h("th", {}, "State here"), h("th", {}, "Caught up"), h("th", { class: "num" }, "Behind"), h("th", {}, "Progress"), h("th", {}, "")),
        v.versions.map((x) => {
          const l = x.lag;
          const buttons = [];
          if (withLag && !x.active) {
            buttons.push(h("button", { type: "button", "data-promote": x.version, onclick: () => act("Promote " + x.version + "? Every instance's readers switch to it at once.", "Promote", "/versions/" + encodeURIComponent(x.version) + "/promote", "Promoted:") }, "Promote"));
          }
          if (withLag && x.active && v.rollbackTo) {
            buttons.push(h("button", { type: "button", class: "danger", "data-rollback": v.rollbackTo, onclick: () => act("Roll back from " + x.version + " to " + v.rollbackTo + ", the version active before it?", "Roll back", "/versions/rollback", "Rolled back:") }, "Roll back to " + v.rollbackTo));
          }
          return h("tr", { "data-version": x.version },
            h("td", {}, x.version, " ", x.active ? h("span", { class: "badge good" }, "active") : null),
            h("td", {}, x.state),
            h("td", {}, l ? (l.caughtUp ? h("span", { class: "badge good" }, "caught up") : h("span", { class: "badge warn" }, "catching up")) : x.lagError || "–"),
            h("td", { class: "num" }, l ? fmt(l.total) : "–"),
            h("td", {}, l ? [h("span", { class: "bar" }, h("span", { style: { width: Math.round(l.progress * 100) + "%" } })), " " + (l.progress * 100).toFixed(1) + "%"] : "–"),
            h("td", {}, buttons));
        })),
      withLag ? null : h("p", { class: "muted" }, "Lag and promotion need httpapi.Config.VersionControl."));
  });
}

// ---------------------------------------------------------------------------
// Views: browse, read a key, watch the change feed.

function parseParams(query) {
  return Object.fromEntries(new URLSearchParams(query || ""));
}

async function viewsPage(el, params) {
  const views = (await api("/views")).views || [];
  const name = params.view || (views[0] && views[0].name);
  const list = h("div", { class: "list" }, views.map((v) => h("a", { href: "#/views?view=" + encodeURIComponent(v.name), class: v.name === name ? "current" : null }, v.name)));
  const body = h("div", { id: "view" });
  replace(el, h("h2", {}, "Views"), h("div", { class: "split" }, list, body));
  const view = views.find((v) => v.name === name);
  if (!view) {
    replace(body, h("p", { class: "muted" }, views.length ? "No view " + name + "." : "This instance serves no views."));
    return () => {};
  }
  const path = "/views/" + encodeURIComponent(view.name);
  const err = h("div");
  const prefix = h("input", { type: "search", placeholder: "key prefix", "aria-label": "key prefix", disabled: !view.prefixScans });
  const entries = h("div", { id: "entries" });
  const keyIn = h("input", { type: "text", placeholder: "a key", "aria-label": "key to read" });
  const keyOut = h("pre", { class: "mono wrap", id: "key-value" });
  const feedList = h("div", { class: "feed", id: "feed" });
  const feedButton = h("button", { type: "button", id: "watch" }, "Watch changes");
  const pageNav = h("div", { class: "inline" });
  let cursors = [""];
  let page = 0;
  const load = async () => {
    const q = new URLSearchParams({ limit: "20" });
    if (prefix.value && view.prefixScans) q.set("prefix", prefix.value);
    if (cursors[page]) q.set("cursor", cursors[page]);
    let p;
    try {
      p = await api(path + "/entries?" + q);
      replace(err);
    } catch (e) {
      replace(err, banner(e));
      return;
    }
    cursors[page + 1] = p.next || "";
    replace(entries, p.entries.length
      ? h("table", {}, h("tr", {}, h("th", {}, "Key"), h("th", {}, "Value")),
        p.entries.map((e) => h("tr", { "data-key": typeof e.key === "string" ? e.key : json(e.key) }, h("td", { class: "mono" }, typeof e.key === "string" ? e.key : json(e.key)), h("td", { class: "mono wrap" }, json(e.value)))))
      : h("p", { class: "muted" }, "No entries" + (prefix.value ? " with this prefix." : " on this instance's partitions.")));
    replace(pageNav,
      h("button", { type: "button", disabled: page === 0, onclick: () => ((page -= 1), load()) }, "Previous"),
      " page " + (page + 1) + " ",
      h("button", { type: "button", disabled: !p.next, onclick: () => ((page += 1), load()) }, "Next"));
  };
  prefix.addEventListener("input", () => {
    cursors = [""];
    page = 0;
    load();
  });
  const readKey = async (e) => {
    e.preventDefault();
    if (!keyIn.value) return;
    try {
      const r = await api(path + "/keys/" + encodeURIComponent(keyIn.value));
      keyOut.textContent = JSON.stringify(r, null, 2);
    } catch (e2) {
      keyOut.textContent = why(e2);
    }
  };
  let feed = null;
  const watch = () => {
    if (feed) {
      feed.abort();
      feed = null;
      feedButton.textContent = "Watch changes";
      delete feedList.dataset.open;
      return;
    }
    feed = new AbortController();
    feedButton.textContent = "Stop watching";
    follow(path + "/changes", feed.signal, () => (feedList.dataset.open = "true"), (ev) => {
      const line = ev.event === "change"
        ? h("div", { class: "mono", "data-change": "" }, new Date().toLocaleTimeString() + "  ", ev.data)
        : h("div", { class: "banner" }, ev.event + ": " + ev.data);
      feedList.prepend(line);
      while (feedList.children.length > 100) feedList.lastChild.remove();
    }).catch((e) => {
      if (feed) feedList.prepend(banner(e));
    });
  };
  feedButton.addEventListener("click", watch);
  replace(body,
    h("h3", {}, view.name, " ", h("span", { class: "muted" }, view.kind + " · keys " + view.keyType + " · values " + view.valueType + " · store " + (view.store || "?"))),
    err,
    h("form", { class: "inline", onsubmit: (e) => e.preventDefault() }, "Browse ", prefix),
    entries, pageNav,
    h("h3", {}, "Read a key"),
    h("form", { class: "inline", onsubmit: readKey }, keyIn, h("button", { type: "submit", id: "read-key" }, "Read")),
    keyOut,
    h("h3", {}, "Change feed"),
    feedButton, feedList);
  const stop = every(pollMs, load);
  return () => {
    stop();
    if (feed) feed.abort();
    feed = null;
  };
}

// follow reads a server-sent event stream with fetch (which, unlike
// EventSource, sends the token), calling onOpen once the first bytes have
// come (the feed's start, which the server writes once it knows where it
// starts) and onEvent for each event.
async function follow(path, signal, onOpen, onEvent) {
  const resp = await fetch(apiURL(path), { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!resp.ok) throw await refusal(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let opened = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      if (!opened) {
        opened = true;
        onOpen();
      }
      buf += value;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const ev = { event: "message", data: "" };
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue;
          const [field, ...rest] = line.split(":");
          const val = rest.join(":").replace(/^ /, "");
          if (field === "event") ev.event = val;
          else if (field === "data") data.push(val);
          else if (field === "id") ev.id = val;
        }
        ev.data = data.join("\n");
        if (data.length) onEvent(ev);
      }
    }
  } catch (e) {
    if (signal.aborted) return;
    throw e;
  }
}

// ---------------------------------------------------------------------------
// Dead letters.

async function deadLettersPage(el) {
  const err = h("div");
  const table = h("div");
  replace(el, h("h2", {}, "Dead letters"), err, table);
  const known = new Set([
    "oxbow.stage", "oxbow.error", "oxbow.topic", "oxbow.partition", "oxbow.offset",
  ]);
  return every(5000, async () => {
    let d;
    try {
      d = await api("/deadletters?limit=50");
      replace(err);
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        replace(table, h("p", { class: "muted" }, e.message));
        return;
      }
      replace(err, banner(e));
      return;
    }
    replace(table,
      h("p", { class: "muted" }, "The latest records of " + d.topic + ", newest first."),
      d.records.length
        ? h("table", { id: "deadletters" },
          h("tr", {}, h("th", { class: "num" }, "Offset"), h("th", {}, "Stage"), h("th", {}, "From"), h("th", {}, "Error"), h("th", {}, "Key"), h("th", {}, "Value"), h("th", {}, "Other headers")),
          d.records.map((r) => {
            const hs = r.headers || {};
            const others = Object.entries(hs).filter(([k]) => !known.has(k)).map(([k, v]) => k + "=" + v).join(", ");
            return h("tr", {},
              h("td", { class: "num" }, r.offset),
              h("td", {}, hs["oxbow.stage"] || "–"),
              h("td", { class: "mono" }, (hs["oxbow.topic"] || "?") + "/" + (hs["oxbow.partition"] || "?") + "@" + (hs["oxbow.offset"] || "?")),
              h("td", { class: "wrap" }, hs["oxbow.error"] || ""),
              h("td", { class: "mono wrap" }, r.key),
              h("td", { class: "mono wrap" }, r.value),
              h("td", { class: "mono wrap" }, others));
          }))
        : h("p", { class: "muted" }, "None: nothing was dead-lettered."));
  });
}

// ---------------------------------------------------------------------------
// The frame: tabs, the token, the instance.

const pages = [
  ["topology", "Topology", topologyPage],
  ["instances", "Instances", instancesPage],
  ["lag", "Lag", lagPage],
  ["versions", "Versions", versionsPage],
  ["views", "Views", viewsPage],
  ["deadletters", "Dead letters", deadLettersPage],
];

let unmount = () => {};

async function route() {
  unmount();
  unmount = () => {};
  const [, name, query] = location.hash.match(/^#\/([a-z]+)\??(.*)$/) || [null, "topology", ""];
  const page = pages.find((p) => p[0] === name) || pages[0];
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.page === page[0]);
  const el = document.getElementById("page");
  el.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  el.dataset.page = page[0];
  try {
    const stop = await page[2](el, parseParams(query));
    unmount = stop || (() => {});
  } catch (e) {
    replace(el, h("h2", {}, page[1]), banner(e));
  }
  el.dataset.ready = page[0];
}

function frame() {
  const header = document.querySelector("header");
  const nav = h("nav", {}, pages.map(([id, label]) => h("a", { href: "#/" + id, "data-page": id }, label)));
  const who = h("span", { class: "who", id: "who" });
  const input = h("input", { type: "password", placeholder: "token (for secured APIs)", "aria-label": "token", id: "token", value: token.get() });
  const form = h("form", { class: "token", onsubmit: (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    graphCache = null;
    route();
    identify();
  } }, input, h("button", { type: "submit", id: "use-token" }, "Use"));
  header.append(nav, who, form);
  const identify = async () => {
    try {
      const st = await api("/status");
      who.textContent = "instance " + st.instance + " · " + st.state + (st.version ? " · version " + st.version : "");
    } catch (e) {
      who.textContent = e instanceof APIError && (e.status === 401 || e.status === 403) ? "give a token with the operate permission" : "";
    }
  };
  identify();
}

frame();
window.addEventListener("hashchange", route);
route();
