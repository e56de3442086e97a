"""Benchmark papers under another title in the shipped aspect model's training text: word 5-gram containment.

    python -m aspire.data run-all --in ../shared/data/cocite-acl/cocitations.jsonl --out OUT
    python experiments/check_reworded_leak.py --cocite-examples OUT/5_examples [--out FILE.json]

The held-out filters (`aspire.benchmarks.heldout`) matched a benchmark paper by normalised title, paper id or the
first 200 normalised characters of its abstract, so a paper whose content reached another record under another
title with a reworded opening passed all three (the containment rule, added after this scan, catches it at 0.5). This scans for such records by the word 5-gram containment of
each benchmark abstract in each training text: the share of the benchmark abstract's distinct 5-grams (lower
case, `\\w+` words) that the training text holds too (`containment`; 1.0 = every 5-gram of it is there). The
containment and its index are the package's (`aspire.benchmarks.heldout`), where they are a held-out rule now.

Benchmarks: CSFCube's papers (queries and candidates), the reviewer set's submissions and its reviewers' archive
papers, and the papers cited by context2doc's test sentences (`heldout` reads the same ones); and, as short
texts, context2doc's test query sentences (`context2doc_test_sentences`) against the citing sentences trained on.

Training texts, as the shipped model (aspire/models/aspire-minilm, card.json) saw them:
- `acl_sample`: the 8,000 ACL abstracts `python -m aspire.train.teacher --max-papers 8000` drew when the model was
  trained (2026-11-28/29): `read_acl` (seed 0) after removing the benchmark papers by normalised title only, the
  ranking benchmarks' titles and the SciRepEval formats' dev and test titles (`ranking_titles`, `format_titles`);
  the filter by paper id, by abstract and by the abstract twins' titles came later (2026-11-30). Split as the
  distill task splits it (`dev_share` 0.05 by a hash of the id: train pairs / dev loss).
- `cocite`: the papers the co-citation examples encode (anchor, positive, negatives) in `--cocite-examples`, train
  and dev. The model's examples were built by the code of 2026-11-29 (2,120 / 246 directed pairs = 1,060 / 123
  examples); today's `run-all` gives 1,065 / 117 from the same records.
- `context2doc`: context2doc's train and dev pairs, the cited abstracts; the shipped model's runs also trained on
  the train queries that today's `load_context2doc` leaves out as a test query's twin (4,251 / 589 pairs then,
  4,247 / 587 now), so they are put back (`with_left_out`). Its query sentences are the `context2doc` sentence
  source.
Beside them, for reference: `acl_unfiltered` (every ACL abstract the title filter keeps: the population the sample
is drawn from) and `acl_sample_today` (the sample today's filters draw, `excluded_papers`).

A pair is a benchmark paper and a training text with containment at or above `--report-from` (0.2). The same
paper id on both sides (a context2doc test-cited paper trained on as itself, by design of that benchmark:
`context2doc_overlap.md`) is marked `same_id` and counted apart, in the table only. The table counts pairs per
benchmark, source and threshold; the JSON lists every pair of two ids with both texts' ids and titles, the
containment both ways, whether the titles or the abstract keys agree, and which held-out rule of today would
remove the training record (`removed_today_by`, by `excluded_papers`; the `cocite` pipeline and the `context2doc`
task apply `cited_benchmark_papers`, CSFCube's and the reviewer set's papers, since the containment rule came).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import sys
import time
from collections import Counter
from pathlib import Path

from aspire.benchmarks.heldout import GRAM_WORDS as N  # the containment rule's own grams
from aspire.benchmarks.heldout import GramIndex, containment, ngrams

THRESHOLDS = (0.2, 0.3, 0.5, 0.8)


def scan(bench: list[dict], sources: dict[str, list[dict]], report_from: float, n: int = N) -> list[dict]:
    """Every (benchmark paper, training text) pair of containment >= `report_from`: `bench` and each source's
    texts are `{"paper_id", "title", "text"}` dicts (a benchmark's also `benchmark`). A pair of one paper id on
    both sides is marked `same_id`."""
    index = GramIndex([b["text"] for b in bench], n)
    pairs = []
    for source, texts in sources.items():
        for t in texts:
            for row, c in index.contained(t["text"]).items():
                if c >= report_from:
                    b = bench[row]
                    pairs.append({"benchmark": b["benchmark"], "bench_id": b["paper_id"], "source": source,
                                  "train_id": t["paper_id"], "containment": round(c, 4),
                                  "same_id": b["paper_id"] == t["paper_id"]})
    return pairs


def table(pairs: list[dict], benchmarks: list[str], sources: list[str], thresholds=THRESHOLDS) -> list[dict]:
    """Per (benchmark, source, threshold): the pairs of two paper ids and the distinct benchmark papers they
    name, and apart, the pairs of one paper id on both sides (`same_id`)."""
    rows = []
    for b in benchmarks:
        for s in sources:
            for th in thresholds:
                hit = [p for p in pairs if p["benchmark"] == b and p["source"] == s and p["containment"] >= th]
                other = [p for p in hit if not p["same_id"]]
                rows.append({"benchmark": b, "source": s, "threshold": th, "pairs": len(other),
                             "benchmark_papers": len({p["bench_id"] for p in other}),
                             "same_id": len(hit) - len(other)})
    return rows


# --- what the benchmarks and the training sources hold (reads the real data) ---

def benchmark_texts(data: Path) -> list[dict]:
    """Every benchmark paper with an abstract (one entry per paper id and benchmark), and context2doc's test
    query sentences (`context2doc_test_sentences`)."""
    from aspire.benchmarks.context2doc import load_context2doc
    from aspire.benchmarks.csfcube import ABSTRACTS_FILE, FACETS, load_csfcube
    from aspire.benchmarks.reviewers import load_reviewer_set
    from aspire.data.papers import jsonl_objects

    out = []
    pools = load_csfcube(data / "csfcube").pools
    queries = {q for facet in FACETS for q in pools[facet]}
    for _, r in jsonl_objects(data / "csfcube" / ABSTRACTS_FILE):
        out.append({"benchmark": "csfcube", "paper_id": str(r["paper_id"]), "title": r["title"],
                    "text": " ".join(r["abstract"]), "role": "query" if str(r["paper_id"]) in queries else "candidate"})
    subs, arch = {}, {}
    for draw in load_reviewer_set(data / "reviewer-matching").draws:
        for pid, (title, abstract) in draw.submissions.items():
            subs.setdefault(pid, (title, abstract))
        for papers in draw.archives.values():
            for pid, title, abstract in papers:
                arch.setdefault(pid, (title, abstract))
    out += [{"benchmark": "reviewer_submissions", "paper_id": pid, "title": t, "text": a} for pid, (t, a) in subs.items()]
    out += [{"benchmark": "reviewer_archives", "paper_id": pid, "title": t, "text": a} for pid, (t, a) in arch.items()]
    test = load_context2doc(data / "cocite-acl", "test")
    cited = {pid for rel in test.qrels.values() for pid in rel}
    out += [{"benchmark": "context2doc_test_cited", "paper_id": p.paper_id, "title": p.title,
             "text": " ".join(p.sentences)} for p in test.candidates if p.paper_id in cited]
    out += [{"benchmark": "context2doc_test_sentences", "paper_id": f"ctx:{qid}", "title": "", "text": text}
            for qid, text in test.queries.items()]
    return [b for b in out if b["text"].strip()]


def as_trained_titles(data: Path) -> frozenset[str]:
    """The normalised titles the teacher's filter removed when the shipped model was trained (title only): the
    ranking benchmarks' and the SciRepEval formats' dev and test papers'."""
    from aspire.benchmarks.heldout import format_titles, ranking_titles

    return frozenset().union(*ranking_titles(data).values(), format_titles(data))


def acl_sources(data: Path, max_papers: int, dev_share: float) -> tuple[dict[str, list[dict]], dict]:
    """The ACL texts: the as-trained sample (train / dev as the distill task splits it), today's sample, and every
    abstract the as-trained title filter keeps; and the counts read / removed / used, with a SHA-256 of each
    sample's sorted ids."""
    from aspire.benchmarks.heldout import excluded_papers
    from aspire.data.acl import normalise_title, read_acl
    from aspire.data.papers import jsonl_objects
    from aspire.train.tasks import _in_dev

    acl = data / "acl-anthology" / "papers.jsonl.gz"
    titles = as_trained_titles(data)
    sample, stats = read_acl(acl, titles, max_papers)
    today, today_stats = read_acl(acl, excluded_papers(data, "--benchmarks-dir")[0], max_papers)

    def entry(p) -> dict:
        return {"paper_id": p.paper_id, "title": p.title, "text": " ".join(p.sentences)}

    def digest(papers) -> str:
        return hashlib.sha256("\n".join(sorted(p.paper_id for p in papers)).encode()).hexdigest()

    kept = [{"paper_id": r.get("paper_id"), "title": r.get("title") or "", "text": r["abstract"]}
            for _, r in jsonl_objects(acl)
            if isinstance(r.get("abstract"), str) and normalise_title(r.get("title") or "") not in titles]
    sources = {"acl_sample/train": [entry(p) for p in sample if not _in_dev(p.paper_id, dev_share)],
               "acl_sample/dev": [entry(p) for p in sample if _in_dev(p.paper_id, dev_share)],
               "acl_sample_today": [entry(p) for p in today],
               "acl_unfiltered": kept}
    counts = {"acl_sample": {k: v for k, v in stats.items() if k != "rejected"} | {
                  "rejected": len(stats["rejected"]), "title_filter": len(titles), "ids_sha256": digest(sample)},
              "acl_sample_today": {k: v for k, v in today_stats.items() if k != "rejected"} | {
                  "rejected": len(today_stats["rejected"]), "ids_sha256": digest(today)},
              "acl_unfiltered": len(kept)}
    return sources, counts


def cocite_sources(examples: Path) -> dict[str, list[dict]]:
    """The abstracts the co-citation examples of `examples` (a `run-all` 5_examples folder) encode, per split:
    each example's anchor, positive and negatives."""
    from aspire.data.papers import jsonl_objects

    papers = {r["paper_id"]: r for _, r in jsonl_objects(examples / "abstracts.jsonl")}
    out = {}
    for split in ("train", "dev"):
        ids = set()
        for _, e in jsonl_objects(examples / f"examples.{split}.jsonl"):
            ids |= {e["query_id"], e["positive_id"], *e.get("negative_ids", [])}
        missing = sorted(ids - set(papers))
        if missing:
            raise ValueError(f"{examples}: examples.{split}.jsonl names {len(missing)} paper(s) abstracts.jsonl lacks, "
                             f"e.g. {missing[:3]}")
        out[f"cocite/{split}"] = [{"paper_id": pid, "title": papers[pid].get("title") or "",
                                   "text": " ".join(papers[pid]["abstract"])} for pid in sorted(ids)]
    return out


def context2doc_sources(data: Path, with_left_out: bool) -> tuple[dict[str, list[dict]], dict]:
    """context2doc's train and dev cited abstracts (`context2doc/{split}`) and query sentences
    (`context2doc_queries/{split}`); `with_left_out` puts back the queries today's reader leaves out as a test
    query's twin, as the shipped model's runs read them. Also the pair counts."""
    from aspire.benchmarks.context2doc import load_context2doc, query_text, read_records

    records = dict(read_records(data / "cocite-acl" / "cocitations.jsonl"))
    out, counts = {}, {}
    for split in ("train", "dev"):
        bench = load_context2doc(data / "cocite-acl", split)
        qrels = {q: set(rel) for q, rel in bench.qrels.items()}
        queries = dict(bench.queries)
        if with_left_out:
            for qid in bench.left_out:
                qrels[qid] = {c["paper_id"] for c in records[qid]["cited"]}
                queries[qid] = query_text(records[qid]["context"])
        cited = {pid for rel in qrels.values() for pid in rel}
        out[f"context2doc/{split}"] = [{"paper_id": p.paper_id, "title": p.title, "text": " ".join(p.sentences)}
                                       for p in bench.candidates if p.paper_id in cited]
        out[f"context2doc_queries/{split}"] = [{"paper_id": f"ctx:{q}", "title": "", "text": t}
                                               for q, t in queries.items()]
        counts[split] = {"queries": len(queries), "pairs": sum(len(r) for r in qrels.values()),
                         "cited_papers": len(cited), "left_out_put_back": len(bench.left_out) if with_left_out else 0}
    return out, counts


SENTENCE_BENCH = "context2doc_test_sentences"


def describe(pairs: list[dict], bench: list[dict], sources: dict[str, list[dict]], data: Path) -> list[dict]:
    """Each pair with both titles, the containment the other way, whether the titles or the abstract keys agree,
    and the first held-out rule of today that removes the training record (None: none does)."""
    from aspire.benchmarks.heldout import benchmark_papers
    from aspire.data.acl import abstract_key, normalise_title

    held = benchmark_papers(data)
    by_bench = {(b["benchmark"], b["paper_id"]): b for b in bench}
    by_train = {(s, t["paper_id"]): t for s, texts in sources.items() for t in texts}
    out = []
    for p in sorted(pairs, key=lambda p: (p["benchmark"], -p["containment"], p["bench_id"], p["source"])):
        b, t = by_bench[(p["benchmark"], p["bench_id"])], by_train[(p["source"], p["train_id"])]
        out.append({**p, "bench_title": b["title"], "train_title": t["title"], "role": b.get("role"),
                    "reverse_containment": round(containment(t["text"], b["text"]) or 0.0, 4),
                    "same_title": bool(normalise_title(b["title"])) and normalise_title(b["title"]) == normalise_title(t["title"]),
                    "same_abstract_key": bool(abstract_key(b["text"])) and abstract_key(b["text"]) == abstract_key(t["text"]),
                    "removed_today_by": None if p["source"].startswith("context2doc_queries")
                    else held.reason(t["paper_id"], t["title"], t["text"])})
    return out


def main(argv: list[str] | None = None) -> int:
    from aspire.io import write_json
    from aspire.paths import DATA

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cocite-examples", required=True, type=Path,
                   help="the 5_examples folder the model's co-cited pairs came from (python -m aspire.data run-all)")
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (benchmarks and sources)")
    p.add_argument("--max-papers", type=int, default=8000, help="the teacher's --max-papers")
    p.add_argument("--dev-share", type=float, default=0.05, help="the distill task's dev_share")
    p.add_argument("--report-from", type=float, default=min(THRESHOLDS), help="lowest containment listed")
    p.add_argument("--out", type=Path, help="also write the table and the pairs here (JSON)")
    args = p.parse_args(argv)
    lacking = [name for name in ("abstracts.jsonl", "examples.train.jsonl", "examples.dev.jsonl")
               if not (args.cocite_examples / name).is_file()]
    if lacking:  # before the minute of reading the ACL abstracts
        p.error(f"--cocite-examples {args.cocite_examples}: no {', '.join(lacking)} (a run-all output's 5_examples)")
    started = time.time()
    bench = benchmark_texts(args.data)
    acl, acl_counts = acl_sources(args.data, args.max_papers, args.dev_share)
    c2d, c2d_counts = context2doc_sources(args.data, with_left_out=True)
    sources = {**acl, **cocite_sources(args.cocite_examples), **c2d}
    # abstracts against abstracts; the test query sentences against the sentences trained on
    abstracts = {k: v for k, v in sources.items() if not k.startswith("context2doc_queries")}
    sentences = {k: v for k, v in sources.items() if k.startswith("context2doc_queries")}
    pairs = scan([b for b in bench if b["benchmark"] != SENTENCE_BENCH], abstracts, args.report_from)
    s_pairs = scan([b for b in bench if b["benchmark"] == SENTENCE_BENCH], sentences, args.report_from)
    names = list(dict.fromkeys(b["benchmark"] for b in bench))
    rows = [r for r in table(pairs + s_pairs, names, list(sources))
            if (r["benchmark"] == SENTENCE_BENCH) == r["source"].startswith("context2doc_queries")]
    result = {
        "command": "python experiments/check_reworded_leak.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.date.today().isoformat(), "n": N, "thresholds": list(THRESHOLDS),
        "report_from": args.report_from, "cocite_examples": str(args.cocite_examples),
        "benchmark_papers": dict(Counter(b["benchmark"] for b in bench)),
        "csfcube_queries": sum(b.get("role") == "query" for b in bench),
        "benchmark_papers_without_5gram": dict(Counter(b["benchmark"] for b in bench if not ngrams(b["text"]))),
        "training_texts": {k: len(v) for k, v in sources.items()}, "acl": acl_counts, "context2doc": c2d_counts,
        "table": rows,
        "pairs": describe([q for q in pairs + s_pairs if not q["same_id"]], bench, sources, args.data),
        "seconds": round(time.time() - started, 1)}
    print(f"{'benchmark':28s} {'training source':26s} {'containment >=':>14s} {'pairs':>6s} {'papers':>6s} "
          f"{'same id':>7s}")
    for r in rows:
        if r["pairs"] or r["same_id"] or r["threshold"] == THRESHOLDS[0]:
            print(f"{r['benchmark']:28s} {r['source']:26s} {r['threshold']:14.1f} {r['pairs']:6d} "
                  f"{r['benchmark_papers']:6d} {r['same_id']:7d}")
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
