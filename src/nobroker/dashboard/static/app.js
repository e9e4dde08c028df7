// The nobroker dashboard's page: one script, no framework, nothing fetched but our API.
//
// Rules: every piece of text from the server (queue names, job ids, payloads,
// errors) goes into the DOM through textContent or an attribute set with
// setAttribute, never through an HTML parser, so nothing a job carries is
// ever markup. Changes are POSTs with the token in the X-Nobroker-Token header;
// the token comes from the URL's #token=... (then removed from the address bar)
// or the token field, and lives in sessionStorage for this tab only.
// Mounted in a Django site (nobroker.django.urls), the page says so in its <meta>
// tags: its path prefix (every URL below is under it), and Django's CSRF token,
// sent as X-CSRFToken instead of ours; the user is Django's, so no token field.
"use strict";

function meta(name) {
  const tag = document.querySelector('meta[name="' + name + '"]');
  return tag ? tag.getAttribute("content") : null;
}
const BASE = (meta("nobroker-base") || "/").replace(/\/$/, "");  // "" when standalone
const CSRF = meta("nobroker-csrf");

const TOKEN_KEY = "nobroker-dashboard-token";
const PAGE = 50;
const STATES = ["", "pending", "leased", "waiting", "dead"];
const SERIES = [["enqueued", "enqueued"], ["succeeded", "succeeded"],
                ["dead_lettered", "dead-lettered"], ["retried", "retried"]];

let events = null;        // the EventSource of the current view
let view = null;          // {kind, queue, job, state, offset}
let readonly = false;

// -- small helpers ------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

function head(labels, numeric) {
  return el("thead", {}, el("tr", {}, ...labels.map((label, i) =>
    el("th", {class: numeric.includes(i) ? "num" : null}, label))));
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

function fmt(n) { return n === null || n === undefined ? "\u2013" : Number(n).toLocaleString("en-US"); }

function age(seconds) {
  if (seconds === null || seconds === undefined) return "\u2013";
  if (seconds < 60) return seconds.toFixed(1) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
  if (seconds < 86400) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function when(t) {
  if (t === null || t === undefined) return "\u2013";
  return new Date(t * 1000).toISOString().replace("T", " ").replace("Z", " UTC");
}

function bytes(n) {
  if (n === null || n === undefined) return "\u2013";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + " MiB";
  return (n / (1 << 30)).toFixed(2) + " GiB";
}

function short(value, width) {
  let text = JSON.stringify(value);
  if (text === undefined) text = "";
  return text.length <= width ? text : text.slice(0, width - 1) + "\u2026";
}

// A job's progress (current_job().progress): a bar, the percentage and its note.
function progressOf(progress) {
  const percent = (progress.fraction * 100).toFixed(progress.fraction < 0.1 ? 1 : 0) + "%";
  return el("span", {class: "progress", "data-fraction": progress.fraction},
    el("progress", {max: "1", value: String(progress.fraction)}), " " + percent,
    progress.note ? " \u2013 " + progress.note : "");
}

// What a waiting job waits for: links to those jobs, in the order given.
function waitsFor(name, ids) {
  const links = el("span", {class: "mono waits-for"}, "after ");
  ids.forEach((id, i) => links.append(i ? ", " : "",
    el("a", {href: jobHref(name, id), "data-nav": true}, id)));
  return links;
}

function queueHref(name) { return BASE + "/q/" + encodeURIComponent(name); }
function jobHref(name, id) { return queueHref(name) + "/job/" + encodeURIComponent(id); }
function apiQueue(name) { return BASE + "/api/queues/" + encodeURIComponent(name); }

function flash(text, ok) {
  const box = document.getElementById("flash");
  const item = el("div", {class: ok ? "ok" : "err"}, text);
  box.prepend(item);
  while (box.childNodes.length > 4) box.removeChild(box.lastChild);
  setTimeout(() => item.remove(), ok ? 6000 : 15000);
}

// -- talking to the server ------------------------------------------------------

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function takeTokenFromUrl() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
}

async function getJSON(path) {
  const response = await fetch(path, {headers: {"Accept": "application/json"}});
  const body = await response.json().catch(() => ({error: "the answer is not JSON"}));
  if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
  return body;
}

async function change(path, body, doneText) {
  const headers = {"Content-Type": "application/json"};
  if (CSRF) headers["X-CSRFToken"] = CSRF;
  else if (token()) headers["X-Nobroker-Token"] = token();
  let response, answer;
  try {
    response = await fetch(path, {method: "POST", headers, body: JSON.stringify(body || {})});
    answer = await response.json().catch(() => ({error: "the answer is not JSON"}));
  } catch (err) {
    flash("refused: " + err.message, false);
    return null;
  }
  if (!response.ok) {
    flash("refused: " + (answer.error || ("HTTP " + response.status)), false);
    return null;
  }
  flash(doneText(answer), true);
  refresh();
  return answer;
}

function confirmed(text) { return window.confirm(text); }

// -- routing --------------------------------------------------------------------

function parseLocation() {
  const path = location.pathname.startsWith(BASE + "/") ? location.pathname.slice(BASE.length)
                                                        : location.pathname;
  const parts = path.split("/").slice(1).map(decodeURIComponent);
  const params = new URLSearchParams(location.search);
  if (parts[0] === "q" && parts[1] && parts[2] === "job" && parts[3] !== undefined)
    return {kind: "job", queue: parts[1], job: parts[3]};
  if (parts[0] === "q" && parts[1])
    return {kind: "queue", queue: parts[1], state: params.get("state") || "",
            offset: Math.max(0, parseInt(params.get("offset") || "0", 10) || 0)};
  return {kind: "overview"};
}

function go(href) {
  history.pushState(null, "", href);
  route();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest ? event.target.closest("a[data-nav]") : null;
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  go(link.getAttribute("href"));
});
window.addEventListener("popstate", () => route());

// The stream's first event is sent at once and carries everything a page shows, so
// a page draws from it; `fallback` fetches the same by hand if it is slow to come.
function listen(path, onUpdate, fallback) {
  if (events) events.close();
  const live = document.getElementById("live");
  const source = new EventSource(path);
  events = source;
  let updated = false;
  // A polled stream (a dashboard mounted in Django) ends after each update, by design:
  // its end is no break while every poll brings an update.
  let polled = false;
  let fresh = false;  // an update came since the stream last ended
  const timer = setTimeout(() => { if (!updated && events === source) fallback(); }, 1500);
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
  source.addEventListener("poll", () => { polled = true; });
  source.addEventListener("error", () => {
    if (!(polled && fresh)) {
      live.textContent = "reconnecting";
      live.className = "live";
    }
    fresh = false;
    if (!updated) { clearTimeout(timer); if (events === source) fallback(); updated = true; }
  });
  source.addEventListener("update", (message) => {
    updated = true;
    fresh = true;
    clearTimeout(timer);
    onUpdate(JSON.parse(message.data));
  });
}

// <html data-drawn="MS">: when the current view was first fully drawn, in ms since
// navigation started, by the browser's clock (tools/bench_dashboard.py reads it).
let drawnParts = new Set();
function drawn(part, needed) {
  drawnParts.add(part);
  if (!document.documentElement.dataset.drawn && needed.every((p) => drawnParts.has(p)))
    document.documentElement.dataset.drawn = String(Math.round(performance.now()));
}

function route() {
  view = parseLocation();
  drawnParts = new Set();
  delete document.documentElement.dataset.drawn;
  const app = document.getElementById("app");
  clear(app);
  if (view.kind === "overview") overview(app);
  else if (view.kind === "queue") queuePage(app);
  else jobPage(app);
}

function refresh() {
  if (view && view.kind === "queue") loadJobs();
  if (view && view.kind === "job") loadJob();
}

// -- the overview -----------------------------------------------------------------

function overview(app) {
  document.title = "nobroker dashboard";
  app.append(el("h1", {}, "Queues"));
  const holder = el("div", {id: "queues"}, el("p", {class: "muted"}, "loading\u2026"));
  app.append(holder, el("p", {class: "note"},
    "Counts update live. /metrics serves the same numbers to Prometheus."));
  const draw = (data) => {
    header(data);
    clear(holder);
    if (!data.queues.length) {
      holder.append(el("p", {class: "muted"}, "No queue in this directory yet."));
      return;
    }
    const rows = data.queues.map((q) => q.error
      ? el("tr", {}, el("td", {class: "mono"}, q.name), el("td", {colspan: 7}, "error: " + q.error))
      : el("tr", {"data-queue": q.name},
          el("td", {class: "mono"}, el("a", {href: queueHref(q.name), "data-nav": true}, q.name)),
          el("td", {class: "num", "data-count": "pending"}, fmt(q.stats.pending)),
          el("td", {class: "num", "data-count": "leased"}, fmt(q.stats.leased)),
          el("td", {class: "num", "data-count": "dead"}, fmt(q.stats.dead)),
          el("td", {class: "num", "data-count": "done"}, fmt(q.stats.done)),
          el("td", {class: "num"}, age(q.oldest_pending_age)),
          el("td", {class: "num"}, bytes(q.stats.log_bytes)),
          el("td", {}, q.paused ? el("span", {class: "badge paused"}, "paused")
                                : el("span", {class: "muted"}, "running"))));
    holder.append(el("table", {},
      head(["queue", "pending", "leased", "dead", "done", "oldest pending", "log", "state"],
           [1, 2, 3, 4, 5, 6]),
      el("tbody", {}, ...rows)));
  };
  listen(BASE + "/api/events", (event) => draw(event.overview),
         () => getJSON(BASE + "/api/overview").then(draw).catch((err) => flash(err.message, false)));
}

function header(overviewData) {
  readonly = overviewData.readonly;
  document.getElementById("directory").textContent = overviewData.directory;
  const mode = document.getElementById("mode");
  mode.hidden = !readonly;
  mode.textContent = readonly ? "read-only" : "";
  document.getElementById("token-form").hidden = readonly || CSRF !== null;
}

// -- a queue ----------------------------------------------------------------------

function queuePage(app) {
  const name = view.queue;
  document.title = name + " \u2013 nobroker";
  const title = el("h1", {}, el("span", {class: "mono", id: "queue-name"}, name),
                   el("span", {id: "paused-badge", class: "badge paused", hidden: true}, "paused"));
  const cards = el("div", {class: "cards", id: "cards"});
  const controls = el("div", {class: "toolbar", id: "queue-controls"});
  const chart = el("div", {class: "chart", id: "chart"});
  const limits = el("div", {id: "limits"});
  const compaction = el("div", {id: "compaction"});
  const search = el("form", {class: "toolbar", id: "search"},
    el("input", {id: "search-id", placeholder: "find a job by id", spellcheck: "false",
                 autocomplete: "off"}),
    el("button", {type: "submit"}, "find"));
  search.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = document.getElementById("search-id").value;
    if (!id) return;
    getJSON(apiQueue(name) + "/jobs/" + encodeURIComponent(id))
      .then(() => go(jobHref(name, id)))
      .catch((err) => flash(err.message, false));
  });
  const tabs = el("div", {class: "toolbar tabs", id: "tabs"},
    ...STATES.map((state) => el("button", {type: "button", "data-state": state,
      class: state === view.state ? "on" : null,
      onclick: () => go(queueHref(name) + (state ? "?state=" + state : ""))},
      state || "all")));
  const dlq = el("div", {class: "toolbar", id: "dlq-controls"});
  const jobs = el("div", {id: "jobs"}, el("p", {class: "muted"}, "loading\u2026"));
  app.append(el("p", {}, el("a", {href: BASE + "/", "data-nav": true}, "\u2190 all queues")),
             title, cards, controls, limits,
             el("h2", {}, "Last 15 minutes"), chart,
             el("h2", {}, "Jobs"), search, tabs, dlq, jobs,
             el("h2", {}, "Compaction"), compaction);
  const draw = (event) => {
    header(event.overview);
    if (event.error) { flash(event.error, false); return; }
    drawQueue(event.queue);
    drawChart(chart, event.series);
    drawn("queue", ["queue", "jobs"]);
  };
  // Two requests at once draw the page: its jobs, and the event stream (whose first
  // event holds the counts, the chart and the header).
  lastCounts = "";
  loadJobs();
  listen(BASE + "/api/events?queue=" + encodeURIComponent(name), draw, () =>
    Promise.all([getJSON(apiQueue(name)), getJSON(apiQueue(name) + "/series?step=10"),
                 getJSON(BASE + "/api/overview")])
      .then(([summary, series, overviewData]) =>
        draw({overview: overviewData, queue: summary, series: series}))
      .catch((err) => flash(err.message, false)));
}

let lastCounts = "";

function drawQueue(summary) {
  const s = summary.stats;
  const f = summary.features;
  document.getElementById("paused-badge").hidden = !summary.paused;
  const cards = document.getElementById("cards");
  clear(cards);
  const card = (label, value, key) => el("div", {class: "card", "data-count": key},
    el("div", {class: "n"}, value), el("div", {class: "l"}, label));
  cards.append(card("pending", fmt(s.pending), "pending"), card("leased", fmt(s.leased), "leased"),
               card("waiting", fmt(s.waiting), "waiting"), card("dead", fmt(s.dead), "dead"),
               card("done", fmt(s.done), "done"),
               card("oldest pending", age(summary.oldest_pending_age), "oldest"));
  const controls = document.getElementById("queue-controls");
  clear(controls);
  if (f.pause) {
    controls.append(summary.paused
      ? el("button", {type: "button", id: "resume", onclick: () =>
          change(apiQueue(summary.name) + "/resume", {}, () => "resumed " + summary.name)}, "resume")
      : el("button", {type: "button", id: "pause", onclick: () =>
          change(apiQueue(summary.name) + "/pause", {}, () => "paused " + summary.name)}, "pause"));
  } else {
    controls.append(el("span", {class: "note"},
      "pause/resume: not offered by this queue's backend yet."));
  }
  const dlq = document.getElementById("dlq-controls");
  clear(dlq);
  dlq.append(el("span", {class: "muted"}, "dead-letter queue: " + fmt(s.dead) + " job(s)"),
    el("button", {type: "button", id: "requeue-all", disabled: s.dead === 0, onclick: () => {
      if (confirmed("Requeue every dead job of " + summary.name + "?"))
        change(apiQueue(summary.name) + "/requeue", {id: null}, (a) => "requeued " + a.requeued + " job(s)");
    }}, "requeue all"));
  if (f.delete_dead) {
    dlq.append(el("button", {type: "button", class: "danger", id: "delete-all", disabled: s.dead === 0,
      onclick: () => {
        if (confirmed("Delete every dead job of " + summary.name + "? This cannot be undone."))
          change(apiQueue(summary.name) + "/delete-dead", {id: null}, (a) => "deleted " + a.deleted + " job(s)");
      }}, "delete all"));
  } else {
    dlq.append(el("span", {class: "note"}, "delete: not offered by this queue's backend yet."));
  }
  const comp = document.getElementById("compaction");
  clear(comp);
  if (f.compaction) {
    const reclaim = s.live_bytes === undefined ? null : Math.max(0, s.log_bytes - s.live_bytes);
    comp.append(el("div", {class: "toolbar"},
      el("span", {}, "log generation " + s.generation + ": " + bytes(s.log_bytes)),
      el("span", {class: "muted", id: "reclaim"}, reclaim === null ? ""
        : "compaction would reclaim about " + bytes(reclaim)),
      el("button", {type: "button", id: "compact", onclick: () =>
        change(apiQueue(summary.name) + "/compact", {}, (a) => "compacted: " +
          bytes(a.compaction.bytes_before) + " \u2192 " + bytes(a.compaction.bytes_after))},
        "compact now")));
  } else {
    comp.append(el("p", {class: "note"}, "This queue's backend does not compact."));
  }
  drawLimits(summary.limits || []);
  const counts = [s.pending, s.leased, s.waiting, s.dead].join(",");
  if (lastCounts && counts !== lastCounts) loadJobs();  // the first draw has its own load
  lastCounts = counts;
}

// Each rate and concurrency key: in use / its limit (unknown where only the code that
// declared it knows it), a full one marked; nothing at all for a queue without limits.
function drawLimits(uses) {
  const holder = document.getElementById("limits");
  clear(holder);
  if (!uses.length) return;
  const rows = uses.map((u) => {
    const full = u.limit !== null && u.used >= u.limit;
    const key = u.kind === "rate" && u.key === "" ? "(the queue)"
      : u.value === null ? u.key : u.key + " = " + u.value;
    return el("tr", {"data-limit": u.kind + ":" + u.key + (u.value === null ? "" : ":" + u.value),
                     class: full ? "full" : null},
      el("td", {}, u.kind), el("td", {class: "mono"}, key),
      el("td", {class: "num", "data-use": ""}, fmt(u.used) + " / " + fmt(u.limit)),
      el("td", {}, u.period === null ? "at once" : "per " + age(u.period)),
      el("td", {}, u.opens_at === null ? (full ? "when a holder finishes" : "")
        : "next start " + when(u.opens_at)));
  });
  holder.append(el("h2", {}, "Limits"),
    el("table", {}, head(["limit", "key", "in use / limit", "window", "full until"], [2]),
       el("tbody", {}, ...rows)));
}

function drawChart(holder, series) {
  clear(holder);
  const width = Math.max(300, (holder.clientWidth || 916) - 16), height = 200, pad = 28;
  const shown = SERIES.filter(([key]) => Array.isArray(series[key]));
  const count = shown.length ? series[shown[0][0]].length : 1;
  let top = 0;
  for (const [key] of shown) for (const v of series[key]) top = Math.max(top, v);
  top = Math.max(4, Math.ceil(top / 4) * 4);  // four whole-number grid steps
  const plot = svg("svg", {viewBox: `0 0 ${width} ${height}`, role: "img",
                           "aria-label": "jobs per interval"});
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + (height - pad) * i / 4;
    plot.append(svg("line", {x1: pad, x2: width, y1: y, y2: y, stroke: "#e3e7eb"}));
    const label = svg("text", {x: 2, y: y + 4, "font-size": 10, fill: "#66707c"});
    label.textContent = fmt(top * (4 - i) / 4);
    plot.append(label);
  }
  const x = (i) => pad + (width - pad) * (count <= 1 ? 0 : i / (count - 1));
  const y = (v) => pad / 2 + (height - pad) * (1 - v / top);
  const colors = {enqueued: "#2d6cdf", succeeded: "#1f9d55", dead_lettered: "#d64545",
                  retried: "#c58a00"};
  const legend = el("div", {class: "legend"});
  for (const [key, label] of shown) {
    const values = series[key];
    const sum = values.reduce((a, b) => a + b, 0);
    plot.append(svg("polyline", {fill: "none", stroke: colors[key], "stroke-width": 2,
      "data-series": key, "data-sum": sum,
      points: values.map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1)).join(" ")}));
    legend.append(el("span", {class: "s-" + key, "data-series": key},
                     label + ": " + fmt(sum)));
  }
  const axis = svg("text", {x: width - 4, y: height - 2, "font-size": 10, fill: "#66707c",
                            "text-anchor": "end"});
  axis.textContent = "now (one point per " + series.step + " s)";
  const start = svg("text", {x: pad, y: height - 2, "font-size": 10, fill: "#66707c"});
  start.textContent = "\u2212" + Math.round((series.end - series.start) / 60) + " min";
  plot.append(axis, start);
  holder.append(plot, legend);
  const missing = SERIES.filter(([key]) => !Array.isArray(series[key])).map(([, l]) => l);
  if (missing.length)
    holder.append(el("p", {class: "note"}, "Not counted by this queue's backend: " +
                     missing.join(", ") + "."));
}

let jobsAsked = 0;  // only the answer to the latest request is drawn

function loadJobs() {
  if (!view || view.kind !== "queue") return;
  const name = view.queue, state = view.state, offset = view.offset, asked = ++jobsAsked;
  const query = "?limit=" + PAGE + "&offset=" + offset + (state ? "&state=" + state : "");
  getJSON(apiQueue(name) + "/jobs" + query)
    .then((page) => {
      if (asked !== jobsAsked) return;
      drawJobs(page, page.features);
      drawn("jobs", ["queue", "jobs"]);
    })
    .catch((err) => flash(err.message, false));
}

function drawJobs(page, f) {
  const holder = document.getElementById("jobs");
  if (!holder) return;
  clear(holder);
  const name = page.queue;
  const rows = page.jobs.map((job) => {
    const actions = el("td", {});
    if (job.state === "dead") {
      actions.append(el("button", {type: "button", "data-action": "requeue", onclick: () =>
        change(apiQueue(name) + "/requeue", {id: job.id}, (a) => "requeued " + a.requeued + " job(s)")},
        "requeue"));
      if (f.delete_dead) actions.append(" ", el("button", {type: "button", class: "danger",
        "data-action": "delete", onclick: () => {
          if (confirmed("Delete dead job " + job.id + "?"))
            change(apiQueue(name) + "/delete-dead", {id: job.id}, (a) => "deleted " + a.deleted + " job(s)");
        }}, "delete"));
    } else if (f.cancel) {
      actions.append(el("button", {type: "button", class: "danger", "data-action": "cancel",
        onclick: () => {
          if (confirmed("Cancel job " + job.id + "?"))
            change(apiQueue(name) + "/cancel", {id: job.id}, (a) => a.cancelled ? "cancelled" : "not cancelled");
        }}, "cancel"));
    }
    return el("tr", {"data-job": job.id},
      el("td", {class: "mono"}, el("a", {href: jobHref(name, job.id), "data-nav": true}, job.id)),
      el("td", {}, el("span", {class: "state " + job.state}, job.state)),
      el("td", {class: "num"}, job.priority),
      el("td", {class: "num"}, job.attempts + "/" + job.max_attempts),
      el("td", {"data-progress": ""}, job.state === "waiting" && job.waiting_for.length
        ? waitsFor(name, job.waiting_for) : job.progress ? progressOf(job.progress) : ""),
      el("td", {}, when(job.enqueued_at)),
      el("td", {class: "mono"}, short(job.payload, 80)),
      el("td", {class: "mono"}, job.last_error || ""),
      actions);
  });
  const first = page.total ? page.offset + 1 : 0;
  const last = page.offset + page.jobs.length;
  const base = queueHref(name) + "?" + (page.state ? "state=" + page.state + "&" : "");
  const pager = el("div", {class: "pager"},
    el("button", {type: "button", id: "prev", disabled: page.offset === 0,
      onclick: () => go(base + "offset=" + Math.max(0, page.offset - PAGE))}, "\u2190 newer"),
    el("span", {id: "page-info"}, "jobs " + fmt(first) + "\u2013" + fmt(last) + " of " + fmt(page.total)),
    el("button", {type: "button", id: "next", disabled: last >= page.total,
      onclick: () => go(base + "offset=" + (page.offset + PAGE))}, "later \u2192"));
  if (!f.cancel) pager.append(el("span", {class: "note"}, "cancel: not offered by this queue's backend yet."));
  holder.append(pager, el("table", {id: "job-table"},
    head(["id", "state", "priority", "attempts", "progress", "enqueued", "payload", "last error",
          ""], [2, 3]),
    el("tbody", {}, ...rows)));
  if (!rows.length) holder.append(el("p", {class: "muted"}, "No job here."));
}

// -- a job --------------------------------------------------------------------------

function jobPage(app) {
  document.title = view.job + " \u2013 nobroker";
  app.append(el("p", {}, el("a", {href: queueHref(view.queue), "data-nav": true},
                            "\u2190 queue " + view.queue)),
             el("h1", {}, "job ", el("span", {class: "mono", id: "job-id"}, view.job)),
             el("div", {id: "job"}, el("p", {class: "muted"}, "loading\u2026")),
             el("h2", {}, "Records in the log"), el("div", {id: "records"}));
  getJSON(BASE + "/api/overview").then(header).catch(() => {});
  loadJob();
  if (events) { events.close(); events = null; }
  const live = document.getElementById("live");
  live.textContent = "not live: reload to refresh";
  live.className = "live";
}

function loadJob() {
  const name = view.queue, id = view.job;
  getJSON(apiQueue(name) + "/jobs/" + encodeURIComponent(id)).then((answer) => {
    drawJob(answer);
    followJob(answer);
    if (answer.features.inspection) loadRecords(name, id);
    else {
      const holder = document.getElementById("records");
      clear(holder);
      holder.append(el("p", {class: "note"}, "This queue's backend has no raw log to show."));
    }
  }).catch((err) => {
    const holder = document.getElementById("job");
    clear(holder);
    holder.append(el("p", {class: "err"}, err.message));
  });
}

function drawJob(answer) {
  const job = answer.job, f = answer.features, name = answer.queue;
  const holder = document.getElementById("job");
  clear(holder);
  const fields = el("dl", {class: "fields"});
  const add = (label, value, mono) => fields.append(el("dt", {}, label),
    el("dd", {class: mono ? "mono" : null, "data-field": label}, value));
  add("state", el("span", {class: "state " + job.state}, job.state));
  add("attempts", job.attempts + " of " + job.max_attempts);
  add("priority", job.priority);
  add("enqueued", when(job.enqueued_at));
  add("available", when(job.available_at));
  if (job.lease_expires_at) add("lease ends", when(job.lease_expires_at));
  if (job.finished_at) add("finished", when(job.finished_at));
  add("last error", job.last_error || "\u2013", true);
  if (job.waiting_for.length) add("waits for", waitsFor(name, job.waiting_for));
  add("progress", job.progress ? progressOf(job.progress) : "\u2013");
  holder.append(fields);
  if (answer.workflow) holder.append(workflowPart(name, answer.workflow));
  const actions = el("div", {class: "toolbar"});
  if (job.state === "dead") {
    actions.append(el("button", {type: "button", id: "job-requeue", onclick: () =>
      change(apiQueue(name) + "/requeue", {id: job.id}, (a) => "requeued " + a.requeued + " job(s)")},
      "requeue"));
    if (f.delete_dead) actions.append(el("button", {type: "button", class: "danger", id: "job-delete",
      onclick: () => {
        if (confirmed("Delete dead job " + job.id + "?"))
          change(apiQueue(name) + "/delete-dead", {id: job.id}, (a) => "deleted " + a.deleted + " job(s)");
      }}, "delete"));
  } else if (["pending", "leased", "waiting"].includes(job.state) && f.cancel) {
    actions.append(el("button", {type: "button", class: "danger", id: "job-cancel", onclick: () => {
      if (confirmed("Cancel job " + job.id + "?"))
        change(apiQueue(name) + "/cancel", {id: job.id}, (a) => a.cancelled ? "cancelled" : "not cancelled");
    }}, "cancel"));
  }
  holder.append(actions,
    el("h2", {}, "Metadata"), el("pre", {id: "meta"},
      Object.keys(job.meta || {}).length ? JSON.stringify(job.meta, null, 2) : "(none)"),
    el("h2", {}, "Payload"), el("pre", {id: "payload"}, JSON.stringify(job.payload, null, 2)),
    el("h2", {}, "Result"), el("pre", {id: "result"},
      job.result === null || job.result === undefined ? "(none)" : JSON.stringify(job.result, null, 2)));
}

// The job page follows an unfinished job: its state, progress and metadata (and its
// workflow part, which the server scans for again only when the queue moved:
// dashboard/places.py) are read again every second until it finishes or the page
// moves on.
let jobTimer = null;
function followJob(answer) {
  if (jobTimer) { clearTimeout(jobTimer); jobTimer = null; }
  const running = ["pending", "leased", "waiting"].includes(answer.job.state);
  const live = document.getElementById("live");
  live.textContent = running ? "live" : "finished: reload to refresh";
  live.className = running ? "live on" : "live";
  if (!running) return;
  const name = answer.queue, id = answer.job.id;
  const here = () => view && view.kind === "job" && view.queue === name && view.job === id;
  jobTimer = setTimeout(() => {
    jobTimer = null;
    if (!here()) return;
    getJSON(apiQueue(name) + "/jobs/" + encodeURIComponent(id))
      .then((next) => { if (here()) { drawJob(next); followJob(next); } })
      .catch(() => { if (here()) followJob(answer); });  // again in a second
  }, 1000);
}

const LINKS_SHOWN = 100;  // links per list at most: a chord of 10,000 says "and 9,900 more"

function workflowPart(name, flow) {
  // parents and children as links to their pages (ids are data: text nodes, never markup)
  const part = el("div", {id: "workflow"}, el("h2", {}, "Workflow"));
  const links = (id, ids, empty) => {
    const list = el("p", {id: id, class: "mono"});
    if (!ids.length) list.append(el("span", {class: "muted"}, empty));
    ids.slice(0, LINKS_SHOWN).forEach((other, i) => list.append(i ? " " : "",
      el("a", {href: jobHref(name, other), "data-nav": true}, other)));
    if (ids.length > LINKS_SHOWN) list.append(el("span", {class: "muted"},
      " and " + fmt(ids.length - LINKS_SHOWN) + " more"));
    return list;
  };
  const progress = flow.progress ? " \u2013 " + fmt(flow.progress.done) + " / " +
    fmt(flow.progress.total) + " done" : "";
  part.append(el("h3", {}, "Waits for (parents)", el("span", {id: "workflow-progress"}, progress)),
              links("workflow-parents", flow.parents, "none"),
              el("h3", {}, "Waited for by (children)"),
              links("workflow-children", flow.children, "none"));
  if (!flow.children_complete) part.append(el("p", {class: "note"},
    "The search for children stopped at its bound (the first 10,000 jobs): there may be more."));
  return part;
}

function loadRecords(name, id) {
  const holder = document.getElementById("records");
  clear(holder);
  holder.append(el("p", {class: "muted"}, "reading the log\u2026 (a big log takes seconds)"));
  getJSON(apiQueue(name) + "/jobs/" + encodeURIComponent(id) + "/records").then((answer) => {
    clear(holder);
    holder.append(el("p", {class: "note"}, answer.records.length + " record(s) of this job among " +
      fmt(answer.records_scanned) + " in " + answer.log + " (the current generation only)."));
    holder.append(el("table", {id: "record-table"},
      head(["offset", "type", "crc", "fields"], [0]),
      el("tbody", {}, ...answer.records.map((r) => el("tr", {},
        el("td", {class: "num"}, r.offset), el("td", {}, r.type + (r.more ? "+" : "")),
        el("td", {}, r.crc_ok ? "ok" : "BAD"), el("td", {class: "mono"}, short(r.payload, 160)))))));
  }).catch((err) => { clear(holder); holder.append(el("p", {class: "err"}, err.message)); });
}

// -- start ----------------------------------------------------------------------------

function showTokenState() {
  document.getElementById("token-state").textContent = token() ? "token set" : "no token: changes will be refused";
}

document.addEventListener("DOMContentLoaded", () => {
  if (CSRF !== null) document.getElementById("token-form").hidden = true;  // Django's user
  takeTokenFromUrl();
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token-input");
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    else sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
    showTokenState();
  });
  showTokenState();
  route();
});
