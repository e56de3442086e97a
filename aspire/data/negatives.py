"""Hard negatives for training, written as the file the trainer reads (`data.hard_negatives`).

    python -m aspire.data hard-negatives --examples runs/cocite-acl/6_aligned --out runs/cocite-acl/hard_citation
    python -m aspire.data hard-negatives --examples runs/cocite-acl/6_aligned --out runs/cocite-acl/hard_nearest \
        method=nearest model=mpnet skip=2

Two miners over the papers of an examples directory (`abstracts.jsonl`, `groups.{train,dev}.jsonl`):
- `citation` (SPECTER-style citation-graph negatives): the papers that a paper citing the anchor
  also cites, but never in one sentence with the anchor; most shared citing papers first. The
  citing paper of a context is the part of its id before `#` (`W03-0407#L271`).
- `nearest`: the anchor's nearest papers by an encoder's whole-abstract vector (cosine, exact
  faiss inner-product search), after leaving out its `skip` nearest non-partners (likely
  unlabelled positives).
An anchor's co-citation partners (every paper sharing a co-cited set with it, in either split) are
never its negatives. Every paper gets a line `{"paper_id", "negatives": [...]}`, at most `k`
negatives, best first; `report.json` counts the papers left with none and lists them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from aspire.config import to_dict
from aspire.data.cocite.config import SPLITS
from aspire.io import AtomicJsonl, iter_jsonl, read_paper_map, require, write_json

if TYPE_CHECKING:
    from torch import Tensor

    from aspire.data.papers import Paper

OUT_FILE = "hard_negatives.jsonl"


@dataclass
class HardNegativesConfig:
    method: Literal["citation", "nearest"] = "citation"
    k: int = 10  # negatives kept per paper
    skip: int = 0  # `nearest`: the nearest non-partners left out first
    model: str = "minilm"  # `nearest`: the encoder of the whole-abstract vectors
    max_length: int | None = None  # `nearest`: word pieces per abstract (None: the model's limit)
    batch_size: int = 32


def read_groups(examples_dir: str | Path) -> list[dict]:
    """The co-cited sets of both splits (`groups.train.jsonl`, `groups.dev.jsonl` where present)."""
    groups = []
    for split in SPLITS:
        path = Path(examples_dir) / f"groups.{split}.jsonl"
        if path.is_file():
            for lineno, obj in iter_jsonl(path):
                require(obj, ("set_id", "paper_ids", "context_ids"), path, lineno)
                groups.append(obj)
    if not groups:
        raise ValueError(f"{examples_dir}: no groups.train.jsonl or groups.dev.jsonl")
    return groups


def cocitation_partners(groups: list[dict]) -> dict[str, set[str]]:
    """`{paper: every paper sharing a co-cited set with it, itself included}`."""
    partners: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        for pid in g["paper_ids"]:
            partners[pid].update(g["paper_ids"])
    return partners


def citation_negatives(groups: list[dict], paper_ids: list[str], k: int) -> dict[str, list[str]]:
    """Citation-graph negatives of each paper: cited by a paper that cites it, never co-cited with it."""
    partners = cocitation_partners(groups)
    citing_of: dict[str, set[str]] = defaultdict(set)  # paper -> the papers citing it
    cited_by: dict[str, set[str]] = defaultdict(set)  # citing paper -> the papers it cites
    for g in groups:
        for ctx in g["context_ids"]:
            citing, sep, _ = str(ctx).partition("#")
            if not sep or not citing:
                raise ValueError(f"co-cited set {g['set_id']}: context id {ctx!r} does not name its citing paper "
                                 "(CITING_ID#...)")
            cited_by[citing].update(g["paper_ids"])
            for pid in g["paper_ids"]:
                citing_of[pid].add(citing)
    out = {}
    for pid in paper_ids:
        shared = Counter(n for c in citing_of[pid] for n in cited_by[c] if n not in partners[pid])
        out[pid] = [n for n, _ in sorted(shared.items(), key=lambda kv: (-kv[1], kv[0]))][:k]
    return out


def nearest_negatives(vectors, groups: list[dict], paper_ids: list[str], k: int, skip: int = 0) -> dict[str, list[str]]:
    """Nearest papers by cosine of `vectors` (N, D), rows in `paper_ids` order, partners left out."""
    import faiss
    import torch

    partners = cocitation_partners(groups)
    vecs = torch.nn.functional.normalize(vectors.float(), dim=-1).numpy()
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(vecs)
    depth = min(len(paper_ids), 1 + skip + k + max((len(s) for s in partners.values()), default=0))
    _, rows = index.search(vecs, depth)
    out = {}
    for i, pid in enumerate(paper_ids):
        ranked = [paper_ids[j] for j in rows[i] if j >= 0 and j != i and paper_ids[j] not in partners[pid]]
        out[pid] = ranked[skip : skip + k]
    return out


def mine_hard_negatives(examples_dir: str | Path, out_dir: str | Path,
                        cfg: HardNegativesConfig = HardNegativesConfig(),
                        encode: Callable[[list[Paper]], Tensor] | None = None) -> dict:
    """Write `out_dir/hard_negatives.jsonl` and `report.json` for the papers of `examples_dir`.

    `encode` (needed by `method="nearest"` only) maps papers to their whole-abstract vectors (N, D);
    `python -m aspire.data hard-negatives` builds it from `cfg.model` (cosine-ready: normalised,
    `cfg.max_length`, `cfg.batch_size`). It is passed in so that this module loads no model code.
    """
    if cfg.k < 1 or cfg.skip < 0:
        raise ValueError(f"k must be at least 1 and skip at least 0, got k={cfg.k}, skip={cfg.skip}")
    examples_dir, out_dir = Path(examples_dir), Path(out_dir)
    papers = read_paper_map(examples_dir / "abstracts.jsonl", split_strings=False)
    groups = read_groups(examples_dir)
    unknown = sorted({pid for g in groups for pid in g["paper_ids"]} - set(papers))
    if unknown:
        raise ValueError(f"{examples_dir}: co-cited papers without an abstract in abstracts.jsonl: {unknown[:10]}")
    order = sorted(papers, key=str)
    if cfg.method == "citation":
        negatives = citation_negatives(groups, order, cfg.k)
    elif cfg.method == "nearest":
        if encode is None:
            raise ValueError("hard negatives by method 'nearest' need an `encode` function (papers -> vectors); "
                             "the CLI builds one from `model`")
        vectors = encode([papers[pid] for pid in order])
        negatives = nearest_negatives(vectors, groups, order, cfg.k, cfg.skip)
    else:
        raise ValueError(f"unknown hard-negative method {cfg.method!r}; valid: ['citation', 'nearest']")
    with AtomicJsonl(out_dir / OUT_FILE) as out:
        for pid in order:
            out.write({"paper_id": pid, "negatives": negatives[pid]})
    counts = [len(negatives[pid]) for pid in order]
    none = [pid for pid in order if not negatives[pid]]
    report = {
        "stage": "hard-negatives",
        "input": str(examples_dir),
        "config": to_dict(cfg),
        "papers": len(order),
        "papers_with_negatives": len(order) - len(none),
        "papers_without_negatives": none,
        "negatives_per_paper_mean": sum(counts) / len(order),
        "negatives_per_paper_histogram": {str(n): c for n, c in sorted(Counter(counts).items())},
    }
    write_json(out_dir / "report.json", report)
    return report
