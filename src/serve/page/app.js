// The log explorer: a time range, a histogram of lines per interval by level, a filter, the
// lines, each opened to its whole document, and live mode. Everything it shows comes from the
// JSON API of the same server; the view's state lives in the URL, so a view can be shared.
// A table with an event time is shown in it by default (its range, bars and line times), with
// a switch to ID (arrival) time; the URL's `time` says which.
"use strict";

const $ = (id) => document.getElementById(id);
const COLOURS = {
  fatal: "#7a271a", error: "#d92d20", warn: "#f79009", warning: "#f79009",
  info: "#2e90fa", debug: "#98a2b3", trace: "#d0d5dd", "": "#cfd4dc",
};
const OTHER_COLOURS = ["#7f56d9", "#15b79e", "#ee46bc", "#875bf7", "#4e5ba6"];
// Lines kept on the page: older ones are dropped as new ones arrive in live mode.
const MAX_LINES = 2000;
const PAGE = 100;
// Live mode refreshes this often.
const LIVE_EVERY_MS = 2000;
// Pages of rows one live refresh reads at most.
const LIVE_MAX_PAGES = 10;

// `before`: the view starts below this ID (its newer lines left the page as older ones were
// paged in); `open`: the ID of the line opened.
// `time`: "event" or "id", as the URL says; empty: the table's default.
const view = {
  table: "", from: "now-15m", to: "now", where: "", live: false, before: "", open: "", time: "",
};
let catalog = null;
let epoch = 0n;
let lines = []; // {id: BigInt, row}, newest first
let shown = new Set(); // IDs (text) on the page
let nextCursor = null;
let range = null; // {from: Date, to: Date} of the current view
let liveTimer = null;
let generation = 0; // bumped on every new view, so stale answers are dropped

// ---- the URL ----

function readUrl() {
  const p = new URLSearchParams(location.search);
  for (const key of ["table", "from", "to", "where", "time"]) {
    if (p.has(key)) view[key] = p.get(key);
  }
  view.before = p.get("before") ?? "";
  view.open = p.get("open") ?? "";
  view.live = p.get("live") === "1";
}

function writeUrl(push) {
  const p = new URLSearchParams();
  if (view.table) p.set("table", view.table);
  p.set("from", view.from);
  p.set("to", view.to);
  if (view.where) p.set("where", view.where);
  if (hasEventTime()) p.set("time", timeKind());
  if (view.live) p.set("live", "1");
  if (view.before) p.set("before", view.before);
  if (view.open) p.set("open", view.open);
  const url = "?" + p.toString();
  if (url === location.search) return;
  if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
}

// ---- times ----

// The instants the view's times denote now. The server reads them, with the grammar of
// `query --from`/`--to` (`now-1h`, `-2h`, `yesterday`, RFC 3339, ...), so the URL takes what
// the CLI and the API take.
async function resolveRange() {
  const answer = await api("/api/range", { from: view.from, to: view.to });
  return { from: new Date(answer.from), to: new Date(answer.to) };
}

// Whether the view's range ends now, as live mode needs.
function endsNow() {
  return view.to.trim().toLowerCase() === "now";
}

function iso(d) {
  return d.toISOString().replace(".000Z", "Z");
}

function shortTime(d) {
  return d.toISOString().replace("T", " ").replace(".000Z", "").replace("Z", "");
}

// The table of the view, as the catalog describes it.
function currentTable() {
  return catalog.tables.find((t) => t.name === (view.table || catalog.tables[0].name));
}

function hasEventTime() {
  return Boolean(catalog && currentTable().event_time);
}

// The time the view is in: event time when the table has one, unless the URL asks for ID time.
function timeKind() {
  return hasEventTime() && view.time !== "id" ? "event" : "id";
}

// A line's time in the view's time: its event time, or its ID's.
function lineTime(entry) {
  const event = currentTable().event_time;
  if (timeKind() === "event" && entry.row[event]) return new Date(entry.row[event]);
  return idTime(entry.id);
}

function idTime(id) {
  return new Date(Number((id >> 32n) + epoch) * 1000);
}

// ---- exact JSON ----
//
// A row's document may hold numbers JavaScript's cannot: integers past 2^53 (a u64, an i64)
// would be rounded by JSON.parse. Rows are read by this parser instead, which keeps every
// number JavaScript would not write back the same as its text (an `Exact`), and shown by
// `pretty`, which writes that text back: the opened line is the stored document, digit for digit.

class Exact {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

const TOKEN = {
  space: /[ \t\n\r]*/y,
  string: /"(?:[^"\\]|\\.)*"/y,
  number: /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y,
};

function readExact(text) {
  let at = 0;
  const take = (pattern) => {
    pattern.lastIndex = at;
    const m = pattern.exec(text);
    if (!m) return null;
    at = pattern.lastIndex;
    return m[0];
  };
  const fail = () => { throw new SyntaxError(`not JSON at character ${at}`); };
  const value = () => {
    take(TOKEN.space);
    const c = text[at];
    if (c === "{") {
      at++;
      const object = {};
      take(TOKEN.space);
      if (text[at] === "}") { at++; return object; }
      for (;;) {
        take(TOKEN.space);
        const key = take(TOKEN.string) ?? fail();
        take(TOKEN.space);
        if (text[at++] !== ":") fail();
        object[JSON.parse(key)] = value();
        take(TOKEN.space);
        const next = text[at++];
        if (next === "}") return object;
        if (next !== ",") fail();
      }
    }
    if (c === "[") {
      at++;
      const array = [];
      take(TOKEN.space);
      if (text[at] === "]") { at++; return array; }
      for (;;) {
        array.push(value());
        take(TOKEN.space);
        const next = text[at++];
        if (next === "]") return array;
        if (next !== ",") fail();
      }
    }
    if (c === "\"") return JSON.parse(take(TOKEN.string) ?? fail());
    for (const [word, literal] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, at)) { at += word.length; return literal; }
    }
    const number = take(TOKEN.number) ?? fail();
    return String(Number(number)) === number ? Number(number) : new Exact(number);
  };
  const result = value();
  take(TOKEN.space);
  if (at !== text.length) fail();
  return result;
}

// JSON.stringify(value, null, 2), writing each `Exact` number as its text.
function pretty(value, indent = "") {
  if (value instanceof Exact) return value.text;
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const inner = indent + "  ";
  const items = Array.isArray(value)
    ? value.map((item) => inner + pretty(item, inner))
    : Object.entries(value).map(([key, item]) => `${inner}${JSON.stringify(key)}: ${pretty(item, inner)}`);
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  return items.length ? `${open}\n${items.join(",\n")}\n${indent}${close}` : open + close;
}

// ---- the API ----

// The answer to a GET of the API, read by `read` (rows: `readExact`).
async function api(path, params, read = JSON.parse) {
  const url = path + "?" + new URLSearchParams(params).toString();
  const headers = {};
  const token = sessionStorage.getItem("logstamp-token");
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(url, { headers });
  if (response.status === 401) {
    await askToken();
    return api(path, params, read);
  }
  const body = read(await response.text());
  if (!response.ok || body.error) {
    const error = new Error(body.error ? body.error.message : `HTTP ${response.status}`);
    error.detail = body.error || {};
    throw error;
  }
  return body;
}

function askToken() {
  return new Promise((done) => {
    const dialog = $("token-dialog");
    dialog.addEventListener("close", () => {
      sessionStorage.setItem("logstamp-token", $("token").value.trim());
      done();
    }, { once: true });
    dialog.showModal();
  });
}

function baseParams() {
  const p = { from: iso(range.from), to: iso(range.to) };
  if (view.table) p.table = view.table;
  if (view.where.trim()) p.where = filterOf(view.where.trim());
  if (timeKind() === "event") p.time = "event";
  return p;
}

// The filter box holds a filter (`column OP value ...`) or, when it does not start like one,
// plain text to search for: the message (or the table's first text column) holding it in any
// case, which the server answers from its text filter.
function filterOf(text) {
  const table = catalog.tables.find((t) => t.name === (view.table || catalog.tables[0].name));
  const names = table.columns.map((c) => c.name.toLowerCase());
  const start = /^([A-Za-z_][A-Za-z0-9_]*)\s*(=|!=|<|>|like\b|contains\b|icontains\b)/i.exec(text);
  if (start && names.includes(start[1].toLowerCase())) return text;
  const texts = table.columns.filter((c) => c.type === "string" || c.type === "text");
  const column = texts.find((c) => c.name === "message") || texts[0];
  if (!column) return text;
  return `${column.name} icontains '${text.replace(/[\\']/g, (c) => "\\" + c)}'`;
}

// The histogram's parameters: counted by level, or by the table's first text column without one.
function histogramParams(extra) {
  const p = { ...baseParams(), ...extra };
  const table = currentTable();
  const countable = table.columns.filter((c) => ["string", "int", "uint", "bool"].includes(c.type));
  if (!countable.some((c) => c.name === "level") && countable.length) p.by = countable[0].name;
  return p;
}

// ---- drawing ----

function colour(key, keys) {
  if (key in COLOURS) return COLOURS[key];
  return OTHER_COLOURS[keys.indexOf(key) % OTHER_COLOURS.length];
}

const SVG = "http://www.w3.org/2000/svg";
let histogram = null;

function drawHistogram(h) {
  histogram = h;
  const svg = $("histogram");
  svg.replaceChildren();
  const width = 1000, height = 120;
  const n = h.bars.length || 1;
  const max = Math.max(1, ...h.bars.map((b) => Object.values(b.counts).reduce((a, c) => a + c, 0)));
  const w = width / n;
  h.bars.forEach((bar, i) => {
    let y = height;
    for (const key of h.keys) {
      const count = bar.counts[key] || 0;
      if (!count) continue;
      const barHeight = (count / max) * (height - 4);
      y -= barHeight;
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("class", "bar");
      rect.setAttribute("x", i * w + 0.5);
      rect.setAttribute("y", y);
      rect.setAttribute("width", Math.max(0.5, w - 1));
      rect.setAttribute("height", barHeight);
      rect.setAttribute("fill", colour(key, h.keys));
      rect.dataset.start = bar.start;
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${shortTime(new Date(bar.start * 1000))}  ${key || "(none)"}: ${count}`;
      rect.appendChild(title);
      svg.appendChild(rect);
    }
  });
  const total = $("total");
  total.textContent = `${h.total.toLocaleString("en")} lines`;
  total.dataset.total = h.total;
  $("interval").textContent = `per ${humanSeconds(h.interval)}`;
  $("legend").replaceChildren(...h.keys.map((key) => {
    const item = document.createElement("span");
    item.className = "legend-item";
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour(key, h.keys);
    item.append(swatch, key || "(none)");
    return item;
  }));
  $("axis-from").textContent = shortTime(range.from);
  $("axis-to").textContent = shortTime(range.to);
  svg.dataset.ready = String(generation);
}

function humanSeconds(s) {
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size && s % size === 0) return `${s / size}${unit}`;
  }
  return `${s}s`;
}

function lineRow(entry) {
  const { row } = entry;
  const tr = document.createElement("tr");
  tr.className = "line";
  tr.dataset.id = row.id;
  const level = row.level == null ? "" : String(row.level);
  const cells = [
    shortTime(lineTime(entry)),
    level,
    row.host ?? "",
    row.service ?? "",
    row.message ?? "",
  ];
  cells.forEach((text, i) => {
    const td = document.createElement("td");
    td.textContent = text;
    if (i === 1) td.className = `level level-${level.toLowerCase()}`;
    if (i === 4) td.className = "message";
    tr.appendChild(td);
  });
  const event = currentTable().event_time;
  if (timeKind() === "event") tr.title = `arrived ${shortTime(idTime(entry.id))}`;
  else if (event && row[event]) tr.title = `event time ${row[event]}`;
  tr.addEventListener("click", () => toggle(tr, entry));
  return tr;
}

function toggle(tr, entry) {
  const open = tr.nextElementSibling;
  if (open && open.classList.contains("detail")) {
    open.remove();
    view.open = "";
  } else {
    const detail = document.createElement("tr");
    detail.className = "detail";
    const td = document.createElement("td");
    td.colSpan = 5;
    const pre = document.createElement("pre");
    pre.textContent = pretty(entry.row);
    td.appendChild(pre);
    detail.appendChild(td);
    tr.after(detail);
    view.open = entry.row.id;
  }
  writeUrl(false);
}

// Puts rows on the page in ID order (newest first), each once. Past MAX_LINES the oldest lines
// leave the page, or with `older` (rows paged in below) the newest: the view then starts below
// them (`view.before`), and says so. Returns how many were added.
function addLines(rows, fresh, older = false) {
  const body = $("lines").tBodies[0];
  let added = 0;
  for (const row of rows) {
    if (shown.has(row.id)) continue;
    shown.add(row.id);
    const entry = { id: BigInt(row.id), row };
    // Newest first: find the first line older than this one.
    let at = lines.findIndex((l) => l.id < entry.id);
    if (at < 0) at = lines.length;
    lines.splice(at, 0, entry);
    const tr = lineRow(entry);
    if (fresh) tr.classList.add("new");
    const before = at + 1 < lines.length ? body.querySelector(`tr.line[data-id="${lines[at + 1].row.id}"]`) : null;
    body.insertBefore(tr, before);
    added++;
    if (view.open && view.open === row.id) toggle(tr, entry);
  }
  let newestDropped = 0;
  while (lines.length > MAX_LINES) {
    const dropped = older ? lines.shift() : lines.pop();
    const tr = body.querySelector(`tr.line[data-id="${dropped.row.id}"]`);
    if (tr) {
      if (tr.nextElementSibling && tr.nextElementSibling.classList.contains("detail")) tr.nextElementSibling.remove();
      tr.remove();
    }
    if (view.open === dropped.row.id) view.open = "";
    if (older) {
      // Paged past: never read again while this view lasts.
      shown.delete(dropped.row.id);
      view.before = dropped.row.id;
      newestDropped++;
    }
  }
  if (newestDropped) {
    status(`the page holds ${MAX_LINES.toLocaleString("en")} lines: the ${newestDropped} newest left it; the URL starts the view here`);
  }
  $("lines").dataset.count = lines.length;
  return added;
}

function clearLines() {
  lines = [];
  shown = new Set();
  $("lines").tBodies[0].replaceChildren();
  $("lines").dataset.count = 0;
  $("more").hidden = true;
}

// ---- loading a view ----

function showFilterError(error) {
  const box = $("filter-error");
  const input = $("filter");
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    input.classList.remove("invalid");
    input.removeAttribute("aria-invalid");
    return;
  }
  const at = error.detail && typeof error.detail.at === "number" ? error.detail.at : null;
  const message = error.message.replace(/^where: /, "");
  box.textContent = at === null ? message : `${" ".repeat(at)}^ ${message}`;
  box.hidden = false;
  input.classList.add("invalid");
  input.setAttribute("aria-invalid", "true");
  if (at !== null) input.setSelectionRange(at, Math.max(at + 1, input.value.length));
}

function status(text) {
  $("status").textContent = text;
}

// Loads the view. `push`: a new view the person chose (a history entry), which starts at the
// newest lines; without it (the page opened, back or forward) the URL's view is reproduced.
async function load(push) {
  const mine = ++generation;
  stopLive();
  if (push) view.before = "";
  $("range-error").textContent = "";
  try {
    range = await resolveRange();
  } catch (e) {
    if (mine === generation) $("range-error").textContent = e.message;
    return;
  }
  if (mine !== generation) return;
  if (view.live && !endsNow()) view.live = false;
  // Live mode follows the newest lines: a view that starts below them is not live.
  if (view.live) view.before = "";
  writeUrl(push);
  syncControls();
  clearLines();
  nextCursor = null;
  status("loading…");
  try {
    const first = { ...baseParams(), limit: PAGE };
    if (view.before) first.cursor = view.before;
    const [h, page] = await Promise.all([
      api("/api/histogram", histogramParams({})),
      api("/api/rows", first, readExact),
    ]);
    if (mine !== generation) return;
    showFilterError(null);
    drawHistogram(h);
    addLines(page.rows, false);
    nextCursor = page.next;
    $("more").hidden = !nextCursor;
    status(page.rows.length ? "" : "no lines in this range");
    await pageToOpen(mine);
    if (mine !== generation) return;
    $("lines").dataset.ready = String(mine);
  } catch (e) {
    if (mine !== generation) return;
    if (e.detail && e.detail.parameter === "where") {
      showFilterError(e);
      status("");
    } else {
      status(e.message);
    }
    return;
  }
  if (view.live) startLive(mine);
}

// "Older lines": the next page along the cursor. Past MAX_LINES the newest lines leave the page
// (and live mode, which follows them, stops), so paging back goes on through the whole range.
async function more() {
  if (!nextCursor) return;
  const mine = generation;
  const page = await api("/api/rows", { ...baseParams(), limit: PAGE, cursor: nextCursor }, readExact);
  if (mine !== generation) return;
  if (view.live && lines.length + page.rows.length > MAX_LINES) {
    view.live = false;
    stopLive();
    syncControls();
  }
  addLines(page.rows, false, true);
  nextCursor = page.next;
  $("more").hidden = !nextCursor;
  writeUrl(false);
  $("lines").dataset.paged = String(Number($("lines").dataset.paged || 0) + 1);
}

// Pages until the line the URL opens is on the page (opening it), as far as the page holds
// lines: the view it was shared from had paged as far.
async function pageToOpen(mine) {
  const oldest = () => lines.length ? lines[lines.length - 1].id : null;
  for (let pages = 0; view.open && !shown.has(view.open) && nextCursor && pages < MAX_LINES / PAGE; pages++) {
    if (oldest() !== null && BigInt(view.open) > oldest()) break;
    await more();
    if (mine !== generation) return;
  }
  if (view.open && !shown.has(view.open)) status(`line ${view.open} is not in this view`);
}

// ---- live mode ----
//
// IDs are stamped when a worker reads a record and committed when its batch is, so across
// workers rows commit out of ID order: a row with a lower ID can become visible after one with
// a higher ID was shown, and "IDs above the last one seen" would skip it. Instead each refresh
// reads again every row whose ID time lies in a trailing window (serve.live_window, which must
// exceed the time from stamping to commit) up to as far ahead of now as IDs may run
// (id.mark_window), and shows those not on the page yet. A row becomes visible at its commit,
// at most the window after its ID time, so some refresh inside that window reads it: none is
// skipped; the set of IDs on the page keeps any from being shown twice.

function stopLive() {
  if (liveTimer) clearTimeout(liveTimer);
  liveTimer = null;
}

function startLive(mine) {
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await refreshLive(mine);
    } catch (e) {
      status(`live: ${e.message}`);
    }
    if (mine === generation) liveTimer = setTimeout(tick, LIVE_EVERY_MS);
  };
  liveTimer = setTimeout(tick, LIVE_EVERY_MS);
}

async function refreshLive(mine) {
  const now = new Date();
  const window = catalog.live.window_seconds * 1000;
  const ahead = catalog.live.ahead_seconds * 1000 + 1000;
  range = await resolveRange();
  if (mine !== generation) return;
  const windowFrom = new Date(Math.max(range.from.getTime(), now.getTime() - window));
  // Rows are followed by ID time, which tells when no more can appear, whatever time the view
  // is in; their event times may be anywhere.
  const params = { ...baseParams(), from: iso(windowFrom), to: iso(new Date(now.getTime() + ahead)), order: "oldest", limit: catalog.limits.max_rows };
  delete params.time;
  let added = 0;
  let cursor = null;
  for (let page = 0; page < LIVE_MAX_PAGES; page++) {
    const answer = await api("/api/rows", cursor ? { ...params, cursor } : params, readExact);
    if (mine !== generation) return;
    added += addLines(answer.rows, true);
    cursor = answer.next;
    if (!cursor) break;
  }
  // IDs older than the window are never read again: only those still on the page are kept.
  const onPage = new Set(lines.map((l) => l.row.id));
  for (const id of shown) {
    if (!onPage.has(id) && idTime(BigInt(id)) < windowFrom) shown.delete(id);
  }
  if (cursor) status(`live: more than ${LIVE_MAX_PAGES * catalog.limits.max_rows} lines in the last ${window / 1000} s; narrow the filter to follow them all`);
  else status(`live: ${added} new line${added === 1 ? "" : "s"} at ${shortTime(now)}`);
  const h = await api("/api/histogram", histogramParams({ to: iso(new Date(now.getTime() + ahead)) }));
  if (mine !== generation) return;
  range = { from: range.from, to: new Date(now.getTime() + ahead) };
  drawHistogram(h);
  $("lines").dataset.live = String(Number($("lines").dataset.live || 0) + 1);
}

// ---- controls ----

function syncControls() {
  const preset = endsNow() && [...$("preset").options].some((o) => o.value === view.from);
  $("preset").value = preset ? view.from : "absolute";
  $("absolute").hidden = $("preset").value !== "absolute";
  $("from").value = preset ? iso(range.from) : view.from;
  $("to").value = preset ? iso(range.to) : view.to;
  $("filter").value = view.where;
  $("live").checked = view.live;
  $("table").value = view.table;
  $("time-switch").hidden = !hasEventTime();
  $("time").value = timeKind();
  $("time-heading").textContent = timeKind() === "event" ? "event time (UTC)" : "arrival time (UTC)";
}

function zoom(fromSeconds, toSeconds) {
  const from = Math.max(fromSeconds * 1000, range.from.getTime());
  const to = Math.min(toSeconds * 1000, range.to.getTime());
  if (to <= from) return;
  view.from = iso(new Date(Math.floor(from / 1000) * 1000));
  view.to = iso(new Date(Math.ceil(to / 1000) * 1000));
  view.live = false;
  load(true);
}

function histogramSecondsAt(event) {
  const svg = $("histogram");
  const box = svg.getBoundingClientRect();
  const x = Math.min(Math.max(event.clientX - box.left, 0), box.width);
  const h = histogram;
  const first = h.bars.length ? h.bars[0].start : range.from.getTime() / 1000;
  const span = h.bars.length * h.interval;
  return { x, seconds: first + (x / box.width) * span, box };
}

function wireHistogram() {
  const svg = $("histogram");
  let dragFrom = null;
  let selection = null;
  svg.addEventListener("mousedown", (e) => {
    if (!histogram) return;
    dragFrom = histogramSecondsAt(e);
    e.preventDefault();
  });
  window.addEventListener("mousemove", (e) => {
    if (!dragFrom) return;
    const at = histogramSecondsAt(e);
    if (!selection) {
      selection = document.createElementNS(SVG, "rect");
      selection.setAttribute("class", "selection");
      selection.setAttribute("y", 0);
      selection.setAttribute("height", 120);
      svg.appendChild(selection);
    }
    const scale = 1000 / at.box.width;
    selection.setAttribute("x", Math.min(dragFrom.x, at.x) * scale);
    selection.setAttribute("width", Math.abs(at.x - dragFrom.x) * scale);
  });
  window.addEventListener("mouseup", (e) => {
    if (!dragFrom) return;
    const start = dragFrom;
    dragFrom = null;
    if (selection) selection.remove();
    selection = null;
    const end = histogramSecondsAt(e);
    if (Math.abs(end.x - start.x) < 4) {
      // A click: the bar under it.
      const bar = Math.floor((start.seconds - histogram.bars[0].start) / histogram.interval);
      const barStart = histogram.bars[0].start + bar * histogram.interval;
      zoom(barStart, barStart + histogram.interval);
    } else {
      zoom(Math.min(start.seconds, end.seconds), Math.max(start.seconds, end.seconds));
    }
  });
}

function wireControls() {
  $("preset").addEventListener("change", () => {
    const value = $("preset").value;
    $("absolute").hidden = value !== "absolute";
    if (value !== "absolute") {
      view.from = value;
      view.to = "now";
      load(true);
    }
  });
  const applyAbsolute = () => {
    if ($("preset").value === "absolute") {
      view.from = $("from").value.trim();
      view.to = $("to").value.trim();
      view.live = false;
    }
    view.where = $("filter").value;
    load(true);
  };
  $("apply").addEventListener("click", applyAbsolute);
  for (const id of ["from", "to"]) {
    $(id).addEventListener("keydown", (e) => { if (e.key === "Enter") applyAbsolute(); });
  }
  $("filter").addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      view.where = $("filter").value;
      load(true);
    }
  });
  $("filter").addEventListener("input", () => showFilterError(null));
  $("live").addEventListener("change", () => {
    view.live = $("live").checked;
    if (view.live && !endsNow()) {
      view.from = "now-15m";
      view.to = "now";
    }
    load(true);
  });
  $("time").addEventListener("change", () => {
    view.time = $("time").value;
    load(true);
  });
  $("table").addEventListener("change", () => {
    view.table = $("table").value;
    load(true);
  });
  $("more").addEventListener("click", more);
  window.addEventListener("popstate", () => {
    readUrl();
    load(false);
  });
}

async function start() {
  readUrl();
  try {
    catalog = await api("/api/tables", {});
  } catch (e) {
    status(e.message);
    return;
  }
  epoch = BigInt(catalog.id.epoch_unix_seconds);
  $("table").replaceChildren(...catalog.tables.map((t) => new Option(t.name, t.name)));
  if (!view.table) view.table = catalog.tables[0].name;
  wireControls();
  wireHistogram();
  load(false);
}

start();
