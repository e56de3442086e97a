"""One work under two ACL ids inside a benchmark's pools: how often, per benchmark and split.

`aspire.data.acl.same_work_groups` reads papers sharing a normalised title or abstract key as one work (a workshop
paper and its journal version, one abstract under two titles). Training and the negative miners read them as one
paper; the benchmarks' committed pools were drawn before that rule. This script counts, on the real data:

- same-author (dev, test pools): queries whose own other version is among their candidates; queries for which one
  work is both relevant and not, or relevant twice (counted as two relevant papers);
- context2doc (train, dev, test; every cited abstract is a candidate): the same, and queries whose citing paper
  itself, or its other version, is a (grade-0) candidate.

Works are grouped over every ACL abstract and every context2doc candidate together. Prints a table; `--out` writes
the counts and the query ids as JSON. Nothing is scored and no split changes (see
experiments/results/same_work_pools.md for what a fix would move).

    python experiments/same_work_pools.py --out experiments/results/same_work_pools.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aspire.benchmarks.context2doc import SPLIT_NAMES, load_context2doc
from aspire.benchmarks.same_author import load_same_author
from aspire.data.acl import same_work_groups
from aspire.evaluate.probes import acl_index
from aspire.paths import DATA

KINDS = ("own version a candidate", "one work relevant and not", "one work relevant twice", "citing paper a candidate",
         "citing paper's version a candidate")


def pool_counts(qrels: dict[str, dict[str, int]], others: dict[str, set[str]]) -> dict[str, list[str]]:
    """{kind: sorted query ids} of the first three `KINDS` for queries judged by `qrels` ({query: {candidate: grade}},
    every candidate of its pool judged, 0 for not relevant), with `others` {paper: its other versions}; a version
    outside a query's pool counts for nothing."""
    found: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for q, judged in qrels.items():
        if q in others and any(o in judged for o in others[q]):
            found["own version a candidate"].add(q)
        for paper in judged:
            grades = [judged[o] for o in others.get(paper, ()) if o != q and o in judged]
            if judged[paper] > 0 and grades:
                if any(g > 0 for g in grades):
                    found["one work relevant twice"].add(q)
                if any(g == 0 for g in grades):
                    found["one work relevant and not"].add(q)
    return {kind: sorted(qs) for kind, qs in found.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="the shared data folder (acl-anthology/, cocite-acl/)")
    ap.add_argument("--out", help="write the counts and query ids here (JSON)")
    args = ap.parse_args(argv)
    papers, records = acl_index(Path(args.data) / "acl-anthology", every_paper=True)
    benches = {split: load_context2doc(Path(args.data) / "cocite-acl", split) for split in SPLIT_NAMES}
    candidates = {p.paper_id: p for p in benches["test"].candidates}  # every split: every cited abstract
    groups = same_work_groups({**papers, **candidates})
    others = {p: set(g) - {p} for g in groups for p in g}
    rows = {}
    for split in ("dev", "test"):
        pool, qrels = load_same_author(records, split)
        rows[f"same-author {split}"] = {"queries": len(qrels), **pool_counts(qrels, others)}
    for split, bench in benches.items():
        ids = set(candidates)
        qrels = {q: {c: rel.get(c, 0) for c in ids} for q, rel in bench.qrels.items()}
        counts = pool_counts(qrels, others)
        counts["citing paper a candidate"] = sorted(q for q, c in bench.citing.items() if c in ids)
        counts["citing paper's version a candidate"] = sorted(
            q for q, c in bench.citing.items() if others.get(c, set()) & ids)
        rows[f"context2doc {split}"] = {"queries": len(bench.queries), **counts}
    print(f"same-work groups over {len({**papers, **candidates})} papers: {len(groups)} "
          f"({sum(map(len, groups))} papers)\n")
    print("| benchmark | queries | " + " | ".join(KINDS) + " |")
    print("|---|---:|" + "---:|" * len(KINDS))
    for name, row in rows.items():
        print(f"| {name} | {row['queries']} | " + " | ".join(str(len(row.get(k, []))) for k in KINDS) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"groups": len(groups), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
