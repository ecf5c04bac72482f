// neffcache dashboard: fetches JSON from this server's /api and renders each table with one
// innerHTML assignment (no per-cell DOM calls). No external resources; works offline.
"use strict";

// The selection lives in the URL (?matrix=NAME&fingerprint=KEY&cells=GLOB&refresh=SECONDS, or
// the same after #): a link opens it, and choosing something rewrites the address.
const state = { matrix: null, fingerprint: null, pattern: "", offset: 0, limit: 200,
  refresh: 30, grid: null, summary: null, attention: null, moreOpen: false, loads: 0,
  busy: false };
const CARDS = 4;  // full cards, worst first; the rest are one line each under "N more"
const $ = (id) => document.getElementById(id);
const SYMBOL = { ready: "\u2713", in_progress: "\u2026", failed: "\u2717", missing: "\u2013" };
const cellsOf = (f) => f.ready + (f.in_progress || 0) + f.failed + f.missing;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

const num = (n) => Number(n).toLocaleString("en-US");
const short = (key) => String(key || "").slice(0, 12);
const when = (iso) => (iso ? iso.replace("T", " ").replace("+00:00", "Z") : "");

async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error(`${path}: ${response.status} ${body.error || response.statusText}`);
  }
  return body;
}

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = String(err.message || err);
}

// --- header and summary tables -------------------------------------------------------------

function renderTotals(summary) {
  const t = summary.totals;
  $("totals").innerHTML = [
    ["entries", num(t.entries)], ["stored", bytes(t.total_bytes)],
    ["fingerprints", num(t.fingerprints)],
    [t.matrices === 1 ? "matrix" : "matrices", num(t.matrices)],
    [t.runs === 1 ? "precompile run" : "precompile runs", num(t.runs)],
    [t.restores === 1 ? "restore" : "restores", num(t.restores)],
  ].map(([label, value]) => `<span><b>${esc(value)}</b> ${esc(label)}</span>`).join("");
  $("index-label").textContent = summary.index;
  $("index-label").title = summary.index;
}

function renderSdk(rows) {
  if (!rows.length) { $("sdk").innerHTML = `<tr><td class="empty">no entries</td></tr>`; return; }
  const max = Math.max(...rows.map((r) => r.total_bytes), 1);
  $("sdk").innerHTML = `<thead><tr><th>backend</th><th>SDK version</th><th class="num">fingerprints</th>
    <th class="num">entries</th><th class="num">bytes</th><th style="width:30%"></th></tr></thead><tbody>` +
    rows.map((r) => `<tr><td>${esc(r.backend)}</td><td><code>${esc(r.sdk_version)}</code></td>
      <td class="num">${num(r.fingerprints)}</td><td class="num">${num(r.entries)}</td>
      <td class="num">${esc(bytes(r.total_bytes))}</td>
      <td><div class="hbar" style="width:${(100 * r.total_bytes / max).toFixed(1)}%"></div></td></tr>`).join("") +
    "</tbody>";
}

function renderOutcomes(rows) {
  $("outcomes").innerHTML = `<thead><tr><th>outcome</th><th class="num">restores</th>
    <th class="num">mean seconds</th><th class="num">bytes fetched</th></tr></thead><tbody>` +
    rows.map((o) => `<tr><td><span class="badge o-${esc(o.outcome)}">${esc(o.outcome)}</span></td>
      <td class="num">${num(o.count)}</td>
      <td class="num">${o.count ? (o.seconds_sum / o.count).toFixed(2) : "–"}</td>
      <td class="num">${esc(bytes(o.bytes_sum))}</td></tr>`).join("") + "</tbody>";
}

function renderRestores(rows) {
  if (!rows.length) {
    $("restores").innerHTML = `<tr><td class="empty">no restore reported yet</td></tr>`;
    return;
  }
  $("restores").innerHTML = `<thead><tr><th>time (UTC)</th><th>host</th><th>matrix</th>
    <th>fingerprint</th><th>outcome</th><th class="num">restored</th><th class="num">missing</th>
    <th class="num">bytes</th><th class="num">seconds</th><th class="num">exit</th></tr></thead><tbody>` +
    rows.map((r) => `<tr><td>${esc(when(r.created_at))}</td><td>${esc(r.host)}</td>
      <td>${esc(r.matrix)}</td><td><code title="${esc(r.fingerprint_key)}">${esc(short(r.fingerprint_key))}</code></td>
      <td><span class="badge o-${esc(r.outcome)}">${esc(r.outcome)}</span></td>
      <td class="num">${num(r.cells_restored)}</td>
      <td class="num" title="${esc(r.missing.slice(0, 20).join("\n"))}">${num(r.cells_missing)}</td>
      <td class="num">${esc(bytes(r.bytes_fetched))}</td><td class="num">${r.seconds.toFixed(2)}</td>
      <td class="num">${esc(r.exit_code)}</td></tr>`).join("") + "</tbody>";
}

function renderRuns(rows) {
  if (!rows.length) { $("runs").innerHTML = `<tr><td class="empty">no precompile run</td></tr>`; return; }
  $("runs").innerHTML = `<thead><tr><th>started (UTC)</th><th>finished</th><th>host</th>
    <th>matrix</th><th>fingerprint</th><th class="num">ok</th><th class="num">failed</th></tr></thead><tbody>` +
    rows.map((r) => `<tr data-run="${esc(r.id)}" data-status="${esc(r.status)}"><td>${esc(when(r.started_at))}</td>
      <td>${r.status === "cancelled" ? `<span class="badge o-partial" title="stopped by SIGTERM/SIGINT: ${num(r.cells_cancelled)} cell(s) ended, their leases given back">cancelled</span> ${esc(when(r.finished_at))}`
        : esc(when(r.finished_at) || "running")}</td>
      <td>${esc(r.host)}</td><td>${esc(r.matrix)}</td>
      <td><code title="${esc(r.fingerprint_key)}">${esc(short(r.fingerprint_key))}</code></td>
      <td class="num">${r.cells_ok ?? "–"}</td><td class="num">${r.cells_failed ?? r.failures_recorded}</td></tr>`).join("") +
    "</tbody>";
}

function failureHTML(f) {
  return `<details class="failure"><summary><code>${esc(f.cell_id)}</code> on
    <code title="${esc(f.fingerprint_key)}">${esc(short(f.fingerprint_key))}</code>:
    exit ${esc(f.exit_status ?? "?")} after ${Number(f.seconds).toFixed(1)} s,
    ${esc(when(f.failed_at))}</summary><div class="log"><pre>${esc(f.log_tail)}</pre></div></details>`;
}

function renderFailures(rows) {
  const elsewhere = state.attention ? state.attention.failed_cells : 0;
  $("failures").innerHTML = rows.length ? rows.map(failureHTML).join("")
    : `<div class="empty">no failed cell${state.matrix ? ` in ${esc(state.matrix)}` : ""}${elsewhere
      ? ` (every matrix: ${num(elsewhere)}, listed under "Needs attention")` : ""}</div>`;
}

// --- what needs attention, across every matrix (never only the selected one) --------------

function attentionItem(matrix, fp, body) {
  return `<a class="att-item" href="${esc(linkTo(matrix, fp))}" data-matrix="${esc(matrix)}"
    data-fp="${esc(fp)}" title="${esc(matrix)} · ${esc(fp)}"><b>${esc(matrix)}</b> ${body}</a>`;
}

function attentionGroup(kind, title, items, more) {
  return `<div class="att-group att-${kind}" data-kind="${kind}"><div class="att-head">${title}</div>
    <div class="att-list">${items.join("")}${more > 0 ? `<div class="muted">and ${num(more)} more</div>` : ""}</div></div>`;
}

function renderAttention(a) {
  const box = $("attention");
  box.dataset.ok = String(a.ok);
  if (a.ok) {
    box.innerHTML = `<div class="att-ok">&#10003; Nothing needs attention in any matrix: no failed or
      stale cell, and every fingerprint restored with in the last ${num(a.fleet_window_days)} days has entries.</div>`;
    return;
  }
  const plural = (n, word) => `${num(n)} ${word}${n === 1 ? "" : "s"}`;
  const groups = [];
  if (a.failed_cells) {
    groups.push(attentionGroup("failed", `<span class="f">&#10007; ${plural(a.failed_cells, "failed cell")}</span>`,
      a.failed.map((f) => attentionItem(f.matrix, f.fingerprint_key, `<code>${esc(f.cell_id)}</code>
        on <code>${esc(short(f.fingerprint_key))}</code> · exit ${esc(f.exit_status ?? "?")} · ${esc(when(f.failed_at))}`)),
      a.failed_cells - a.failed.length));
  }
  if (a.stale_cells) {
    groups.push(attentionGroup("stale", `<span class="p">&#9679; ${plural(a.stale_cells, "stale cell")}</span>
      <span class="muted">(lease expired: worker died?)</span>`,
      a.stale.map((l) => attentionItem(l.matrix, l.fingerprint_key, `<code>${esc(l.cell_id)}</code>
        on <code>${esc(short(l.fingerprint_key))}</code> · ${esc(l.host)} · expired ${esc(when(l.expires_at))}`)),
      a.stale_cells - a.stale.length));
  }
  if (a.unbuilt.length) {
    groups.push(attentionGroup("unbuilt", `<span class="f">&#9888; ${plural(a.unbuilt.length, "fleet fingerprint")}
      with nothing built</span> <span class="muted">(restored with in ${num(a.fleet_window_days)} days)</span>`,
      a.unbuilt.map((u) => attentionItem(u.matrix, u.fingerprint.key, `<code>${esc(short(u.fingerprint.key))}</code>
        ${u.fingerprint.backend === "unknown" ? "(not in the index)" : `${esc(u.fingerprint.backend)}
        ${esc(u.fingerprint.sdk_version)} ${esc(u.fingerprint.target)}`} ·
        ${plural(u.fingerprint.restores, "restore")} · last ${esc(when(u.last_restore_at))}`)), 0));
  }
  box.innerHTML = `<h2>Needs attention <span class="muted">(all matrices)</span></h2><div class="att-groups">${groups.join("")}</div>`;
}

// --- coverage grid -------------------------------------------------------------------------

function readURL() {
  const q = new URLSearchParams(location.search);
  const h = new URLSearchParams(location.hash.replace(/^#/, ""));
  const get = (k) => q.get(k) ?? h.get(k);
  state.matrix = get("matrix") || null;
  state.fingerprint = get("fingerprint") || null;
  state.pattern = get("cells") || "";
  const every = Number(get("refresh") ?? 30);
  state.refresh = Number.isFinite(every) && every >= 0 ? every : 30;
}

function linkTo(matrix, fingerprint) {
  const q = new URLSearchParams();
  if (matrix) q.set("matrix", matrix);
  if (fingerprint) q.set("fingerprint", fingerprint);
  if (state.pattern) q.set("cells", state.pattern);
  if (state.refresh !== 30) q.set("refresh", state.refresh);
  return `?${q}`;
}

function writeURL() {
  const url = linkTo(state.matrix, state.fingerprint);
  if (url !== location.search || location.hash) history.replaceState(null, "", url);
  $("permalink").href = url;
}

function renderMatrices(list, summary) {
  const select = $("matrix");
  if (!list.length) {
    select.innerHTML = "";
    $("matrix-info").textContent = "no matrix registered (neffcache matrix register FILE)";
    return false;
  }
  // No choice in the URL: the matrix the summary puts first (its worst fingerprint is worst).
  const worst = summary.coverage.length ? summary.coverage[0].matrix : list[0].name;
  if (!list.some((m) => m.name === state.matrix)) {
    state.matrix = list.some((m) => m.name === worst) ? worst : list[0].name;
  }
  select.innerHTML = list.map((m) => `<option value="${esc(m.name)}"${m.name === state.matrix ? " selected" : ""}>${esc(m.name)}</option>`).join("");
  const m = list.find((x) => x.name === state.matrix);
  $("matrix-info").textContent = `version ${m.version} · ${num(m.cells)} cells · ${m.backend} · sha256 ${short(m.sha256)} · registered ${when(m.registered_at)}`;
  return true;
}

const restoredOnly = (f) => f.restores > 0 && f.ready === 0;
const pct = (f) => `${(100 * f.ratio).toFixed(1)}%`;

function cardHTML(f) {
  const total = cellsOf(f) || 1;
  const sel = f.key === state.fingerprint ? " selected" : "";
  const alarm = restoredOnly(f) ? `<div class="alarm">${num(f.restores)} restores · nothing built</div>`
    : f.restores ? `<div class="muted restores">${num(f.restores)} restores</div>` : "";
  return `<a class="fp-card${sel}${restoredOnly(f) ? " alarming" : ""}" data-fp="${esc(f.key)}"
    href="${esc(linkTo(state.matrix, f.key))}" title="${esc(f.key)}">
    <div class="title">${f.backend === "unknown" ? "fingerprint not in the index"
      : `${esc(f.backend)} ${esc(f.sdk_version)} <span class="target">${esc(f.target)}</span>`}</div>
    ${f.known ? `<div class="known">${esc(f.known)}</div>` : ""}${distinctHTML(f)}${alarm}
    <code>${esc(short(f.key))}</code> <b>${pct(f)}</b>${explainHTML(f)}
    <div class="bar"><div class="r" style="width:${100 * f.ready / total}%"></div><div class="p" style="width:${100 * (f.in_progress || 0) / total}%"></div><div class="f" style="width:${100 * f.failed / total}%"></div></div>
    <div class="counts"><span class="r">${num(f.ready)} ready</span> · ${f.in_progress ? `<span class="p">${num(f.in_progress)} in progress</span> · ` : ""}<span class="f">${num(f.failed)} failed</span> · <span class="m">${num(f.missing)} missing</span></div></a>`;
}

// What tells a card apart from the cards that read the same (other NEURON_CC_FLAGS, say), and
// the control that explains it against its nearest column (/api/fingerprint-diff).
function distinctHTML(f) {
  const fields = Object.entries(f.distinct || {});
  return fields.length ? `<div class="distinct" title="Differs from the cards that read the same in these fields">${fields.map(([k, v]) =>
    `<span><b>${esc(k)}</b> <code>${esc(v === "" ? "''" : v)}</code></span>`).join(" ")}</div>` : "";
}

function explainHTML(f) {
  return f.nearest ? `<span class="explain" role="button" tabindex="0" data-explain="${esc(f.key)}"
    data-against="${esc(f.nearest)}" title="Which fields differ from ${esc(short(f.nearest))}, and why they matter">explain</span>` : "";
}

async function showExplain(el) {
  const box = $("fp-explain");
  const params = new URLSearchParams({ key: el.dataset.explain, against: el.dataset.against });
  box.hidden = false;
  box.innerHTML = `<span class="muted">comparing ${esc(short(el.dataset.explain))}…</span>`;
  const d = await getJSON(`/api/fingerprint-diff?${params}`);
  box.dataset.key = d.key;
  box.innerHTML = `<div class="head"><b><code>${esc(short(d.key))}</code></b> differs from
    <code>${esc(short(d.against))}</code> (the column it differs from least) in
    ${num(d.differences.length)} field${d.differences.length === 1 ? "" : "s"}
    <button type="button" class="close" aria-label="Close">&times;</button></div>
    <table class="list"><thead><tr><th>field</th><th>${esc(short(d.key))}</th><th>${esc(short(d.against))}</th>
    <th>why it matters</th></tr></thead><tbody>${d.differences.map((x) => `<tr data-field="${esc(x.field)}">
    <td><code>${esc(x.field)}</code></td><td><code>${esc(x.value)}</code></td><td><code>${esc(x.against)}</code></td>
    <td class="muted">${esc(x.note)}</td></tr>`).join("")}</tbody></table>
    <div class="muted">On a host: <code>neffcache fingerprint --explain ${esc(d.key)}</code> names the
    fields in which the host differs from it.</div>`;
  box.querySelector(".close").addEventListener("click", () => { box.hidden = true; });
}

function rowHTML(f) {
  const sel = f.key === state.fingerprint ? " selected" : "";
  return `<a class="fp-row${sel}" data-fp="${esc(f.key)}" href="${esc(linkTo(state.matrix, f.key))}"
    title="${esc(f.key)}"><code>${esc(short(f.key))}</code> <span>${esc(f.backend)} ${esc(f.sdk_version)}</span>
    <span class="target">${esc(f.target)}</span>${Object.entries(f.distinct || {}).map(([k, v]) =>
      ` <span class="distinct"><b>${esc(k)}</b> ${esc(v)}</span>`).join("")} <span class="f">${num(f.failed)} failed</span>
    <span class="m">${num(f.missing)} missing</span>${f.restores ? ` <span class="muted">${num(f.restores)} restores</span>` : ""}
    <b>${pct(f)}</b></a>`;
}

function renderCards(fps) {
  if (!fps.length) {
    $("fp-summary").innerHTML = `<div class="empty">no entry or failure for any cell of this matrix yet</div>`;
    return;
  }
  const shown = fps.slice(0, CARDS);
  const chosen = fps.find((f) => f.key === state.fingerprint);
  if (chosen && !shown.includes(chosen)) shown.push(chosen);
  const rest = fps.filter((f) => !shown.includes(f));
  $("fp-summary").innerHTML = shown.map(cardHTML).join("") + (rest.length
    ? `<details id="fp-more" class="fp-more"${state.moreOpen ? " open" : ""}><summary>${num(rest.length)} more
       fingerprint${rest.length === 1 ? "" : "s"}, worst first</summary><div class="fp-list">${rest.map(rowHTML).join("")}</div></details>`
    : "");
  $("fp-more")?.addEventListener("toggle", (e) => { state.moreOpen = e.target.open; });
}

const VERIFIED = { hit: ["warm", "warm: a first call after restore compiled nothing"],
  compiled: ["compiled", "compiled on its first call after restore"],
  "verify-failed": ["vfailed", "the first call after restore failed"] };

function statusTD(s, j, verified, selected) {
  const v = VERIFIED[verified];
  const cls = `st ${s}${v && s === "ready" ? ` ${v[0]}` : ""}${selected ? " sel" : ""}`;
  const extra = v ? ` data-verified="${esc(verified)}" title="${esc(v[1])}"` : "";
  return `<td class="${cls}" data-status="${s}" data-j="${j}"${extra}>${SYMBOL[s]}</td>`;
}

function renderGrid(grid) {
  state.grid = grid;
  const fps = grid.fingerprints;
  renderCards(fps);
  const chosen = fps.findIndex((f) => f.key === state.fingerprint);
  const head = `<thead><tr><th class="cell">cell (${num(grid.total_cells)})</th>` + fps.map((f, j) =>
    `<th title="${esc(f.key)}" data-fp="${esc(f.key)}"${j === chosen ? ' class="sel"' : ""}>${esc(f.sdk_version)}` +
    `<span class="sub">${esc(f.target)}</span>${Object.entries(f.distinct || {}).map(([k, v]) =>
      `<span class="sub distinct" data-field="${esc(k)}">${esc(v)}</span>`).join("")}<span class="sub">${esc(short(f.key))}</span>` +
    `<span class="sub">${num(f.ready)}/${num(cellsOf(f))}</span></th>`).join("") + "</tr></thead>";
  const body = grid.rows.map((row) => `<tr><td class="cell">${esc(row.cell_id)}</td>` +
    row.statuses.map((s, j) => statusTD(s, j, (row.verified || {})[j], j === chosen)).join("") +
    "</tr>").join("");
  $("grid").innerHTML = head + `<tbody>${body || `<tr><td class="empty" colspan="${fps.length + 1}">no cell matches</td></tr>`}</tbody>`;
  const first = grid.total_cells ? grid.offset + 1 : 0;
  const last = grid.offset + grid.rows.length;
  $("page-info").textContent = `cells ${num(first)}–${num(last)} of ${num(grid.total_cells)}`;
  $("prev").disabled = grid.offset <= 0;
  $("next").disabled = last >= grid.total_cells;
  const th = chosen >= 0 ? $("grid").querySelector("thead th.sel") : null;
  const wrap = $("grid").parentElement;
  if (th && (th.offsetLeft < wrap.scrollLeft || th.offsetLeft > wrap.scrollLeft + wrap.clientWidth - th.offsetWidth)) {
    wrap.scrollLeft = Math.max(0, th.offsetLeft - wrap.clientWidth / 3);
  }
}

async function loadGrid() {
  if (!state.matrix) { $("grid").innerHTML = ""; $("fp-summary").innerHTML = ""; return; }
  const params = new URLSearchParams({ matrix: state.matrix, offset: state.offset, limit: state.limit });
  if (state.pattern) params.set("cells", state.pattern);
  renderGrid(await getJSON(`/api/coverage?${params}`));
}

async function loadFailures() {
  const params = new URLSearchParams({ limit: 50 });
  if (state.matrix) params.set("matrix", state.matrix);
  if (state.fingerprint) params.set("fingerprint", state.fingerprint);
  const scope = [state.matrix, state.fingerprint && short(state.fingerprint)].filter(Boolean);
  $("failures-scope").textContent = `(${[...scope, "latest 50"].join(", ")})`;
  renderFailures(await getJSON(`/api/failures?${params}`));
}

async function showCellLog(td) {
  const row = td.parentElement.rowIndex - 1;  // minus the header row
  const cell = state.grid.rows[row];
  const fp = state.grid.fingerprints[Number(td.dataset.j)];
  const params = new URLSearchParams({ cells: cell.cell_id, fingerprint: fp.key, limit: 1 });
  const box = $("cell-log");
  box.hidden = false;
  box.classList.remove("entry");
  box.innerHTML = `<span class="muted">loading log of ${esc(cell.cell_id)}…</span>`;
  const found = await getJSON(`/api/failures?${params}`);
  box.innerHTML = found.length ? failureHTML(found[0]).replace("<details ", "<details open ")
    : `<span class="muted">no failure recorded</span>`;
}

async function showCellEntry(td) {
  const cell = state.grid.rows[td.parentElement.rowIndex - 1];  // minus the header row
  const fp = state.grid.fingerprints[Number(td.dataset.j)];
  const params = new URLSearchParams({ cells: cell.cell_id, fingerprint: fp.key, limit: 1 });
  const box = $("cell-log");
  box.hidden = false;
  box.classList.add("entry");
  box.innerHTML = `<span class="muted">loading the entry of ${esc(cell.cell_id)}…</span>`;
  const e = (await getJSON(`/api/entries?${params}`))[0];
  box.innerHTML = e ? `<div class="entry-info" data-entry="${esc(e.entry_key)}">` +
    `${esc(cell.cell_id)}: entry <code>${esc(short(e.entry_key))}</code> · ` +
    `${esc(bytes(e.total_bytes))} in ${num(e.file_count)} file(s) · <span class="signer">` +
    (e.signed_by ? `signed by key <code>${esc(e.signed_by)}</code>` : "unsigned") +
    `</span> · ${num(e.restore_count)} restore(s)</div>` : `<span class="muted">no entry found</span>`;
}

function renderInProgress(rows) {
  $("in-progress").innerHTML = rows.length
    ? `<thead><tr><th>cell</th><th>host</th><th>since</th><th>last heartbeat</th>
       <th class="num">attempt</th></tr></thead><tbody>` +
      rows.map((r) => `<tr><td>${esc(r.cell_id)}</td><td>${esc(r.host)}</td>
        <td>${esc(r.since)}</td><td>${esc(r.heartbeat_at)}</td>
        <td class="num">${num(r.attempts)}</td></tr>`).join("") + "</tbody>"
    : `<tbody><tr><td class="muted">no cell is being warmed right now</td></tr></tbody>`;
}

// --- restores over time, all matrices ------------------------------------------------------

const SERIES = [["hit", "hit"], ["partial", "partial"], ["miss_no_entry", "miss: no entry"],
  ["miss_other_fingerprint", "miss: other fingerprint"], ["error", "error"]];
const SVG = "http://www.w3.org/2000/svg";

function svgEl(name, attrs) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function renderTimeline(points) {
  const box = $("timeline");
  box.textContent = "";
  const total = (p) => SERIES.reduce((n, [k]) => n + p[k], 0);
  const max = Math.max(1, ...points.map(total));
  const w = 28, gap = 6, h = 160, top = 10, bottom = 24;
  const svg = svgEl("svg", { id: "timeline-chart", role: "img", width: points.length * (w + gap),
    height: h + top + bottom, "aria-label": "Restores per day by outcome" });
  points.forEach((p, i) => {
    let y = top + h;
    const x = i * (w + gap);
    for (const [k, label] of SERIES) {
      const bar = (p[k] / max) * h;
      if (p[k] > 0) {
        y -= bar;
        const rect = svgEl("rect", { x, y, width: w, height: Math.max(bar, 1),
          class: `tl-bar tl-${k}`, "data-series": k });
        const title = svgEl("title", {});
        title.textContent = `${p.start.slice(0, 10)}: ${p[k]} ${label}`;
        rect.appendChild(title);
        svg.appendChild(rect);
      }
    }
    const text = svgEl("text", { x: x + w / 2, y: top + h + 16, "text-anchor": "middle",
      class: "axis" });
    text.textContent = p.start.slice(8, 10);
    svg.appendChild(text);
  });
  const legend = document.createElement("div");
  legend.className = "timeline-legend";
  legend.innerHTML = SERIES.map(([k, label]) =>
    `<span><span class="tl-swatch tl-${k}"></span>${esc(label)}</span>`).join(" ");
  box.append(svg, legend);
}

function renderOverview(coverage) {
  $("overview").innerHTML = coverage.length
    ? `<thead><tr><th>matrix</th><th class="num">version</th><th class="num">cells</th>
       <th>ready per fingerprint</th></tr></thead><tbody>` +
      coverage.map((m) => `<tr><td><a href="${esc(linkTo(m.matrix, null))}" data-matrix="${esc(m.matrix)}">${esc(m.matrix)}</a></td><td class="num">${num(m.version)}</td>
        <td class="num">${num(m.cells)}</td><td>${m.fingerprints.map((f) =>
          `<a class="chip${f.ready ? "" : " zero"}" href="${esc(linkTo(m.matrix, f.key))}" data-matrix="${esc(m.matrix)}" data-fp="${esc(f.key)}" title="${esc(f.key)} (${esc(f.backend)}
 ${esc(f.sdk_version)} ${esc(f.target)})">${esc(f.key.slice(0, 8))} ${Math.round(f.ratio * 100)} %</a>`)
          .join(" ")}</td></tr>`).join("") + "</tbody>"
    : `<tbody><tr><td class="muted">no matrix registered</td></tr></tbody>`;
}

// --- wiring --------------------------------------------------------------------------------

async function loadAll() {
  if (state.busy) return;  // an auto-refresh while a load is still running: skip it
  state.busy = true;
  try {
    showError(null);
    const [summary, matrices, restores, runs, inProgress, timeline, attention] = await Promise.all([
      getJSON("/api/summary"), getJSON("/api/matrices"), getJSON("/api/restores?limit=25"),
      getJSON("/api/runs?limit=20"), getJSON("/api/in-progress?limit=200"),
      getJSON("/api/restore-timeline?days=14"), getJSON("/api/attention?limit=20")]);
    state.summary = summary;
    state.attention = attention;
    renderAttention(attention);
    renderTotals(summary);
    renderSdk(summary.sdk_versions);
    renderOutcomes(summary.restore_outcomes);
    renderTimeline(timeline);
    renderRestores(restores);
    renderRuns(runs);
    renderInProgress(inProgress);
    renderMatrices(matrices, summary);
    writeURL();
    renderOverview(summary.coverage);
    await Promise.all([loadGrid(), loadFailures()]);
    state.loads += 1;
    document.body.dataset.loads = String(state.loads);
    document.body.dataset.loaded = "true";
  } catch (err) {
    showError(err);
    document.body.dataset.loaded = "error";
  } finally {
    state.busy = false;
  }
}

function guarded(fn) {
  return (...args) => fn(...args).catch(showError);
}

function debounce(fn, ms) {
  let timer = null;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

let refreshTimer = null;

function scheduleRefresh() {
  clearInterval(refreshTimer);
  refreshTimer = state.refresh > 0 ? setInterval(() => loadAll(), state.refresh * 1000) : null;
  const select = $("refresh-every");
  if (![...select.options].some((o) => Number(o.value) === state.refresh)) {
    select.insertAdjacentHTML("beforeend", `<option value="${state.refresh}">${state.refresh} s</option>`);
  }
  select.value = String(state.refresh);
}

function chooseFingerprint(key) {
  state.fingerprint = key === state.fingerprint ? null : key;
  writeURL();
  if (state.grid) renderGrid(state.grid);
  if (state.summary) renderOverview(state.summary.coverage);
  return loadFailures();
}

async function chooseMatrix(name, fingerprint) {
  state.matrix = name;
  state.fingerprint = fingerprint;
  state.offset = 0;
  $("cell-log").hidden = true;
  $("fp-explain").hidden = true;
  await loadAll();
}

// Links inside the page (cards, compact rows, column heads, overview chips) change the
// selection in place; a new tab or a copied link opens the same selection.
function onSelect(e) {
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const el = e.target.closest("[data-fp], [data-matrix]");
  if (!el || el.tagName === "TD") return;
  e.preventDefault();
  const matrix = el.dataset.matrix;
  if (matrix && matrix !== state.matrix) {
    guarded(chooseMatrix)(matrix, el.dataset.fp || null);
  } else if (el.dataset.fp) {
    guarded(chooseFingerprint)(el.dataset.fp);
  }
}

function init() {
  readURL();
  $("filter").value = state.pattern;
  scheduleRefresh();
  $("refresh").addEventListener("click", () => loadAll());
  $("refresh-every").addEventListener("change", (e) => {
    state.refresh = Number(e.target.value);
    scheduleRefresh();
    writeURL();
  });
  $("matrix").addEventListener("change", guarded((e) => chooseMatrix(e.target.value, state.fingerprint)));
  $("fp-summary").addEventListener("click", (e) => {
    const why = e.target.closest(".explain");
    if (!why) { onSelect(e); return; }
    e.preventDefault();
    guarded(showExplain)(why);
  });
  $("fp-summary").addEventListener("keydown", (e) => {
    const why = e.target.closest(".explain");
    if (why && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); guarded(showExplain)(why); }
  });
  $("attention").addEventListener("click", (e) => {  // opens a selection, never clears it
    const el = e.target.closest(".att-item");
    const plain = e.button === 0 && !(e.metaKey || e.ctrlKey || e.shiftKey || e.altKey);
    if (plain && el && el.dataset.matrix === state.matrix && el.dataset.fp === state.fingerprint) {
      e.preventDefault();
    } else {
      onSelect(e);
    }
  });
  $("overview").addEventListener("click", onSelect);
  $("grid").addEventListener("click", (e) => {
    if (e.target.closest("thead th[data-fp]")) onSelect(e);
  });
  $("filter").addEventListener("input", debounce(guarded(async (e) => {
    state.pattern = e.target.value.trim();
    state.offset = 0;
    writeURL();
    await loadGrid();
  }), 250));
  $("page-size").addEventListener("change", guarded(async (e) => {
    state.limit = Number(e.target.value);
    state.offset = 0;
    await loadGrid();
  }));
  $("prev").addEventListener("click", guarded(async () => {
    state.offset = Math.max(0, state.offset - state.limit);
    await loadGrid();
  }));
  $("next").addEventListener("click", guarded(async () => {
    state.offset += state.limit;
    await loadGrid();
  }));
  $("grid").addEventListener("click", guarded(async (e) => {
    const td = e.target.closest("td.st.failed");
    if (td) await showCellLog(td);
    const ready = e.target.closest("td.st.ready");
    if (ready) await showCellEntry(ready);
  }));
  window.addEventListener("popstate", () => { readURL(); loadAll(); });
  window.addEventListener("hashchange", () => { readURL(); loadAll(); });
  loadAll();
}

document.addEventListener("DOMContentLoaded", init);
