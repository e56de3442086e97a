// The aspect-selection page: pick a paper, select sentences, search, read why each paper matched.
// Every text from the server is inserted with textContent (never as HTML).
"use strict";

const PALETTE = ["#2166ac", "#d6604d", "#1b9e77", "#7570b3", "#e6ab02", "#e7298a", "#66a61e", "#a6761d"];
const TINTS = ["#e3edf7", "#fbe7e3", "#e0f3ee", "#ebeaf5", "#fbf1d5", "#fae1ee", "#e7f2dc", "#f1e8dc"];
const PAGE = 30;  // papers listed per request; "more papers" fetches the next ones
const MODES = {
  ot: {
    name: "multi match (OT)",
    help: "Multi match: each selected sentence sends its mass to the hit's sentences along an optimal-" +
      "transport plan, and the score is minus the plan's total L2 cost, so several of your sentences can " +
      "match several of the hit's. A percentage is always the share of one selected sentence's mass: " +
      "\u201cq5 62 %\u201d marks the hit sentence that receives 62 % of q5's mass.",
  },
  minl2: {
    name: "single match (min L2)",
    help: "Single match: the score is minus the L2 distance of the closest pair between your selected " +
      "sentences and the hit's, computed exactly over the shortlist. \u201cq5 \u00b7 L2 0.83\u201d marks " +
      "the hit sentence nearest to q5; there is no transport plan and no percentage.",
  },
  maxpassage: {
    name: "best passage",
    help: "Best passage: each shortlisted paper scores as its best window of sentences (cosine with the " +
      "mean of your selected sentences), mixed with the first stage's score; the stage scores under each " +
      "hit show both. \u201cq5 \u00b7 L2 0.83\u201d marks the hit sentence nearest to q5.",
  },
  none: {
    name: "first stage only",
    help: "No re-ranking: papers ranked straight by the first stage (the nearest-neighbour index's " +
      "approximate single match, BM25, or their fusion; the fastest mode). \u201cq5 \u00b7 L2 0.83\u201d marks the hit sentence nearest to q5; there " +
      "is no transport plan and no percentage.",
  },
};
const PIPELINES = {  // first stages: what finds the shortlist
  ann: "dense (sentence vectors)",
  bm25: "lexical (BM25 over your selected sentences' words)",
  "ann,bm25": "fused (dense + lexical)",
};
const STAGE_NAMES = { ann: "dense", bm25: "BM25", fused: "fused", minl2: "min L2", ot: "OT", maxpassage: "passage",
                      crossencoder: "cross-encoder" };
const CROSS_HELP = "Cross-encoder (last stage): a trained pair model reads your selected sentences with each of " +
  "the top hits' title and abstract; its logit (\u201ccross-encoder\u201d under each re-scored hit) is mixed " +
  "with the previous score. It is by far the slowest stage: its time is shown apart.";
const FACETS = ["background", "method", "result"];
const state = { paper: null, selected: new Set(), filterTimer: null, info: null, generation: null, nextOffset: null };
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

function facetChip(s) {
  if (!s.facet && !s.label) return null;
  return el("span", `facet facet-${s.facet || "other"}`, s.facet || s.label.replace(/_label$/, ""));
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body;
  try { body = await response.json(); } catch (e) { body = { error: `HTTP ${response.status}` }; }
  noteGeneration(body.generation || response.headers.get("X-Aspire-Generation"));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function noteGeneration(gen) {  // every answer names the index generation it came from
  if (!gen || gen === state.generation) return;
  const rebuilt = state.generation !== null;
  state.generation = gen;
  $("generation").textContent = `index ${gen}`;
  if (rebuilt) {
    $("generation").classList.add("changed");
    $("generation").title = `the index was rebuilt while this page was open; answers now come from ${gen}`;
    loadInfo().catch((err) => status(err.message, true));
  }
}

// ---- papers ---------------------------------------------------------------------------------------
async function loadInfo() {
  const info = await api("/api/info");
  state.info = info;
  $("index-info").textContent = `${info.n_papers} papers · ${info.n_sentences} sentences · model ${info.model}` +
    (info.labelled_papers ? ` · ${info.labelled_papers} with facet labels` : "");
  if (!$("rerank").dataset.touched) $("rerank").value = info.rerank;
  if (!$("stages").dataset.touched) $("stages").value = info.stages;
  $("shortlist").max = info.max_shortlist;
  if (!$("shortlist").value) $("shortlist").value = Math.min(info.shortlist, info.max_shortlist);
  $("tau").min = info.min_tau;
  $("tau").max = info.max_tau;
  if (!$("tau").value) $("tau").value = info.ot.tau;
  const cross = info.cross_encoder || { loaded: false };
  $("cross-label").hidden = !cross.loaded;  // offered only when the server holds a cross-encoder
  $("cross").options[1].textContent = cross.loaded ? `on (top ${cross.top}, weight ${cross.weight})` : "on";
  if (!cross.loaded) $("cross").value = "off";
  showMode();
}

async function filterPapers(append) {
  const q = $("paper-filter").value;
  const offset = append ? state.nextOffset : 0;
  try {
    const found = await api(`/api/papers?q=${encodeURIComponent(q)}&limit=${PAGE}&offset=${offset}`);
    const list = $("paper-list");
    if (!append) list.replaceChildren();
    for (const p of found.papers) {
      const item = el("li");
      const button = el("button", "paper-item");
      button.type = "button";
      button.dataset.id = p.paper_id;
      button.append(el("span", "pid", p.paper_id), document.createTextNode(p.title || "(untitled)"));
      if (state.paper && state.paper.paper_id === p.paper_id) button.classList.add("current");
      button.addEventListener("click", () => pickPaper(p.paper_id));
      item.append(button);
      list.append(item);
    }
    if (!list.children.length) list.append(el("li", "muted", "no paper matches"));
    state.nextOffset = found.next_offset;
    $("more-papers").hidden = found.next_offset === null;
    const shown = list.querySelectorAll(".paper-item").length;
    $("paper-count").textContent = shown ? `${shown} shown${found.next_offset === null ? "" : ", more match"}` : "";
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
    item.tabIndex = 0;
    item.setAttribute("role", "checkbox");
    item.append(el("span", "qid", `q${i}`));
    const chip = facetChip(s);
    if (chip) item.append(chip);
    item.append(el("span", "text", s.text));
    item.addEventListener("click", () => toggle(i));
    item.addEventListener("keydown", (e) => {
      if (e.key === " " || e.key === "Enter") { e.preventDefault(); toggle(i); }
    });
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
    node.setAttribute("aria-checked", on ? "true" : "false");
    if (on) colour(node, slotOf(i));
  });
  $("search-btn").disabled = state.selected.size === 0;
}

function showMode() {
  const mode = $("rerank").value;
  $("mode-help").textContent = MODES[mode].help;
  $("shortlist-label").hidden = mode === "none";
  $("tau-label").hidden = mode !== "ot";
}

// ---- search ---------------------------------------------------------------------------------------
async function search() {
  if (!state.paper || state.selected.size === 0) { status("select at least one sentence", true); return; }
  const rerank = $("rerank").value;
  const body = { paper_id: state.paper.paper_id, sentences: [...state.selected].sort((a, b) => a - b),
                 k: Number($("k").value), rerank, stages: $("stages").value };
  if (rerank !== "none") body.shortlist = Math.max(Number($("shortlist").value), body.k);
  if (rerank === "ot") body.tau = Number($("tau").value);
  if ($("cross").value === "on") body.cross_encoder = true;
  status("searching…");
  const started = performance.now();
  let result;
  try {
    result = await api("/api/search", { method: "POST", headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify(body) });
  } catch (err) { status(err.message, true); return; }
  const ms = Math.round(performance.now() - started);
  const cross = result.cross_encoder ? `, of which cross-encoder ${Math.round(result.cross_encoder.ms)} ms` : "";
  status(`${result.hits.length} papers in ${ms} ms${cross}` + (result.note ? ` (${result.note})` : ""));
  renderResults(result);
}

function renderLegend(result) {
  const box = $("legend");
  box.replaceChildren();
  const ot = result.rerank === "ot";
  const mine = el("div", "legend-row");
  mine.append(el("span", "legend-key", "your sentences"));
  result.plan_rows.forEach((q, r) => {
    const chip = el("span", "legend-q", `q${q}`);
    colour(chip, r);
    chip.title = state.paper.sentences[q].text;
    mine.append(chip);
  });
  const scale = el("div", "legend-row");
  scale.append(el("span", "legend-key", ot ? "heatmap: share of a row's mass" : "heatmap: L2 distance"),
               el("span", "muted", ot ? "0 %" : "far"), el("span", ot ? "ramp" : "ramp ramp-dist"),
               el("span", "muted", ot ? "100 %" : "near (outlined: nearest)"));
  const facets = el("div", "legend-row");
  facets.append(el("span", "legend-key", "facets"));
  FACETS.forEach((f) => facets.append(el("span", `facet facet-${f}`, f)));
  box.append(mine, scale, facets);
  box.hidden = false;
}

function renderResults(result) {
  const rows = result.plan_rows;  // selected query positions, in the grids' row order
  const slot = new Map(rows.map((q, r) => [q, r]));
  const ot = result.rerank === "ot";
  $("results-head").textContent = `First stage ${PIPELINES[result.stages]}` +
    (result.stages === "ann,bm25" ? ` (fusion ${result.fuse})` : "") + `; ranked by ${MODES[result.rerank].name} using ` +
    `${rows.map((q) => "q" + q).join(", ")} of ${state.paper.paper_id}` +
    (ot ? ` (OT eps ${result.ot.eps}, temperature ${result.ot.tau}). ` : ". ") + MODES[result.rerank].help +
    (result.cross_encoder ? ` Then the cross-encoder re-scored the top ${result.cross_encoder.top} ` +
      `(weight ${result.cross_encoder.weight}, ${result.cross_encoder.ms} ms). ` + CROSS_HELP : "");
  renderLegend(result);
  const list = $("results");
  list.replaceChildren();
  for (const hit of result.hits) {
    const card = el("li", "hit");
    card.dataset.id = hit.paper_id;
    const head = el("div", "hit-head");
    head.append(el("span", "hit-rank", String(hit.rank)), el("span", "hit-title", hit.title || "(untitled)"),
                el("span", "hit-meta", `${hit.paper_id} · score ${hit.score.toFixed(3)}`));
    head.append(stageScores(hit.stages));
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
      const chip = facetChip(s);
      if (chip) item.append(chip);
      const pairs = aligned.get(j);
      if (pairs) {
        item.classList.add("aligned");
        colour(item, slot.get(pairs[0].query_sentence));
        for (const p of pairs) {
          const pct = Math.round(100 * p.weight);
          const tag = el("span", "align-tag", ot ? `q${p.query_sentence} ${pct} %` : `q${p.query_sentence} · L2 ${p.dist.toFixed(2)}`);
          colour(tag, slot.get(p.query_sentence));
          tag.title = ot ? `${pct} % of q${p.query_sentence}'s mass goes to s${j} (L2 ${p.dist.toFixed(3)})`
            : `s${j} is the sentence nearest to q${p.query_sentence} (L2 ${p.dist.toFixed(3)})`;
          item.append(tag);
        }
      }
      item.append(el("span", "text", s.text));
      sentences.append(item);
    });
    const body = el("div", "hit-body");
    body.append(sentences, ot ? planTable(hit, rows) : distTable(hit, rows));
    card.append(head, body);
    list.append(card);
  }
}

function gridTable(hit, rows, cls, caption, cell) {
  const box = el("div", "grid-box", caption);
  const table = el("table", `grid ${cls}`);
  const head = el("tr");
  head.append(el("th"));
  hit.sentences.forEach((_, j) => head.append(el("th", null, `s${j}`)));
  table.append(head);
  rows.forEach((q, r) => {
    const tr = el("tr");
    const label = el("th", "qlabel", `q${q}`);
    colour(label, r);
    tr.append(label);
    hit.sentences.forEach((_, j) => { const td = el("td"); cell(td, r, j, q); tr.append(td); });
    table.append(tr);
  });
  box.append(table);
  return box;
}

function planTable(hit, rows) {  // shade and percentage: share of the row's (query sentence's) mass
  const rowMass = hit.plan.map((row) => Math.max(1e-12, row.reduce((a, b) => a + b, 0)));
  return gridTable(hit, rows, "plan", "transport plan", (td, r, j, q) => {
    const share = hit.plan[r][j] / rowMass[r];
    td.style.backgroundColor = `rgba(33, 96, 168, ${share.toFixed(3)})`;
    td.title = `q${q} → s${j}: ${(100 * share).toFixed(1)} % of q${q}'s mass, L2 ${hit.dist[r][j].toFixed(3)}`;
    td.dataset.share = share.toFixed(4);
  });
}

function stageScores(stages) {  // each stage's own score of this hit (higher is better in every stage)
  const box = el("span", "hit-stages");
  for (const [name, value] of Object.entries(stages || {})) {
    const chip = el("span", "stage-score", `${STAGE_NAMES[name] || name} ${Number(value).toFixed(3)}`);
    chip.dataset.stage = name;
    box.append(chip);
  }
  return box;
}

function distTable(hit, rows) {  // shade: nearness within the hit; outlined: each row's nearest sentence
  const all = hit.dist.flat();
  const lo = Math.min(...all), span = Math.max(1e-12, Math.max(...all) - lo);
  return gridTable(hit, rows, "dist", "L2 distances", (td, r, j, q) => {
    const d = hit.dist[r][j];
    td.style.backgroundColor = `rgba(33, 96, 168, ${(1 - (d - lo) / span).toFixed(3)})`;
    if (d === Math.min(...hit.dist[r])) td.classList.add("nearest");
    td.title = `q${q} → s${j}: L2 ${d.toFixed(3)}`;
  });
}

// ---- wiring ---------------------------------------------------------------------------------------
$("paper-filter").addEventListener("input", () => {
  clearTimeout(state.filterTimer);
  state.filterTimer = setTimeout(() => filterPapers(false), 200);
});
$("more-papers").addEventListener("click", () => filterPapers(true));
$("search-btn").addEventListener("click", search);
$("rerank").addEventListener("change", () => { $("rerank").dataset.touched = "1"; showMode(); });
$("stages").addEventListener("change", () => { $("stages").dataset.touched = "1"; });
$("clear-selection").addEventListener("click", () => selectWhere(() => false));
$("select-all").addEventListener("click", () => selectWhere(() => true));
document.querySelectorAll(".facet-btn").forEach((b) =>
  b.addEventListener("click", () => selectWhere((s) => s.facet === b.dataset.facet)));

loadInfo().then(() => filterPapers(false)).catch((err) => status(err.message, true));
