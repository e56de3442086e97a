// The aspect-selection page: pick a paper, select sentences, search, read why each paper matched.
// Every text from the server is inserted with textContent (never as HTML).
"use strict";

const PALETTE = ["#2166ac", "#d6604d", "#1b9e77", "#7570b3", "#e6ab02", "#e7298a", "#66a61e", "#a6761d"];
const TINTS = ["#e3edf7", "#fbe7e3", "#e0f3ee", "#ebeaf5", "#fbf1d5", "#fae1ee", "#e7f2dc", "#f1e8dc"];
const PAGE = 30;  // papers listed per request; "more papers" fetches the next ones
const NO_WEIGHT = 0.0005;  // a selected sentence with less of the plan's weight shows as 0.0 %: it "carries no weight"
const MODES = {  // each re-ranker's one explanation, shown beside the controls (never repeated per search)
  ot: {
    name: "multi match (OT)",
    help: "Multi match: every selected sentence counts, its weight spread over the hit's sentences that " +
      "resemble it (the transport plan drawn beside each hit); the score is minus the weighted average distance.",
  },
  minl2: {
    name: "single match (min L2)",
    help: "Single match: a paper scores by its one sentence closest to any of yours; the score is minus that " +
      "distance. Each tag shows one of your sentences and its distance to the nearest sentence of the hit.",
  },
  maxpassage: {
    name: "best passage",
    help: "Best passage: a paper scores by its best run of consecutive sentences, compared with the mean of " +
      "your selected sentences and mixed with the first stage's score (both shown under each hit).",
  },
  hybrid: {
    name: "aspect hybrid",
    help: "Aspect hybrid: the whole abstract's vector compared with each hit's, plus your selected sentences " +
      "(their mean) compared with the hit's whole abstract; the score is the sum, and each hit shows both " +
      "terms' shares of it. Selecting sentences moves the second term only.",
  },
  none: {
    name: "first stage only",
    help: "No re-ranking: papers in the first stage's order (the fastest). Each tag shows one of your " +
      "sentences and its distance to the nearest sentence of the hit.",
  },
};
const modeOf = (name) => MODES[name] || { name, help: `Re-ranked by the ${name} stage.` };  // a stage the page does not describe
const TAU_HELP = "Temperature: low lets the closest pair of sentences take nearly all the weight (like single " +
  "match); high makes every sentence, yours and the hit's, count about equally.";
const CROSS_HELP = "Cross-encoder (last stage): a trained model reads your selected sentences with each top " +
  "hit's title and abstract and re-scores it; by far the slowest stage (its time is shown apart).";
const PIPELINES = {  // first stages: what finds the shortlist
  ann: "dense (sentence vectors)",
  bm25: "lexical (BM25 over your selected sentences' words)",
  "ann,bm25": "fused (dense + lexical)",
  whole: "whole abstract (one vector a paper)",
};
const STAGES = {  // a hit's stage scores: short name, what the number is
  ann: ["dense", "dense first stage: minus the distance of the closest pair of sentences"],
  bm25: ["BM25", "lexical first stage: BM25 score of your selected sentences' words"],
  fused: ["fused", "the fusion of the dense and lexical first stages"],
  whole: ["whole", "whole-abstract first stage: the cosine of the abstracts' vectors"],
  minl2: ["min L2", "single match: minus the distance of the closest pair of sentences"],
  ot: ["OT", "multi match: minus the weighted average distance of the matched sentences"],
  maxpassage: ["passage", "best passage, mixed with the first stage's score"],
  hybrid: ["hybrid", "the aspect hybrid's score: the sum of the two shares beside it"],
  "hybrid/whole": ["whole", "its share of the hybrid score: the whole abstracts' cosine"],
  "hybrid/facet": ["aspect", "its share of the hybrid score: your selected sentences against the whole abstract"],
  crossencoder: ["cross-encoder", "the cross-encoder's score of this paper"],
};
const FACETS = ["background", "method", "result"];
const state = {
  paper: null, selected: new Set(), info: null, generation: null,
  filterTimer: null, listSeq: 0, listBusy: false, nextOffset: null,
  busy: false, ticket: 0, shown: null, failed: false, pickSeq: 0,
};
const $ = (id) => document.getElementById(id);
const narrow = () => window.matchMedia("(max-width: 899px)").matches;

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

function pct(share) {  // "62 %", under 1 % with one decimal ("0.3 %", "0.0 %")
  const p = 100 * share;
  return p >= 0.995 ? `${Math.round(p)} %` : `${p.toFixed(1)} %`;
}

function say(message, kind) {  // the status beside the Search button: kind "error", "hint" or none
  const box = $("status");
  box.textContent = message || "";
  box.classList.toggle("error", kind === "error");
  box.classList.toggle("hint", kind === "hint");
}

function facetChip(s) {
  if (!s.facet && !s.label) return null;
  return el("span", `facet facet-${s.facet || "other"}`, s.facet || s.label.replace(/_label$/, ""));
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body;
  try { body = await response.json(); } catch (e) { body = { error: `HTTP ${response.status}` }; }
  noteGeneration(body.generation || response.headers.get("X-Aspire-Generation"),
    response.headers.get("X-Aspire-Generation-Digest"));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

// Every answer names the index generation it came from and its manifest's digest: an index deleted and built
// again starts again at gen-000001, so the name alone once hid a rebuild (the old page count stayed). A rebuild
// reads the index's counts again and lists the papers again from the first: the old list kept papers the index
// no longer holds, and "more papers" went on at its offset into the new index's order, skipping the papers before it.
function noteGeneration(gen, digest) {
  const id = digest ? `${gen} ${digest}` : gen;
  if (!gen || id === state.generation) return;
  const rebuilt = state.generation !== null;
  state.generation = id;
  $("generation").textContent = `index ${gen}`;
  if (rebuilt) {
    $("generation").classList.add("changed");
    $("generation").title = `the index was rebuilt while this page was open; answers now come from ${gen}`;
    loadInfo().catch((err) => { $("index-info").textContent = `could not read the index: ${err.message}`; });
    filterPapers(false);
  }
}

// The choices of a select are the server's registries (/api/info: rerankers, pipelines); the page only names
// them, in its own order, and shows a name it does not know as it is.
function setChoices(select, values, label) {
  const current = select.value;
  const known = Array.from(select.options, (o) => o.value).filter((v) => values.includes(v));
  const order = known.concat(values.filter((v) => !known.includes(v)));
  select.replaceChildren(...order.map((v) => new Option(label(v) || v, v)));
  if (order.includes(current)) select.value = current;
}

function setK(k) {  // the "top" choice set to k, offered among the page's own where it is not one of them
  const select = $("k");
  const values = new Set(Array.from(select.options, (o) => Number(o.value)));
  values.add(k);
  select.replaceChildren(...[...values].sort((a, b) => a - b).map((v) => new Option(String(v), String(v))));
  select.value = String(k);
}

// ---- papers ---------------------------------------------------------------------------------------
async function loadInfo() {
  const info = await api("/api/info");
  state.info = info;
  $("index-info").textContent = `${info.n_papers} papers · ${info.n_sentences} sentences · model ${info.model}` +
    (info.labelled_papers ? ` · ${info.labelled_papers} with facet labels` : "");
  setChoices($("rerank"), info.rerankers, (v) => (v === "none" ? "off (first stage only)" : (MODES[v] || {}).name));
  setChoices($("stages"), info.pipelines, (v) => ({ ann: "dense", bm25: "lexical (BM25)", "ann,bm25": "fused", whole: "whole abstract" })[v]);
  if (!$("rerank").dataset.touched) $("rerank").value = info.rerank;
  if (!$("stages").dataset.touched) $("stages").value = info.stages;
  if (!$("k").dataset.touched) setK(info.k);  // the server's k (once always 10: a shortlist below it was refused)
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

function listNote(message, isError) {
  $("paper-count").textContent = message;
  $("paper-count").classList.toggle("error", Boolean(isError));
}

async function filterPapers(append) {
  if (append && (state.listBusy || state.nextOffset === null)) return;  // one "more papers" at a time
  const seq = append ? state.listSeq : ++state.listSeq;  // an answer to an older filter is dropped
  const q = $("paper-filter").value;
  const offset = append ? state.nextOffset : 0;
  state.listBusy = true;
  $("more-papers").disabled = true;
  try {
    const found = await api(`/api/papers?q=${encodeURIComponent(q)}&limit=${PAGE}&offset=${offset}`);
    if (seq !== state.listSeq) return;
    const list = $("paper-list");
    if (!append) list.replaceChildren();
    const listed = new Set([...list.querySelectorAll(".paper-item")].map((n) => n.dataset.id));
    for (const p of found.papers) {
      if (listed.has(p.paper_id)) continue;
      listed.add(p.paper_id);
      const item = el("li");
      const button = el("button", "paper-item");
      button.type = "button";
      button.dataset.id = p.paper_id;
      button.append(el("span", "pid", p.paper_id), el("span", "ptitle", p.title || "(untitled)"));
      if (state.paper && state.paper.paper_id === p.paper_id) button.classList.add("current");
      button.addEventListener("click", () => pickPaper(p.paper_id));
      item.append(button);
      list.append(item);
    }
    state.nextOffset = found.next_offset;
    $("more-papers").hidden = found.next_offset === null;
    listNote(listed.size ? `${listed.size} shown${found.next_offset === null ? "" : ", more match"}`
      : `no paper matches \u201c${q.trim()}\u201d (title words in any order, or the start of a paper id)`);
  } catch (err) {
    if (seq === state.listSeq) listNote(`could not list papers: ${err.message}`, true);
  } finally {
    if (seq === state.listSeq) {  // a newer listing (another filter, a rebuild) frees the list when it ends
      state.listBusy = false;
      $("more-papers").disabled = false;
    }
  }
}

async function pickPaper(id) {
  const pick = ++state.pickSeq;  // two quick clicks: the answer of the first could come last and be shown
  let paper;
  try {
    paper = await api(`/api/paper?id=${encodeURIComponent(id)}`);
  } catch (err) {
    if (pick === state.pickSeq) listNote(`could not open paper ${id}: ${err.message}`, true);
    return;
  }
  if (pick !== state.pickSeq) return;  // a later click's paper is shown, or on its way
  const previous = state.paper;
  state.paper = paper;
  state.selected = new Set();
  state.ticket += 1;  // an answer still on its way belongs to the previous query: it will be dropped
  document.querySelectorAll(".paper-item").forEach((n) => n.classList.toggle("current", n.dataset.id === id));
  document.querySelector("main").classList.remove("no-paper");  // the list gives the query its column
  $("query-empty").hidden = true;
  $("query-body").hidden = false;
  $("search-panel").hidden = false;
  $("search-row").hidden = false;
  $("query-title").textContent = `${paper.title}  (${paper.paper_id})`;
  const list = $("query-sentences");
  list.replaceChildren();
  paper.sentences.forEach((s, i) => {
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
  let anyFacet = false;  // a facet button only where this paper has sentences with that facet
  document.querySelectorAll(".facet-btn").forEach((b) => {
    b.hidden = !paper.sentences.some((s) => s.facet === b.dataset.facet);
    anyFacet = anyFacet || !b.hidden;
  });
  $("facet-label").textContent = anyFacet ? "select by facet:" : "select:";
  if (previous && previous.paper_id !== paper.paper_id && state.shown) {
    clearResults(`The results of ${previous.paper_id} were cleared: select sentences of this paper and search.`);
  }
  say("");
  renderSelection();
  if (narrow()) $("query-panel").scrollIntoView({ block: "start" });
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

function selection() { return [...state.selected].sort((a, b) => a - b); }

function renderSelection() {
  const rows = selection();
  document.querySelectorAll("#query-sentences .sentence").forEach((node) => {
    const i = Number(node.dataset.index);
    const on = state.selected.has(i);
    node.classList.toggle("selected", on);
    node.setAttribute("aria-checked", on ? "true" : "false");
    if (on) colour(node, rows.indexOf(i));
  });
  updateSearchButton();
  const box = $("status");
  if (!state.busy && state.selected.size === 0) say("Select at least one sentence to search.", "hint");
  else if (box.classList.contains("hint")) say("");
  markStale();
}

function updateSearchButton() {
  const button = $("search-btn");
  button.disabled = state.busy || !state.paper || state.selected.size === 0;
  button.textContent = state.busy ? "Searching\u2026" : "Search";
  button.setAttribute("aria-busy", state.busy ? "true" : "false");
}

function showMode() {
  const mode = $("rerank").value;
  $("mode-help").textContent = modeOf(mode).help + (mode === "ot" ? " " + TAU_HELP : "") +
    ($("cross").value === "on" ? " " + CROSS_HELP : "");
  $("shortlist-label").hidden = mode === "none";
  $("tau-label").hidden = mode !== "ot";
}

// ---- search ---------------------------------------------------------------------------------------
class InputError extends Error {}

function numberField(input, label, lo, hi, whole) {
  // the field's value, or InputError naming the field by its label and saying what it takes
  const rule = `use ${whole ? "a whole number" : "a number"} from ${lo} to ${hi}`;
  const text = input.value.trim();
  input.setAttribute("aria-invalid", "true");
  if (text === "") {
    throw new InputError(`${label} is ${input.validity.badInput ? "not a number" : "empty"}: ${rule}.`);
  }
  const value = Number(text);
  if (!Number.isFinite(value) || value < lo || value > hi || (whole && !Number.isInteger(value))) {
    throw new InputError(`${label} ${text} is out of range: ${rule}.`);
  }
  input.removeAttribute("aria-invalid");
  return value;
}

function requestBody() {  // the search request from the controls, or InputError (nothing is replaced)
  const rerank = $("rerank").value;
  const body = { paper_id: state.paper.paper_id, sentences: selection(), k: Number($("k").value), rerank,
                 stages: $("stages").value };
  for (const id of ["shortlist", "tau"]) $(id).removeAttribute("aria-invalid");
  if (rerank !== "none") body.shortlist = numberField($("shortlist"), "Shortlist", body.k, state.info.max_shortlist, true);
  if (rerank === "ot") body.tau = numberField($("tau"), "Temperature", state.info.min_tau, state.info.max_tau, false);
  if ($("cross").value === "on") body.cross_encoder = true;
  return body;
}

function setBusy(on) {
  state.busy = on;
  updateSearchButton();
  $("results").classList.toggle("loading", on);
}

async function search() {
  if (state.busy) return;  // one request at a time: the button is disabled until the answer is in
  if (!state.paper || state.selected.size === 0) { say("Select at least one sentence to search.", "error"); return; }
  if (!state.info) { say("The server's search settings could not be read: reload the page.", "error"); return; }
  let body;
  try { body = requestBody(); } catch (err) {
    if (!(err instanceof InputError)) throw err;
    failed(err.message);
    return;
  }
  const ticket = ++state.ticket;
  setBusy(true);
  say("Searching\u2026");
  const started = performance.now();
  try {
    const result = await api("/api/search", { method: "POST", headers: { "Content-Type": "application/json" },
                                              body: JSON.stringify(body) });
    if (ticket !== state.ticket) return;  // the paper was changed meanwhile
    const ms = Math.round(performance.now() - started);
    const cross = result.cross_encoder ? `, of which cross-encoder ${Math.round(result.cross_encoder.ms)} ms` : "";
    state.failed = false;
    renderResults(result);
    say(`${result.hits.length} papers in ${ms} ms${cross}` + (result.note ? ` (${result.note})` : ""));
    if (narrow()) $("results-col").scrollIntoView({ block: "start" });
  } catch (err) {
    if (ticket === state.ticket) failed(err.message);
  } finally {
    setBusy(false);
    if (ticket !== state.ticket && $("status").textContent === "Searching\u2026") say("");
  }
}

function failed(message) {  // a refused search: say why beside the button, grey out the results it did not replace
  say(message, "error");
  if (state.shown) { state.failed = true; markStale(); }
}

function clearResults(message) {
  state.shown = null;
  state.failed = false;
  $("results").replaceChildren();
  $("legend").hidden = true;
  $("results-head").textContent = message;
  markStale();
}

function markStale() {  // results of another selection (or kept after a failed search) are greyed out and say so
  const shown = state.shown;
  let why = "";
  if (shown) {
    const same = state.paper && state.paper.paper_id === shown.paper_id &&
      selection().join(",") === shown.rows.join(",");
    if (!same) why = `Out of date: these results are for ${shown.rows.map((q) => "q" + q).join(", ")}` +
      `${state.paper && state.paper.paper_id !== shown.paper_id ? ` of ${shown.paper_id}` : ""}; ` +
      "search again for the current selection.";
    else if (state.failed) why = "Not updated: the last search was refused (see beside the Search button); " +
      "these are the results before it.";
  }
  $("results").classList.toggle("stale", Boolean(why));
  $("legend").classList.toggle("stale", Boolean(why));
  $("stale-note").textContent = why;
  $("stale-note").hidden = !why;
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
  if (ot) {
    scale.append(el("span", "legend-key", "grid: where each sentence's weight goes"), el("span", "muted", "none"),
                 el("span", "ramp"), el("span", "muted", "the row's largest"));
  } else {
    scale.append(el("span", "legend-key", "grid: distance"), el("span", "muted", "far"), el("span", "ramp"),
                 el("span", "muted", "near (outlined: each row's nearest)"));
  }
  const tags = el("div", "legend-row");
  tags.append(el("span", "legend-key", "tags"), el("span", "muted", ot
    ? "where each of your sentences sends most of its weight, and what share; a grid row is one of your " +
      "sentences, its \u201cweight\u201d how much it counts in this paper"
    : "each of your sentences at the hit sentence nearest to it, with their distance (lower is closer)"));
  box.append(mine, scale, tags);
  if (result.hits.some((h) => h.sentences.some((s) => s.facet))) {
    const facets = el("div", "legend-row");
    facets.append(el("span", "legend-key", "facets"));
    FACETS.forEach((f) => facets.append(el("span", `facet facet-${f}`, f)));
    box.append(facets);
  }
  box.hidden = false;
}

function scoreNote(result) {
  const negative = result.hits.some((h) => h.score < 0);
  return negative ? "Higher scores are better; these are minus a distance, so nearer 0 is closer."
    : "Higher scores are better.";
}

function renderResults(result) {
  const rows = result.plan_rows;  // selected query positions, in the grids' row order
  const ot = result.rerank === "ot";
  const paper = state.paper;
  $("results-head").textContent = `Ranked by ${modeOf(result.rerank).name} after the ${PIPELINES[result.stages]} ` +
    `first stage${result.stages === "ann,bm25" ? ` (fusion ${result.fuse})` : ""}, using ` +
    `${rows.map((q) => "q" + q).join(", ")} of \u201c${paper.title}\u201d` +
    (ot ? ` at temperature ${result.ot.tau}. ` : ". ") + scoreNote(result) +
    (result.cross_encoder ? ` Then the cross-encoder re-scored the top ${result.cross_encoder.top} ` +
      `(weight ${result.cross_encoder.weight}, ${Math.round(result.cross_encoder.ms)} ms).` : "");
  renderLegend(result);
  const list = $("results");
  list.replaceChildren();
  for (const hit of result.hits) list.append(hitCard(hit, rows, ot, result));
  state.shown = { paper_id: result.paper_id, rows: [...rows] };
  markStale();
}

function hitCard(hit, rows, ot, result) {
  const card = el("li", "hit");
  card.dataset.id = hit.paper_id;
  const head = el("div", "hit-head");
  const score = el("span", "hit-meta", `${hit.paper_id} · score ${hit.score.toFixed(3)}`);
  score.title = `score: ${modeOf(result.rerank).name}${hit.score < 0 ? " (minus a distance: nearer 0 is closer)" : ""}`;
  head.append(el("span", "hit-rank", String(hit.rank)), el("span", "hit-title", hit.title || "(untitled)"), score,
              stageScores(hit.stages));
  const explained = ot ? planExplained(hit) : nearestExplained(hit);  // one reading of the grid drawn
  const side = el("div", "hit-side");
  side.append(ot ? planTable(hit, rows, explained) : distTable(hit, rows, explained));  // sets each row's tag
  const tagsAt = new Map();  // hit sentence -> [row]
  explained.forEach((row, r) => {
    if (row.tagged) tagsAt.set(row.best, [...(tagsAt.get(row.best) || []), r]);
  });
  const sentences = el("ol", "hit-sentences");
  hit.sentences.forEach((s, j) => {
    const item = el("li", "hit-sentence");
    item.dataset.index = j;
    item.append(el("span", "sid", `s${j}`));
    const chip = facetChip(s);
    if (chip) item.append(chip);
    const at = tagsAt.get(j) || [];
    if (at.length) {
      item.classList.add("aligned");
      colour(item, at[0]);
    }
    for (const r of at) {
      const row = explained[r];
      const tag = el("span", "align-tag", row.tag);
      tag.dataset.row = r;
      colour(tag, r);
      tag.title = row.tip(j);
      item.append(tag);
    }
    item.append(el("span", "text", s.text));
    sentences.append(item);
  });
  const unweighted = ot ? rows.filter((_, r) => !explained[r].tagged) : [];
  if (unweighted.length) {
    side.append(el("p", "no-weight-note", `${unweighted.map((q) => "q" + q).join(", ")}: no weight in this ` +
      `paper at temperature ${result.ot.tau} (another of your sentences has a closer match here), so ` +
      `${unweighted.length > 1 ? "they do" : "it does"} not count in its score.`));
  }
  const body = el("div", "hit-body");
  body.append(sentences, side);
  card.append(head, body);
  return card;
}

function planExplained(hit) {
  // per row of the plan drawn: its weight (share of the plan's total), each cell's share of the row, the
  // cell with the largest share and the tag naming it; a row under NO_WEIGHT gets no tag
  const rowMass = hit.plan.map((row) => row.reduce((a, b) => a + b, 0));
  const total = rowMass.reduce((a, b) => a + b, 0);
  return hit.plan.map((row, r) => {
    const weight = total > 0 ? rowMass[r] / total : 0;
    const share = row.map((v) => (rowMass[r] > 0 ? v / rowMass[r] : 0));
    const best = share.indexOf(Math.max(...share));
    return { weight, share, best, tagged: weight >= NO_WEIGHT };  // tag and tip: planTable
  });
}

function nearestExplained(hit) {  // per row of the distances drawn: the nearest hit sentence
  return hit.dist.map((row) => {
    const nearest = Math.min(...row);
    return { best: row.indexOf(nearest), nearest, tagged: true };
  });
}

function gridTable(hit, rows, cls, caption, cell, extra) {
  const box = el("div", "grid-box", caption);
  const table = el("table", `grid ${cls}`);
  const head = el("tr");
  head.append(el("th"));
  hit.sentences.forEach((_, j) => head.append(el("th", null, `s${j}`)));
  if (extra) {
    const th = el("th", "extra", extra.head);
    th.title = extra.title;
    head.append(th);
  }
  table.append(head);
  rows.forEach((q, r) => {
    const tr = el("tr");
    tr.dataset.row = r;
    const label = el("th", "qlabel", `q${q}`);
    colour(label, r);
    tr.append(label);
    hit.sentences.forEach((_, j) => { const td = el("td"); cell(td, r, j, q); tr.append(td); });
    if (extra) tr.append(extra.cell(r, q));
    table.append(tr);
  });
  box.append(table);
  return box;
}

function planTable(hit, rows, explained) {
  // shade: each cell's share of its row's weight, scaled to the row's largest share (a near-flat row still
  // shows its order); the "weight" column: how much each of your sentences counts in this paper
  rows.forEach((q, r) => {
    const row = explained[r];
    row.tag = `q${q} ${pct(row.share[row.best])}`;
    const even = 1 / hit.sentences.length;
    row.tip = (j) => `${pct(row.share[j])} of q${q}'s weight goes to s${j} (spread evenly it would be ` +
      `${pct(even)} each); distance ${hit.dist[r][j].toFixed(3)}`;
  });
  return gridTable(hit, rows, "plan", "how your sentences' weight is sent (transport plan)", (td, r, j, q) => {
    const row = explained[r];
    const share = row.share[j];
    td.dataset.share = share.toFixed(4);
    if (!row.tagged) {
      td.classList.add("unweighted");
      td.title = `q${q} carries no weight in this paper (${pct(row.weight)})`;
      return;
    }
    const top = row.share[row.best];
    td.style.backgroundColor = `rgba(33, 96, 168, ${(top > 0 ? share / top : 0).toFixed(3)})`;
    if (j === row.best) td.classList.add("nearest");
    td.title = `q${q} \u2192 s${j}: ${pct(share)} of q${q}'s weight, distance ${hit.dist[r][j].toFixed(3)}`;
  }, {
    head: "weight", title: "how much each of your sentences counts in this paper (the temperature sets it)",
    cell: (r, q) => {
      const td = el("td", "weight", pct(explained[r].weight));
      td.dataset.weight = explained[r].weight.toFixed(6);
      td.title = `q${q} carries ${pct(explained[r].weight)} of the weight in this paper`;
      return td;
    },
  });
}

function distTable(hit, rows, explained) {  // shade: nearness within the hit; outlined: each row's nearest
  const all = hit.dist.flat();
  const lo = Math.min(...all), span = Math.max(1e-12, Math.max(...all) - lo);
  rows.forEach((q, r) => {
    const row = explained[r];
    row.tag = `q${q} · ${row.nearest.toFixed(2)}`;
    row.tip = (j) => `s${j} is the sentence nearest to q${q} (distance ${row.nearest.toFixed(3)}; lower is closer)`;
  });
  return gridTable(hit, rows, "dist", "distances", (td, r, j, q) => {
    const d = hit.dist[r][j];
    td.style.backgroundColor = `rgba(33, 96, 168, ${(1 - (d - lo) / span).toFixed(3)})`;
    if (j === explained[r].best) td.classList.add("nearest");
    td.title = `q${q} \u2192 s${j}: distance ${d.toFixed(3)}`;
  });
}

function stageScores(stages) {  // each stage's own score of this hit (higher is better in every stage)
  const box = el("span", "hit-stages");
  for (const [name, value] of Object.entries(stages || {})) {
    const [short, what] = STAGES[name] || [name, name];
    const chip = el("span", "stage-score", `${short} ${Number(value).toFixed(3)}`);
    chip.dataset.stage = name;
    chip.title = `${what} (higher is better)`;
    box.append(chip);
  }
  return box;
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
$("k").addEventListener("change", () => { $("k").dataset.touched = "1"; });
$("cross").addEventListener("change", showMode);
for (const id of ["shortlist", "tau"]) {  // Enter in a number field searches, as the button would
  $(id).addEventListener("keydown", (e) => { if (e.key === "Enter" && !$("search-btn").disabled) search(); });
}
$("clear-selection").addEventListener("click", () => selectWhere(() => false));
$("select-all").addEventListener("click", () => selectWhere(() => true));
document.querySelectorAll(".facet-btn").forEach((b) =>
  b.addEventListener("click", () => selectWhere((s) => s.facet === b.dataset.facet)));

loadInfo().then(() => filterPapers(false))
  .catch((err) => { $("index-info").textContent = `could not read the index: ${err.message}`; });
