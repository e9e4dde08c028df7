// The playground page: loads Pyodide and nobroker from this site, then draws
// what playground.py reports after each action. All queue logic is Python;
// this file only moves data between the buttons, Python and the DOM, and it
// builds every node with textContent (nothing from the log becomes HTML).

import { loadPyodide } from "./pyodide/pyodide.mjs";

const QUEUE_DIR = "/playground/jobs";
const $ = (sel) => document.querySelector(sel);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell));
    return tr;
  }));
}

function drawStats(snap) {
  for (const key of ["pending", "leased", "dead", "done", "generation", "log_bytes"]) {
    $(`#stat-${key}`).textContent = key in snap.stats ? snap.stats[key] : "-";
  }
  $("#clock").textContent = `(clock t+${snap.elapsed.toFixed(0)} s)`;
  $("#crashed").hidden = !snap.crashed;
}

function drawJobs(snap) {
  const rows = snap.jobs.map((job) => {
    const detail = job.state === "leased"
      ? `token ${job.token} until t+${(job.lease_expires_at - (snap.now - snap.elapsed)).toFixed(0)} s`
        + (job.held ? "" : " (holder gone)")
      : (job.last_error || "");
    const state = el("td", job.state, `state-${job.state}`);
    return [el("td", job.id, "mono"), state, `${job.attempts}/${job.max_attempts}`,
      el("td", JSON.stringify(job.payload), "mono"), detail];
  });
  const tbody = $("#jobs tbody");
  fill(tbody, rows);
  [...tbody.rows].forEach((tr, i) => {
    tr.dataset.id = snap.jobs[i].id;
    tr.dataset.state = snap.jobs[i].state;
  });
}

function drawFiles(snap) {
  fill($("#files tbody"), snap.files.map((f) => [el("td", f.name, "mono"), f.size]));
  $("#recovery").textContent = snap.recovery;
  $("#events").replaceChildren(...snap.events.slice().reverse().map((e) => el("li", e)));
}

// One span per byte, coloured by what it belongs to; a record's bytes carry
// its offset and type in a tooltip.
function drawHex(log) {
  const bytes = log.hex.match(/../g) || [];
  const owner = new Array(bytes.length).fill(null);
  // A broken record owns what survives of it: up to the last non-zero byte.
  let written = bytes.length;
  while (written > 0 && bytes[written - 1] === "00") written--;
  log.records.forEach((rec, i) => {
    const size = rec.crc_ok ? rec.size : Math.max(written - rec.offset, 1);
    for (let p = rec.offset; p < Math.min(rec.offset + size, bytes.length); p++) {
      owner[p] = { rec, kind: rec.crc_ok ? `k-rec${i % 2}` : "k-torn" };
    }
  });
  const hex = $("#hex");
  const rows = [];
  for (let start = 0; start < bytes.length; start += 16) {
    const row = el("div", null, "hexrow");
    row.append(el("span", start.toString(16).padStart(8, "0"), "addr"));
    for (let p = start; p < Math.min(start + 16, bytes.length); p++) {
      let kind = "k-zero";
      let title = `offset ${p}: preallocated zeros`;
      if (p < 16) { kind = "k-header"; title = "file header: NOBROKER, version, generation"; }
      else if (owner[p]) {
        kind = owner[p].kind;
        const r = owner[p].rec;
        title = `offset ${p}: ${r.type} record at ${r.offset}` + (r.error ? ` (${r.error})` : "");
        if (p === r.offset) kind += " boundary";
      } else if (bytes[p] !== "00") { kind = "k-torn"; title = `offset ${p}: not a whole record`; }
      if (p >= log.new_from && p < log.records_end) kind += " fresh";
      const b = el("span", bytes[p], `byte ${kind}`);
      b.title = title;
      row.append(b);
    }
    for (let p = bytes.length; p < start + 16; p++) row.append(el("span", "", "byte pad"));
    // The same bytes as ASCII, so the JSON payloads read as text.
    const text = bytes.slice(start, start + 16).map((h) => {
      const code = parseInt(h, 16);
      return code >= 0x20 && code < 0x7f ? String.fromCharCode(code) : ".";
    }).join("");
    row.append(el("span", text, "ascii"));
    rows.push(row);
  }
  hex.replaceChildren(...rows);
  hex.scrollTop = hex.scrollHeight; // new records land at the end
  hex.dataset.bytes = String(bytes.length);
  $("#log-path").textContent = log.path;
  $("#log-size").textContent =
    `${log.records_end} bytes of records; the file is ${log.file_size} bytes (preallocated). `
    + `Shown: ${bytes.length} bytes.`;
  fill($("#records tbody"), log.records.map((r) => [r.offset, el("td", r.type, r.crc_ok ? "" : "k-torn"),
    r.more ? "more follows" : "last of batch", r.crc_ok ? r.size : "-",
    el("td", r.payload ? JSON.stringify(r.payload) : (r.error || ""), "mono")]));
}

function drawTransitions(snap) {
  const fresh = new Set(snap.log.records
    .filter((r) => r.offset >= snap.log.new_from && r.crc_ok).map((r) => r.type));
  fill($("#transitions tbody"), snap.transitions.map((t) => [t.record, t.before, t.after.join(" or ")]));
  [...$("#transitions tbody").rows].forEach((tr, i) => {
    tr.classList.toggle("fresh-row", fresh.has(snap.transitions[i].record));
  });
}

function draw(snap) {
  drawStats(snap);
  drawJobs(snap);
  drawFiles(snap);
  drawTransitions(snap);
  drawHex(snap.log);
  document.body.dataset.actions = String(Number(document.body.dataset.actions || 0) + 1);
}

async function main() {
  const status = $("#status");
  try {
    const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", import.meta.url).href });
    const [zip, driver] = await Promise.all([
      fetch("nobroker.zip").then((r) => r.arrayBuffer()),
      fetch("playground.py").then((r) => r.text()),
    ]);
    pyodide.unpackArchive(zip, "zip", { extractDir: "/playground/lib" });
    pyodide.FS.writeFile("/playground/lib/playground.py", driver);
    pyodide.runPython(`
import sys, json
sys.path.insert(0, "/playground/lib")
from playground import Playground
_pg = Playground(${JSON.stringify(QUEUE_DIR)})
def _act(action, arg=""):
    return json.dumps(_pg.act(action, arg))
def _snapshot():
    return json.dumps(_pg.snapshot())
`);
    const act = pyodide.globals.get("_act");
    draw(JSON.parse(pyodide.globals.get("_snapshot")()));
    for (const button of document.querySelectorAll("button[data-action]")) {
      button.disabled = false;
      button.addEventListener("click", () => {
        try {
          const takesPayload = button.dataset.action.startsWith("enqueue");
          draw(JSON.parse(act(button.dataset.action, takesPayload ? $("#payload").value : "")));
        } catch (err) { // a bug in the driver: say so rather than show a stale state
          status.textContent = `The ${button.dataset.action} action failed: ${err}`;
          status.dataset.ready = "failed";
          throw err;
        }
      });
    }
    const version = pyodide.runPython("import nobroker, sys; f'nobroker {nobroker.__version__} on Python {sys.version.split()[0]}'");
    status.textContent = `Ready: ${version}, queue directory ${QUEUE_DIR} (in memory).`;
    status.dataset.ready = "yes";
  } catch (err) {
    status.textContent = `Could not start: ${err}`;
    status.dataset.ready = "failed";
    throw err;
  }
}

main();
