"""Measure the sentence splitters of `aspire.data.sentences` on real abstracts and on hand-written hard cases.

Gold: abstracts stored as sentence lists. Each abstract's sentences are joined with a single space and
re-split by every candidate. A boundary is the character offset where a sentence (other than the
first) starts; precision / recall / F1 are micro-averaged over all boundaries, and "exact" is the
share of abstracts whose predicted boundaries equal the gold ones. Data: CSFCube's 4,205 abstracts
(the main set, used to design the guarded splitters) and the 768 cited abstracts of cocite-acl
(held out: looked at only through this script's tables). Both gold splits were made by some
splitter and carry its mistakes, so each set is also scored without the abstracts whose gold has a
cut that is wrong by rule (`suspect_gold`). Time is wall-clock milliseconds per CSFCube abstract
after the pipeline is loaded (one process on a shared CPU; compare within a run). Every prediction
is also checked to keep the text: its sentences, joined, equal the input up to whitespace.

    python experiments/eval_sentence_split.py [--limit N] [--splitters a,b,...] [--out-dir DIR]
        [--compare A,B --sample 40 --seed 0]

`--compare` also lists a seeded sample of the CSFCube boundaries cut by exactly one of two splitters
(default: `pysbd_rule_guarded` and `pysbd_guarded`), for judging by reading.

Writes `sentence_split.json` and `sentence_split.md` under `experiments/results/` and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aspire.data.sentences import SPLITTERS, get_splitter  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
DATASETS = {
    "csfcube": SHARED / "csfcube" / "abstracts-csfcube-preds.jsonl",
    "cocite-acl": SHARED / "cocite-acl" / "cocitations.jsonl",
}

# (name, gold sentences): joined with one space to form the input text.
HARD_CASES: list[tuple[str, list[str]]] = [
    ("et al.", ["We build on the model of Smith et al. (2020) and extend it to graphs.", "It works well."]),
    ("et al. mid", ["As shown by Lee et al. the method scales.", "We confirm this."]),
    ("e.g.", ["We study tasks such as parsing, e.g. dependency parsing, at scale.", "Results follow."]),
    ("i.e.", ["We use a small model, i.e. a two-layer network.", "It trains fast."]),
    ("Fig. 2", ["The gains are shown in Fig. 2 for all datasets.", "They are large."]),
    ("Fig. 2 end", ["The gains are shown in Fig. 2.", "They are large."]),
    ("p < 0.05", ["The difference is significant (p < 0.05) on both sets.", "We discuss why."]),
    ("95% CI", ["Accuracy rose by 3.2 points (95% CI 1.1-5.3).", "The effect is robust."]),
    ("cf.", ["This matches earlier reports (cf. the survey of Chen).", "We extend them."]),
    ("cf. + capital", ["This matches earlier reports, cf. Table 3 for details.", "We extend them."]),
    ("vs.", ["We compare BERT vs. GPT on ten tasks.", "BERT wins on seven."]),
    ("Eq. 3", ["The loss in Eq. 3 is convex.", "We minimise it with SGD."]),
    ("decimals", ["Our model reaches 92.5 F1 and 0.87 AUC.", "This is a new state of the art."]),
    ("U.S.", ["We collected data from U.S. hospitals over five years.", "The data are public."]),
    ("question", ["Can sentence vectors capture aspects?", "We show that they can."]),
    ("quote end", ['We call this "aspect matching."', "It is simple."]),
    ("three short", ["We propose a new method.", "It works.", "It is fast."]),
    ("approx.", ["The corpus has approx. 1.3M abstracts.", "We use all of them."]),
]


def load_gold(path: Path, limit: int | None = None) -> list[list[str]]:
    """Gold sentence lists (stripped, non-empty) of the first `limit` abstracts in a JSONL file.

    A record is a paper with an `abstract` list (CSFCube) or a co-citation with `cited` papers
    (cocite-acl), whose distinct cited abstracts are taken in order of first appearance.
    """
    abstracts, seen = [], set()
    with path.open(encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            for paper in record.get("cited", [record]):
                if paper["paper_id"] in seen:
                    continue
                seen.add(paper["paper_id"])
                sents = [s.strip() for s in paper["abstract"]]
                abstracts.append([s for s in sents if s])
    abstracts = [a for a in abstracts if a]
    return abstracts if limit is None else abstracts[:limit]


def join_with_starts(sentences: list[str]) -> tuple[str, list[int]]:
    """(text, start offsets of sentences 2..n) for sentences joined with one space."""
    starts, pos = [], 0
    for i, s in enumerate(sentences):
        if i:
            pos += 1
            starts.append(pos)
        pos += len(s)
    return " ".join(sentences), starts


def _squash(text: str) -> str:
    return "".join(text.split())


def suspect_gold(sentences: list[str]) -> bool:
    """Whether the gold split has a boundary that is wrong by rule.

    Wrong by rule: a sentence that ends with an abbreviation that never ends a sentence (e.g., i.e., cf.,
    vs., viz., approx., resp.), or ends with "et al." while the next one starts with "(" or a digit.
    """
    for prev, nxt in zip(sentences[:-1], sentences[1:]):
        if _GOLD_NEVER_FINAL.search(prev):
            return True
        if prev.endswith("et al.") and (nxt[:1] == "(" or nxt[:1].isdigit()):
            return True
    return False


DEFAULT_COMPARE = ("pysbd_rule_guarded", "pysbd_guarded")
_GOLD_NEVER_FINAL = re.compile(r"(?:^|[\s(\[])(?:e\.g|i\.e|cf|vs|viz|approx|resp)\.$", re.IGNORECASE)


def _aggregate(rows: list[tuple[int, int, int, bool]]) -> dict:
    """Micro P/R/F1 and exact share from per-abstract (correct, predicted, gold, exact) rows."""
    tp, n_pred, n_gold = (sum(r[i] for r in rows) for i in range(3))
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {
        "abstracts": len(rows),
        "gold_boundaries": n_gold,
        "pred_boundaries": n_pred,
        "correct_boundaries": tp,
        "precision": p,
        "recall": r,
        "f1": 2 * p * r / (p + r) if p + r else 0.0,
        "exact": sum(r[3] for r in rows) / len(rows) if rows else 0.0,
    }


def evaluate(splitter_name: str, datasets: dict[str, list[list[str]]]) -> tuple[dict, dict[str, list[list[int]]]]:
    """Per data set, boundary P/R/F1 and exact-split share on all abstracts and on those without
    suspect gold, and the count of abstracts whose split lost text; ms per abstract on the first set.
    Also returns the predicted boundaries, per data set and abstract."""
    splitter = get_splitter(splitter_name)
    t0 = time.perf_counter()
    splitter.split("Warm-up sentence one. Warm-up sentence two.")
    out = {"splitter": splitter_name, "load_s": time.perf_counter() - t0}
    predictions: dict[str, list[list[int]]] = {}
    for k, (set_name, gold) in enumerate(datasets.items()):
        rows, lost, elapsed = [], 0, 0.0
        predictions[set_name] = preds = []
        for sentences in gold:
            text, gold_starts = join_with_starts(sentences)
            t0 = time.perf_counter()
            spans = splitter.spans(text)
            elapsed += time.perf_counter() - t0
            pred_starts = [a for a, _ in spans[1:]]
            preds.append(pred_starts)
            hits = len(set(pred_starts) & set(gold_starts))
            rows.append((hits, len(pred_starts), len(gold_starts), pred_starts == gold_starts))
            lost += _squash("".join(text[a:b] for a, b in spans)) != _squash(text)
        suspect = [suspect_gold(g) for g in gold]
        out[set_name] = {
            "all": _aggregate(rows),
            "clean_gold": _aggregate([r for r, bad in zip(rows, suspect) if not bad]),
            "abstracts_losing_text": lost,
        }
        if k == 0:
            out["ms_per_abstract"] = 1000 * elapsed / len(gold)
    return out, predictions


def sample_disagreements(
    gold: list[list[str]], pred_a: list[list[int]], pred_b: list[list[int]], n: int, seed: int
) -> tuple[int, list[dict]]:
    """(number of boundaries found by exactly one of two splitters, a seeded sample of `n` of them
    with their context), for judging by reading which splitter is right."""
    found = []
    for i, (sentences, a, b) in enumerate(zip(gold, pred_a, pred_b)):
        text, gold_starts = join_with_starts(sentences)
        for x in sorted(set(a) ^ set(b)):
            found.append(
                {
                    "abstract": i,
                    "offset": x,
                    "cut_by": "first" if x in a else "second",
                    "in_gold": x in gold_starts,
                    "context": f"{text[max(0, x - 50):x]} ‖ {text[x:x + 30]}",
                }
            )
    rng = random.Random(seed)
    return len(found), sorted(rng.sample(found, min(n, len(found))), key=lambda d: (d["abstract"], d["offset"]))


def run_hard_cases(splitter_names: list[str]) -> list[dict]:
    """Each splitter's output on each hard case, and whether it equals the gold split."""
    splitters = {n: get_splitter(n) for n in splitter_names}
    rows = []
    for case, sentences in HARD_CASES:
        text = " ".join(sentences)
        outputs = {n: s.split(text) for n, s in splitters.items()}
        rows.append(
            {
                "case": case,
                "text": text,
                "gold": sentences,
                "outputs": outputs,
                "correct": {n: out == sentences for n, out in outputs.items()},
            }
        )
    return rows


def to_markdown(results: list[dict], hard: list[dict], set_names: list[str], compare: dict | None) -> str:
    """The results tables, the hard-case scoreboard and each wrong hard-case output as markdown."""
    lines = [
        "# Sentence splitting on real abstracts",
        "",
        "Command: `python experiments/eval_sentence_split.py`. Gold sentences joined by one space and re-split; "
        "boundary precision / recall / F1 micro-averaged; *exact* = share of abstracts split exactly as the gold. "
        "The gold splits were themselves made by a splitter and carry its mistakes (cuts after \"e.g.\", "
        "\"i.e.\", and between \"et al.\" and \"(2011)\"); *clean gold* leaves out the abstracts whose gold "
        "has such a rule-wrong cut. Gold also misses boundaries without a space (\"experience.When\"), which "
        "count against splitters that find them. ms / abstract: CSFCube, one process on a shared CPU.",
    ]
    for set_name in set_names:
        for key, title in (("all", "all abstracts"), ("clean_gold", "clean gold")):
            m0 = results[0][set_name][key]
            if key == "clean_gold" and m0["abstracts"] == results[0][set_name]["all"]["abstracts"]:
                lines += ["", f"({set_name}: no abstract has a rule-wrong gold cut; clean gold = all.)"]
                continue
            lines += [
                "",
                f"## {set_name}, {title}: {m0['abstracts']} abstracts, {m0['gold_boundaries']} gold boundaries",
                "",
                "| splitter | boundary P | boundary R | boundary F1 | abstracts exact | ms / abstract | load s |"
                " hard cases right | abstracts losing text |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in results:
                m = r[set_name][key]
                right = sum(h["correct"][r["splitter"]] for h in hard)
                lines.append(
                    f"| {r['splitter']} | {m['precision']:.4f} | {m['recall']:.4f} | {m['f1']:.4f} "
                    f"| {m['exact']:.4f} | {r['ms_per_abstract']:.2f} | {r['load_s']:.2f} | {right}/{len(hard)} "
                    f"| {r[set_name]['abstracts_losing_text']} |"
                )
    names = [r["splitter"] for r in results]
    lines += ["", "## Hard cases (right = output equals the gold split)", ""]
    lines.append("| case | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for h in hard:
        lines.append(f"| {h['case']} | " + " | ".join("yes" if h["correct"][n] else "**no**" for n in names) + " |")
    lines += ["", "## Wrong hard-case outputs", ""]
    if all(all(h["correct"].values()) for h in hard):
        lines.append("(none)")
    for h in hard:
        for n in names:
            if not h["correct"][n]:
                shown = " ‖ ".join(h["outputs"][n])
                lines.append(f"- `{n}` on *{h['case']}*: {shown}")
    if compare is not None:
        a, b = compare["splitters"]
        lines += [
            "",
            f"## Where `{a}` and `{b}` disagree ({compare['data']})",
            "",
            f"{compare['total']} boundaries are cut by exactly one of them; a sample of {len(compare['sample'])} "
            f"(seed {compare['seed']}), to judge by reading (‖ marks the cut):",
            "",
            "| abstract | cut by | in gold | context |",
            "|---:|---|---|---|",
        ]
        for d in compare["sample"]:
            who = a if d["cut_by"] == "first" else b
            ctx = d["context"].replace("|", "\\|")
            lines.append(f"| {d['abstract']} | {who} | {'yes' if d['in_gold'] else 'no'} | {ctx} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N abstracts of each data set only")
    parser.add_argument("--splitters", default=",".join(SPLITTERS), help="comma-separated registry names")
    parser.add_argument("--out-dir", type=Path, default=REPO / "experiments" / "results")
    parser.add_argument(
        "--compare",
        default=None,
        help="two of --splitters whose disagreements to sample (default: pysbd_rule_guarded,pysbd_guarded when both "
        "are evaluated; '' for none)",
    )
    parser.add_argument("--sample", type=int, default=40, help="disagreements to sample (on the first data set)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    missing = [str(p) for p in DATASETS.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"data not found: {missing}")
    names = [n for n in args.splitters.split(",") if n]
    unknown = [n for n in names if n not in SPLITTERS]
    if unknown:
        parser.error(f"unknown splitter(s) {unknown}; valid: {list(SPLITTERS)}")
    if args.compare is None:  # the default pair, where both are evaluated
        pair = [n for n in DEFAULT_COMPARE if n in names]
        pair = pair if len(pair) == 2 else []
    else:  # a pair asked for is compared or refused: it was once left out of the tables without a word
        pair = [n for n in args.compare.split(",") if n]
        if pair and (len(pair) != 2 or pair[0] == pair[1] or any(n not in names for n in pair)):
            parser.error(f"--compare takes two different splitters of --splitters {names}, got {args.compare!r}")
    datasets = {name: load_gold(path, args.limit) for name, path in DATASETS.items()}
    evaluated = {n: evaluate(n, datasets) for n in names}
    results = [evaluated[n][0] for n in names]
    compare = None
    if pair:
        first = next(iter(datasets))
        preds = [evaluated[n][1][first] for n in pair]
        total, sample = sample_disagreements(datasets[first], *preds, args.sample, args.seed)
        compare = {"splitters": pair, "data": first, "seed": args.seed, "total": total, "sample": sample}
    hard = run_hard_cases(names)
    md = to_markdown(results, hard, list(datasets), compare)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "data": {name: path.name for name, path in DATASETS.items()},
        "limit": args.limit,
        "python": platform.python_version(),
        "results": results,
        "hard_cases": hard,
        "disagreements": compare,
    }
    (args.out_dir / "sentence_split.json").write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    (args.out_dir / "sentence_split.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
