"""Document models: one code path for every paper model, chosen by `model.kind`.

A `DocumentModel` wraps a contextual sentence encoder and turns a `TripletBatch` (anchors,
co-cited positives, optional hard negatives) into a triplet margin loss over a *distance*:

| kind            | d(anchor, positive)                      | d(anchor, negative) | inference scorer |
|-----------------|------------------------------------------|---------------------|------------------|
| `ts`            | L2 of the `cc_align` sentence pair       | min-L2              | `minl2`          |
| `abs`           | L2 of the `abs_align` sentence pair      | min-L2              | `minl2`          |
| `ot`            | OT distance                              | OT distance         | `ot`             |
| `ts+ot`         | the sum of the `ts` and `ot` losses      |                     | `ot`             |
| `max`           | min-L2 (no text supervision)             | min-L2              | `minl2`          |
| `att`           | attention-aggregated distance            | same                | `attention`      |
| `cocite_vector` | L2 of mean-pooled paper vectors          | same                | `vector` (L2)    |
| `abstract`      | 1 - cosine of whole-abstract vectors     | same                | `abstract`       |
| `hybrid`        | two terms from one pass: 1 - cosine of the whole vectors, and 1 - cosine of the anchor's aligned sentence (its facet) and the other's whole vector | same | `hybrid` |
| `hybrid+ts`     | `hybrid`'s two terms and `ts`'s aligned sentence pair (so the hybrid score's `minl2` term is trained too) | same | `hybrid` |

Distances are the `pairwise_dist` / `dist` of the `aspire.scoring` scorers (whose similarity
`score` is minus them), so training and inference share the same maths. Kind `abstract` encodes
each paper as one text (`aspire.train.terms.AbstractText`, the `abstract` scorer's pipeline).
`loss.kind` other than `triplet` turns the B x B in-batch similarity matrix (plus every hard negative
of the batch) into a ranking loss (`aspire.losses.MATRIX_LOSSES`); for OT that is a batch of B x B
transport problems through the batched Sinkhorn kernel. A batch may mix tasks: each task's loss is
the mean over its own anchors, and `loss` is their sum weighted by `TripletBatch.weights` (`loss.term_scale` gives a
term its own `mnrl` scale). With a query adapter (`model.adapter.scope: query`) the anchors are encoded with it on
and the papers with it off. `encode` runs the very forward pass used in training (no grad, eval mode; mean-pooled
to one vector for `cocite_vector`) and `score` applies the kind's inference scorer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from aspire.batch import DocBatch
from aspire.config import ConfigError, from_dict, to_dict
from aspire.data.papers import Paper, as_papers
from aspire.encoders.codes import code_token
from aspire.encoders.contextual import check_batch_size, eval_mode
from aspire.encoders.trained import MODEL_FILE
from aspire.io import NonFiniteConstant, finite_dumps, loads_unique
from aspire.losses import (
    aligned_sentence_dist,
    in_batch_negative_mask,
    masked_anchor_mean,
    matrix_loss,
    mean_pool_doc,
    pick_one_negative,
    triplet_margin_dist_per_anchor,
)
from aspire.train.checkpoint import damaged_torch_file
from aspire.train.config import (  # noqa: F401 (KINDS: used from here too)
    KINDS,
    AbstractConfig,
    LossConfig,
    ModelConfig,
    kind_reads,
    term_scale_problem,
    unread_settings,
)
from aspire.train.task_formats import DEFAULT_TASK, use_task
from aspire.train.terms import (  # noqa: F401  (kind_terms and make_scorer are used from here too)
    NO_SCORER,
    AbstractText,
    CosineTerm,
    PassCosine,
    ScorerDist,
    TextInputs,
    VectorDist,
    kind_terms,
    make_scorer,
)

log = logging.getLogger(__name__)


@dataclass
class TripletBatch:
    """A training micro-batch of B (anchor, positive) pairs, tokenised for one encoder pass.

    The encoder input holds the B anchors, then the B positives, then the H hard negatives.

    Attributes:
        inputs: the encoder's tokenised input for 2B + H papers.
        group_ids: (B, G) long, integer ids of each anchor's co-cited set papers, padded with -1.
        pos_ids: (B,) long, integer id of each positive.
        align: (B, 2) long, aligned sentence positions (in anchor, in positive); -1 where unknown.
        hard_rows: (B,) long, row of the anchor's hard negative among the H (-1 = none).
        task: the training task all of the batch belongs to (its adapter, `aspire.train.task_formats`); None
            when it holds several tasks (each paper's control code went in at tokenisation).
        hard_ids: (H,) long, integer id of each hard negative (None: no hard negatives).
        task_ids: (B,) long, the objective task (`aspire.train.tasks`) of each pair (None: all task 0).
        weights: (T,) float, the loss weight of each objective task (None: one task, weight 1).
        teacher: (B, B + H) float, a teacher's similarity of each anchor to each candidate (NaN where
            it has no vector of either; None: no teacher in the run).
        facet_teacher: (B, B + H) float, the teacher's similarity of each anchor's selected sentence, encoded
            alone, to each candidate's whole vector: the facet term's soft targets (NaN where it has none;
            None: no sentence teacher in the run).
    """

    inputs: object
    group_ids: Tensor
    pos_ids: Tensor
    align: Tensor
    hard_rows: Tensor
    task: str | None = field(default=DEFAULT_TASK)
    hard_ids: Tensor | None = None
    task_ids: Tensor | None = None
    weights: Tensor | None = None
    teacher: Tensor | None = None
    facet_teacher: Tensor | None = None

    def __len__(self) -> int:
        return self.pos_ids.shape[0]

    def to(self, device: torch.device) -> "TripletBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return TripletBatch(self.inputs.to(device), self.group_ids.to(device), self.pos_ids.to(device),
                            self.align.to(device), self.hard_rows.to(device), self.task, move(self.hard_ids),
                            move(self.task_ids), move(self.weights), move(self.teacher), move(self.facet_teacher))


def _align_lookup(encoder, batch: TripletBatch, anchors: DocBatch, positives: DocBatch):
    """`batch.align`'s two sentences found among the encoded ones (`_sentence_at`; the title is sentence 0 where
    the encoder made it so, `aspire.encoders.contextual.title_is_sentence`: with `include_title`, a paper with a
    title): (anchor position, encoded, positive position, encoded), each (B,)."""
    B = len(batch.align)
    titled = batch.inputs.titled
    if titled is None:  # inputs that do not record it: the encoder's setting
        shift = torch.full((2 * B,), int(getattr(encoder, "include_title", False)), device=batch.align.device)
    else:  # rows: B anchors, then B positives
        shift = torch.tensor(titled[: 2 * B], dtype=torch.long, device=batch.align.device)
    return (*_sentence_at(batch.align[:, 0], anchors, shift[:B]), *_sentence_at(batch.align[:, 1], positives, shift[B:]))


def _sentence_at(column: Tensor, docs: DocBatch, shift: Tensor) -> tuple[Tensor, Tensor]:
    """Row positions (B,) of the sentences `column` names (-1: none; `shift` past a title sentence) and (B,) bool
    whether each is an encoded sentence of its paper; 0 where not."""
    idx = column + shift
    ok = (column >= 0) & (idx < docs.mask.shape[1])
    idx = idx.where(ok, 0)
    ok &= docs.mask[torch.arange(len(column), device=idx.device), idx]
    return idx, ok


class DocumentModel(nn.Module):
    """A contextual sentence encoder trained with the loss (`loss.kind`) over the terms of `model.kind`.

    Args:
        encoder: `aspire.encoders.ContextualSentenceEncoder` (or anything with `tokenize`,
            `forward(inputs) -> DocBatch`, `save_pretrained` and an `include_title` flag; kind
            `abstract` also uses its `model`, `tokenizer` and `max_length`).
        model_cfg: the `model` config section (kind, OT/attention settings).
        loss_cfg: the `loss` config section (kind, margin, negatives, scale, ...).
        abstract_cfg: the `abstract` section (kind `abstract`'s text and pooling).
        tasks: the training tasks' names, the first one's control code and adapter used at inference
            (`aspire.train.task_formats.task_names`).
    """

    def __init__(self, encoder: nn.Module, model_cfg: ModelConfig, loss_cfg: LossConfig | None = None,
                 abstract_cfg: AbstractConfig | None = None, tasks: Sequence[str] = (DEFAULT_TASK,)) -> None:
        super().__init__()
        self.encoder = encoder
        self.tasks = list(tasks)
        self.model_cfg = model_cfg
        self.loss_cfg = loss_cfg = loss_cfg or LossConfig()
        self.abstract_cfg = abstract_cfg or AbstractConfig()
        self.text = AbstractText(encoder, self.abstract_cfg) if model_cfg.kind == "abstract" else None
        terms, inference = kind_terms(model_cfg.kind)
        self.terms = terms
        self.inference_name = inference
        self._scorers = nn.ModuleDict()  # scorers with parameters train with the encoder
        needed = {"minl2" if t == "aligned" else t for t in (*terms, inference)} - NO_SCORER
        for name in sorted(needed):
            self._scorers[name] = make_scorer(name, model_cfg)
        self.matrix_loss = matrix_loss(loss_cfg)
        problem = term_scale_problem(model_cfg.kind, loss_cfg.term_scale)
        if problem:
            raise ValueError(problem)

    # ---- the distances ----------------------------------------------------------------------------
    def _dist(self, term: str):
        if term == "vector":
            return VectorDist()
        if term in ("whole", "facet"):
            return PassCosine(term)
        if term in ("cosine", "abstract"):
            return CosineTerm()
        key = "minl2" if term == "aligned" else term
        return ScorerDist(self._scorers[key], key)

    def tokenize(self, papers: Sequence[Paper], tasks: Sequence[str] | None = None):
        """The encoder input of `papers` for this kind (whole-abstract texts for kind `abstract`); with task
        control codes and `tasks` (one task name a paper), each paper gets its task's code."""
        codes = [code_token(t) for t in tasks] if tasks is not None and self.model_cfg.control_codes == "task" else None
        return (self.text.tokenize(papers, codes) if self.text is not None
                else self.encoder.tokenize(papers, **({"codes": codes} if codes is not None else {})))

    def embed(self, inputs) -> DocBatch:
        """Encoder forward pass: (B, S, D) sentence vectors, or one vector a paper (B, 1, D) for
        `cocite_vector` (mean-pooled sentences) and `abstract` (the whole text)."""
        with record_function("encoder"):
            if self.text is not None:
                return self.text.embed(inputs)
            docs = self.encoder(inputs)
        return mean_pool_doc(docs) if self.model_cfg.kind == "cocite_vector" else docs

    def forward(self, batch: TripletBatch) -> dict[str, Tensor]:
        """Loss of one micro-batch.

        Returns a dict with `loss` () (the sum over the kind's terms of each task's mean over its
        anchors, weighted by `batch.weights`), one `loss/<term>` per term (mean over the anchors it counts, of every
        task, unweighted),
        `task_loss` (T,) each task's unweighted loss, `task_rows` (T,) its anchors that had a
        negative, and `triples` () the number of (anchor, positive) pairs that had a negative.
        """
        B = len(batch)
        if batch.task is None and self.model_cfg.adapter.kind != "none" and self.model_cfg.adapter.per_task:
            raise ValueError("a batch of several tasks with per-task adapters (use mix.mode alternating or sequential)")
        use_task(self.encoder, self.model_cfg, batch.task)  # its adapter; its codes went in at tokenisation
        docs = self._embed_query_side(batch.inputs, B) if self.query_adapter else self.embed(batch.inputs)  # (2B + H, S, D)
        anchors = docs.index(torch.arange(B))
        positives = docs.index(torch.arange(B, 2 * B))
        allowed = in_batch_negative_mask(batch.group_ids, batch.pos_ids)  # (B, B)
        device = docs.emb.device
        weights = batch.weights if batch.weights is not None else docs.emb.new_ones(1)  # (T,)
        task = batch.task_ids if batch.task_ids is not None else torch.zeros(B, dtype=torch.long, device=device)
        bad = [] if batch.task_ids is None else ((task < 0) | (task >= len(weights))).nonzero().flatten().tolist()
        if bad:  # one_hot's error named neither the row nor the weights (checked only for given ids: a device sync)
            raise ValueError(f"batch rows {bad[:5]}: task ids {task[bad[:5]].tolist()} out of range for the batch's "
                             f"{len(weights)} task weight(s) (TripletBatch.weights)")
        of_task = nn.functional.one_hot(task, len(weights)).to(docs.emb.dtype)  # (B, T)
        out: dict[str, Tensor] = {}
        task_loss = docs.emb.new_zeros(len(weights))
        counted = torch.zeros(B, dtype=torch.bool, device=device)
        for term in self.terms:
            per_anchor, valid = self._term_loss(term, batch, docs, anchors, positives, allowed)  # (B,), (B,)
            rows = valid.to(docs.emb.dtype)[:, None] * of_task  # (B, T)
            # selected, not multiplied by the rows: a NaN or inf loss of an anchor left out (or of another task) times 0
            # is NaN (`masked_anchor_mean`)
            picked = torch.where(rows.bool(), per_anchor[:, None], per_anchor.new_zeros(()))  # (B, T)
            task_loss = task_loss + picked.sum(dim=0) / rows.sum(dim=0).clamp(min=1)
            out[f"loss/{term}"] = masked_anchor_mean(per_anchor, valid).detach()
            counted |= valid
        out["loss"] = (weights * task_loss).sum()
        out["task_loss"] = task_loss.detach()
        out["task_rows"] = (counted[:, None] & of_task.bool()).sum(dim=0)
        out["triples"] = counted.sum()
        return out

    @property
    def query_adapter(self) -> bool:
        return self.model_cfg.adapter.scope == "query"

    def _embed_query_side(self, inputs, B: int) -> DocBatch:
        """The batch's B anchors encoded with the query adapter on, its positives and negatives with it off:
        base frozen and adapter off, the papers' pass trains nothing, so it runs without gradients. Whole-
        abstract texts are split by rows (each pass over its own papers); sentence inputs, whose windows
        cannot be split so, go through both passes whole."""
        whole = not isinstance(inputs, TextInputs)
        query_in = inputs if whole else inputs.rows(0, B)
        paper_in = inputs if whole else inputs.rows(B, len(inputs.paper_ids))
        with self.encoder.query_side():
            queries = self.embed(query_in)
        with torch.no_grad():
            papers = self.embed(paper_in)
        if whole:
            queries, papers = queries.index(torch.arange(B)), papers.index(torch.arange(B, len(papers)))
        return DocBatch.concat([queries, papers])

    def _term_loss(self, term: str, batch: TripletBatch, docs: DocBatch, anchors: DocBatch, positives: DocBatch,
                   allowed: Tensor) -> tuple[Tensor, Tensor]:
        """Per-anchor loss (B,) of one term and which anchors count (B,) bool."""
        B = len(batch)
        dist = self._dist(term)
        anchor_ok = torch.ones(B, dtype=torch.bool, device=allowed.device)
        pos_dist = None
        if term == "aligned":
            a_idx, p_idx, anchor_ok = self._aligned_positions(batch, anchors, positives)
            pos_dist = aligned_sentence_dist(anchors, positives, a_idx, p_idx)  # (B,)
        elif term == "facet":  # the anchor as a facet query: its aligned sentence, still encoded in context
            a_idx, anchor_ok = self._facet_positions(batch, anchors, positives)
            anchors = anchors.with_mask(nn.functional.one_hot(a_idx, anchors.mask.shape[1]).bool() & anchors.mask)
        if self.matrix_loss is not None:  # the whole in-batch matrix plus every hard negative of the batch
            sim = dist.sim(anchors, positives)  # (B, B)
            if pos_dist is not None:  # the aligned pair's similarity is the positive
                sim = torch.where(torch.eye(B, dtype=torch.bool, device=sim.device), -pos_dist[:, None], sim)
            mask = allowed
            if len(docs) > 2 * B:
                hard = docs.index(torch.arange(2 * B, len(docs)))
                sim = torch.cat([sim, dist.sim(anchors, hard)], dim=1)  # (B, B + H)
                mask = torch.cat([mask, in_batch_negative_mask(batch.group_ids, batch.hard_ids)], dim=1)
            teacher = batch.facet_teacher if term == "facet" else batch.teacher
            soft = {} if teacher is None else {"teacher": teacher}  # only `mnrl` takes one (tasks check)
            if self.loss_cfg.term_scale:  # only `mnrl` reads it (LossConfig refuses it elsewhere)
                soft["term"] = term
            per_anchor, valid = self.matrix_loss(sim, mask & anchor_ok[:, None], **soft)
            return per_anchor, valid & anchor_ok
        if pos_dist is None:
            pos_dist = dist.pairwise_dist(anchors, positives)  # (B,)
        if self.loss_cfg.negatives == "all":
            neg_dist, neg_mask = dist.dist(anchors, positives), allowed  # (B, B)
        else:
            idx, valid = pick_one_negative(allowed)
            neg_dist = dist.pairwise_dist(anchors, positives.index(idx))[:, None]  # (B, 1)
            neg_mask = valid[:, None]
        if len(docs) > 2 * B:  # hard negatives present: each anchor's own
            has = batch.hard_rows >= 0
            hard = docs.index(2 * B + batch.hard_rows.clamp(min=0))  # (B, S, D); rows without one masked
            neg_dist = torch.cat([neg_dist, dist.pairwise_dist(anchors, hard)[:, None]], dim=1)
            neg_mask = torch.cat([neg_mask, has[:, None]], dim=1)
        return triplet_margin_dist_per_anchor(pos_dist, neg_dist, neg_mask & anchor_ok[:, None], self.loss_cfg.margin)

    def _aligned_positions(self, batch: TripletBatch, anchors: DocBatch, positives: DocBatch):
        """Aligned sentence positions (B,), (B,) and (B,) bool: alignment known and both sentences encoded."""
        a_idx, a_ok, p_idx, p_ok = _align_lookup(self.encoder, batch, anchors, positives)
        ok = a_ok & p_ok
        return a_idx.where(ok, anchors.mask.int().argmax(1)), p_idx.where(ok, positives.mask.int().argmax(1)), ok

    def _facet_positions(self, batch: TripletBatch, anchors: DocBatch, positives: DocBatch) -> tuple[Tensor, Tensor]:
        """The anchor's selected sentence (B,) and (B,) bool whether it counts: an aligned pair as for `aligned`,
        or an anchor sentence with no sentence named in the positive (`align` (s, -1): a sentence teacher's)."""
        a_idx, a_ok, _, p_ok = _align_lookup(self.encoder, batch, anchors, positives)
        ok = a_ok & (p_ok | (batch.align[:, 1] < 0))
        return a_idx.where(ok, anchors.mask.int().argmax(1)), ok

    # ---- inference --------------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, papers: Sequence[Paper | dict | str], batch_size: int = 32) -> DocBatch:
        """DocBatch of `papers` (in order, on the model's device) from the training forward pass; `papers` as
        `ContextualEncoder.encode` takes them (`aspire.data.papers.as_papers`). Every paper gets the first task's
        control code and adapter, as in the saved model (`save_pretrained`), whichever task's batch went through
        the model last; the encoder stays switched to them (each training batch switches to its own)."""
        papers = as_papers(papers)
        if not papers:  # as `ContextualSentenceEncoder.encode` refuses them (the joining said only "needs a batch")
            raise ValueError("encode: no papers given")
        check_batch_size(batch_size)  # 0 was range()'s error, a negative one the joining's
        use_task(self.encoder, self.model_cfg, self.tasks[0])
        device = next(self.parameters()).device
        with eval_mode(self):
            parts = [self.embed(self.tokenize(papers[i : i + batch_size]).to(device))
                     for i in range(0, len(papers), batch_size)]
        return DocBatch.concat(parts)

    def score(self, q: DocBatch, c: DocBatch) -> Tensor:
        """(Bq, Bc) similarities with the kind's inference scorer (higher is better)."""
        return self._dist(self.inference_name).sim(q, c)

    # ---- saving -------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        """Encoder in Hugging Face format under `path`, plus `document_model.json` (kind, scorer, settings)
        and the scorers' parameters if they have any. A NaN or infinity among the settings (a config made in code,
        not loaded: loading checks them) is a ValueError naming the file and the key, before anything is written
        (`json.dumps` wrote a bare `NaN`, which `read_model_file` refuses)."""
        path = Path(path)
        meta = {"kind": self.model_cfg.kind, "inference_scorer": self.inference_name, "tasks": self.tasks,
                "model": to_dict(self.model_cfg), "abstract": vars(self.abstract_cfg)}
        text = finite_dumps(meta, f"cannot save {path / MODEL_FILE}:", indent=2)
        use_task(self.encoder, self.model_cfg, self.tasks[0])  # inference uses the first task's code and adapter
        self.encoder.save_pretrained(path)
        (path / MODEL_FILE).write_text(text)
        scorer_state = self._scorers.state_dict()
        if scorer_state:
            torch.save(scorer_state, path / "scorers.pt")

    @classmethod
    def from_pretrained(
        cls, path: str | Path, loss_cfg: LossConfig | None = None,
        encoder_loader: Callable[[str], nn.Module] | None = None,
    ) -> "DocumentModel":
        """Load a model written by `save_pretrained` (the encoder via `ContextualSentenceEncoder`).

        A missing or damaged `document_model.json` or `scorers.pt` is an error naming the file (and the key), raised
        before the encoder is loaded where the settings are at fault."""
        path = Path(path)
        model_cfg, abstract_cfg, tasks = read_model_file(path / MODEL_FILE)
        if encoder_loader is None:
            from aspire.encoders import ContextualSentenceEncoder

            encoder_loader = ContextualSentenceEncoder.from_pretrained
        model = cls(encoder_loader(str(path)), model_cfg, loss_cfg, abstract_cfg, tasks)
        scorers = path / "scorers.pt"
        if not scorers.is_file() and model._scorers.state_dict():  # else its scorers' fresh weights, unsaid
            raise FileNotFoundError(2, f"No such file or directory (the scorers' weights of a kind "
                                       f"{model_cfg.kind!r} model)", str(scorers))
        if scorers.is_file():
            with damaged_torch_file(lambda reason: f"{scorers}: not the scorers' weights of a kind {model_cfg.kind!r} "
                                                   f"model ({reason})"):
                model._scorers.load_state_dict(torch.load(scorers, map_location="cpu"))
        return model


def _without_unread(model: dict, file: Path) -> dict:
    """A saved `model` section less the scorer settings its kind never reads (`kind_reads`): a model trained before
    the config refused them holds them, and they never made a difference; the log names them."""
    # a value no kind could take is damage: left for the check to name
    unread = {k: v for k, v in unread_settings(model["kind"], model).items() if _valid(k, v)}
    if unread:
        log.info("%s: %s not read by model.kind %s (saved before configs refused them): left at their defaults", file,
                 ", ".join(f"{k}={v!r}" for k, v in unread.items()), model["kind"])
    return {k: v for k, v in model.items() if k not in unread}


def _valid(key: str, value) -> bool:
    """Whether a kind that reads the scorer setting `key` takes `value`."""
    reader = next(k for k in KINDS if key in kind_reads(k))
    try:
        from_dict(ModelConfig, {"kind": reader, key: value})
    except (ConfigError, TypeError, ValueError):
        return False
    return True


def read_model_file(file: Path) -> tuple[ModelConfig, AbstractConfig, list[str]]:
    """The model settings, kind `abstract`'s settings and the task names of a `document_model.json`; FileNotFoundError
    or ValueError (ConfigError for a setting) naming the file and the key when it is missing or damaged: a bare `NaN`,
    `Infinity` or `-Infinity` (`save_pretrained` refuses a non-finite setting) or a key twice is such damage."""
    if not file.is_file():
        raise FileNotFoundError(2, f"No such file or directory (not a document model saved by training: its "
                                   f"{MODEL_FILE} is missing)", str(file))
    try:
        meta = loads_unique(file.read_text(encoding="utf-8"), finite=True)
    except NonFiniteConstant as err:
        raise ValueError(f"{file}: damaged, a bare {err.constant}, which is not JSON (`save_pretrained` refuses a "
                         "non-finite setting)") from None
    except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, a key twice, nested too deeply
        raise ValueError(f"{file}: damaged, not JSON ({err})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), dict):
        raise ValueError(f"{file}: damaged, no `model` section of settings (a JSON object)")
    sections = {}
    for key, cls in (("model", ModelConfig), ("abstract", AbstractConfig)):
        if not isinstance(meta.get(key, {}), dict):
            raise ValueError(f"{file}: `{key}` must be a JSON object of settings, got {meta[key]!r}")
        settings = meta.get(key, {})
        # a model saved before configs refused unread settings; a kind that is not a string (a list, an object) is
        # unhashable (`in KINDS` was a TypeError naming no file): left for the check to name
        if key == "model" and isinstance(settings.get("kind"), str) and settings["kind"] in KINDS:
            settings = _without_unread(settings, file)
        try:
            sections[key] = from_dict(cls, settings)
        except ConfigError as err:
            raise ConfigError(f"{file}: in `{key}`: {err}") from None
    model_cfg, abstract_cfg = sections["model"], sections["abstract"]
    tasks = meta.get("tasks", [DEFAULT_TASK])
    if not (isinstance(tasks, list) and tasks and all(isinstance(t, str) and t for t in tasks)):
        raise ValueError(f"{file}: `tasks` must be a non-empty list of task names, got {tasks!r}")
    recorded = {"kind": model_cfg.kind, "inference_scorer": KINDS[model_cfg.kind][1]}
    odd = [f"{key} {meta[key]!r}" for key, value in recorded.items() if key in meta and meta[key] != value]
    if odd:
        raise ValueError(f"{file}: {', '.join(odd)} disagree(s) with its model.kind {model_cfg.kind!r}: the file "
                         "is damaged or was edited by hand")
    return model_cfg, abstract_cfg, tasks
