// The aspect-selection page: pick a paper, select sentences, search, read the alignments.
// Every text from the server is inserted with textContent (never as HTML).
"use strict";

const PALETTE = ["#2166ac", "#d6604d", "#1b9e77", "#7570b3", "#e6ab02", "#e7298a", "#66a61e", "#a6761d"];
const TINTS = ["#e3edf7", "#fbe7e3", "#e0f3ee", "#ebeaf5", "#fbf1d5", "#fae1ee", "#e7f2dc", "#f1e8dc"];
const state = { paper: null, selected: new Set(), filterTimer: null };
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function colour(node, slot) {
  node.style.setProperty("--qcolor", PALETTE[slot % PALETTE.length]);
  node.style.setProperty("--qtint", TINTS[slot % TINTS.length]);
}

function status(message, isError) {
  const box = $("status");
  box.textContent = message || "";
  box.classList.toggle("error", Boolean(isError));
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body;
  try { body = await response.json(); } catch (e) { body = { error: `HTTP ${response.status}` }; }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

// ---- papers ---------------------------------------------------------------------------------------
async function loadInfo() {
  const info = await api("/api/info");
  $("index-info").textContent = `${info.n_papers} papers · ${info.n_sentences} sentences · model ${info.model}` +
    (info.labelled_papers ? ` · ${info.labelled_papers} with facet labels` : "");
  $("rerank").value = info.rerank;
}

async function filterPapers() {
  const q = $("paper-filter").value;
  try {
    const found = await api(`/api/papers?q=${encodeURIComponent(q)}&limit=30`);
    const list = $("paper-list");
    list.replaceChildren();
    for (const p of found.papers) {
      const item = el("li", "paper-item");
      item.dataset.id = p.paper_id;
      item.append(el("span", "pid", p.paper_id), document.createTextNode(p.title || "(untitled)"));
      if (state.paper && state.paper.paper_id === p.paper_id) item.classList.add("current");
      item.addEventListener("click", () => pickPaper(p.paper_id));
      list.append(item);
    }
    if (!found.papers.length) list.append(el("li", "muted", "no paper matches"));
  } catch (err) { status(err.message, true); }
}

async function pickPaper(id) {
  try {
    state.paper = await api(`/api/paper?id=${encodeURIComponent(id)}`);
  } catch (err) { status(err.message, true); return; }
  state.selected = new Set();
  document.querySelectorAll(".paper-item").forEach((n) => n.classList.toggle("current", n.dataset.id === id));
  $("query-panel").hidden = false;
  $("query-title").textContent = `${state.paper.title}  (${state.paper.paper_id})`;
  const list = $("query-sentences");
  list.replaceChildren();
  state.paper.sentences.forEach((s, i) => {
    const item = el("li", "sentence");
    item.dataset.index = i;
    item.append(el("span", "qid", `q${i}`));
    if (s.facet || s.label) item.append(el("span", `facet facet-${s.facet || "other"}`, s.facet || s.label.replace(/_label$/, "")));
    item.append(el("span", "text", s.text));
    item.addEventListener("click", () => toggle(i));
    list.append(item);
  });
  const hasFacets = state.paper.sentences.some((s) => s.facet);
  document.querySelectorAll(".facet-btn").forEach((b) => {
    b.disabled = !state.paper.sentences.some((s) => s.facet === b.dataset.facet);
    b.title = hasFacets ? "" : "no facet labels for this paper";
  });
  renderSelection();
  status("");
}

// ---- selection ------------------------------------------------------------------------------------
function toggle(i) {
  if (state.selected.has(i)) state.selected.delete(i); else state.selected.add(i);
  renderSelection();
}

function selectWhere(pred) {
  state.selected = new Set();
  state.paper.sentences.forEach((s, i) => { if (pred(s)) state.selected.add(i); });
  renderSelection();
}

function slotOf(i) {  // colour slot of a selected query sentence: its order among the selected
  return [...state.selected].sort((a, b) => a - b).indexOf(i);
}

function renderSelection() {
  document.querySelectorAll("#query-sentences .sentence").forEach((node) => {
    const i = Number(node.dataset.index);
    const on = state.selected.has(i);
    node.classList.toggle("selected", on);
    node.setAttribute("aria-selected", on ? "true" : "false");
    if (on) colour(node, slotOf(i));
  });
  $("search-btn").disabled = state.selected.size === 0;
}

// ---- search ---------------------------------------------------------------------------------------
async function search() {
  if (!state.paper || state.selected.size === 0) { status("select at least one sentence", true); return; }
  const body = { paper_id: state.paper.paper_id, sentences: [...state.selected].sort((a, b) => a - b),
                 k: Number($("k").value), rerank: $("rerank").value };
  status("searching…");
  const started = performance.now();
  let result;
  try {
    result = await api("/api/search", { method: "POST", headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify(body) });
  } catch (err) { status(err.message, true); return; }
  const ms = Math.round(performance.now() - started);
  status(`${result.hits.length} papers in ${ms} ms`);
  renderResults(result);
}

function renderResults(result) {
  const rows = result.plan_rows;  // selected query positions, in plan row order
  const slot = new Map(rows.map((q, r) => [q, r]));
  $("results-head").textContent = `Ranked by ${$("rerank").selectedOptions[0].textContent} using ` +
    `${rows.map((q) => "q" + q).join(", ")} of ${state.paper.paper_id}. Highlighted: the sentence each selected ` +
    `query sentence is aligned to. Heatmap: OT plan (eps ${result.ot.eps}, tau ${result.ot.tau}), rows = query sentences.`;
  const list = $("results");
  list.replaceChildren();
  for (const hit of result.hits) {
    const card = el("li", "hit");
    card.dataset.id = hit.paper_id;
    const head = el("div", "hit-head");
    head.append(el("span", "hit-rank", String(hit.rank)), el("span", "hit-title", hit.title || "(untitled)"),
                el("span", "hit-meta", `${hit.paper_id} · score ${hit.score.toFixed(3)}`));
    const aligned = new Map();  // hit sentence -> [pairs]
    for (const p of hit.pairs) {
      if (!aligned.has(p.hit_sentence)) aligned.set(p.hit_sentence, []);
      aligned.get(p.hit_sentence).push(p);
    }
    const sentences = el("ol", "hit-sentences");
    hit.sentences.forEach((s, j) => {
      const item = el("li", "hit-sentence");
      item.dataset.index = j;
      item.append(el("span", "sid", `s${j}`));
      const pairs = aligned.get(j);
      if (pairs) {
        item.classList.add("aligned");
        colour(item, slot.get(pairs[0].query_sentence));
        for (const p of pairs) {
          const tag = el("span", "align-tag", `q${p.query_sentence} ${Math.round(100 * p.weight)}%`);
          colour(tag, slot.get(p.query_sentence));
          tag.title = `q${p.query_sentence} → s${j}: L2 ${p.dist.toFixed(3)}, ${Math.round(100 * p.weight)}% of its mass`;
          item.append(tag);
        }
      }
      item.append(el("span", "text", s.text));
      sentences.append(item);
    });
    const body = el("div", "hit-body");
    body.append(sentences, planTable(hit, rows));
    card.append(head, body);
    list.append(card);
  }
}

function planTable(hit, rows) {
  const box = el("div", "plan-box", "transport plan");
  const table = el("table", "plan");
  const head = el("tr");
  head.append(el("th"));
  hit.sentences.forEach((_, j) => head.append(el("th", null, `s${j}`)));
  table.append(head);
  const peak = Math.max(1e-12, ...hit.plan.flat());
  hit.plan.forEach((row, r) => {
    const tr = el("tr");
    const label = el("th", "qlabel", `q${rows[r]}`);
    colour(label, r);
    tr.append(label);
    row.forEach((mass, j) => {
      const td = el("td");
      td.style.backgroundColor = `rgba(33, 96, 168, ${(mass / peak).toFixed(3)})`;
      td.title = `q${rows[r]} → s${j}: ${(100 * mass).toFixed(1)}% of the mass, L2 ${hit.dist[r][j].toFixed(3)}`;
      td.dataset.mass = mass;
      tr.append(td);
    });
    table.append(tr);
  });
  box.append(table);
  return box;
}

// ---- wiring ---------------------------------------------------------------------------------------
$("paper-filter").addEventListener("input", () => {
  clearTimeout(state.filterTimer);
  state.filterTimer = setTimeout(filterPapers, 200);
});
$("search-btn").addEventListener("click", search);
$("clear-selection").addEventListener("click", () => selectWhere(() => false));
$("select-all").addEventListener("click", () => selectWhere(() => true));
document.querySelectorAll(".facet-btn").forEach((b) =>
  b.addEventListener("click", () => selectWhere((s) => s.facet === b.dataset.facet)));

loadInfo().then(filterPapers).catch((err) => status(err.message, true));
