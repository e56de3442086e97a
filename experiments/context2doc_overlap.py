"""How the co-citation training examples overlap the context2doc test split: the papers and the pairs of papers.

    python -m aspire.data run-all --in ../shared/data/cocite-acl/cocitations.jsonl --out OUT
    python experiments/context2doc_overlap.py --examples OUT/5_examples [--out FILE.json]

context2doc is split by citing paper and its candidates are every cited abstract, so a training pair can be a
pair of papers that a test sentence cites together (from another citing sentence). This counts them; it does
not measure what they are worth to a model (that takes training without them).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from aspire.benchmarks.context2doc import load_context2doc
from aspire.io import read_jsonl, write_json
from aspire.paths import DATA


def overlap(examples: Path, data: Path) -> list[dict]:
    bench = load_context2doc(data, "test")
    test_pairs, test_cited = set(), set()
    for rel in bench.qrels.values():
        test_cited |= set(rel)
        test_pairs |= set(itertools.combinations(sorted(rel), 2))
    rows = []
    for split in ("train", "dev"):
        ex = read_jsonl(examples / f"examples.{split}.jsonl")
        pairs = {tuple(sorted((e["query_id"], e["positive_id"]))) for e in ex}
        rows.append({"split": split, "examples": len(ex),
                     "naming_a_test_cited_paper": sum(e["query_id"] in test_cited or e["positive_id"] in test_cited
                                                      for e in ex),
                     "distinct_pairs": len(pairs), "pairs_a_test_sentence_cites_together": len(pairs & test_pairs),
                     "test_queries": len(bench.qrels), "test_cocited_pairs": len(test_pairs),
                     "test_cited_papers": len(test_cited)})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", required=True, type=Path, help="a run-all output's 5_examples folder")
    p.add_argument("--data", type=Path, default=DATA / "cocite-acl", help="the co-citation data folder")
    p.add_argument("--out", type=Path, help="also write the rows here (JSON)")
    args = p.parse_args()
    rows = overlap(args.examples, args.data)
    for row in rows:
        print(json.dumps(row))
    if args.out:
        write_json(args.out, rows)


if __name__ == "__main__":
    main()
