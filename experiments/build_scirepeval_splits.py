"""Build the committed split of the SciRepEval formats (venue, year, same-author) on the ACL abstracts.

    python experiments/build_scirepeval_splits.py [--data ../shared/data] [--out aspire/benchmarks/splits/scirepeval_formats.json]

Seeded (seed 0): the same data give the same file. What it draws is described in
`aspire.benchmarks.acl_formats`, `venue` and `same_author`; the sizes are the constants below.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from aspire.benchmarks.acl_formats import ACL_FILE, SPLIT_FILE, check_disjoint, checksum, read_records
from aspire.benchmarks.heldout import ranking_titles
from aspire.benchmarks.same_author import RULE as AUTHOR_RULE
from aspire.benchmarks.same_author import build_pools, counted_names, qrels_of
from aspire.benchmarks.venue import RULE as VENUE_RULE
from aspire.benchmarks.venue import venue_class
from aspire.checksum import file_sha256
from aspire.data.acl import normalise_title
from aspire.io import write_json
from aspire.paths import DATA

SEED = 0
PER_CLASS = {"test": 50, "dev": 20, "train": 60}  # venue / year papers per class and split, drawn in this order
AUTHOR_POOLS = {"test": 400, "dev": 200}  # drawn in this order


def build(data: Path) -> dict:
    source = data / "acl-anthology" / ACL_FILE
    records = read_records(source)
    others = dict(ranking_titles(data))
    others["cocite"] = frozenset(normalise_title(c.get("title") or "")
                                 for line in open(data / "cocite-acl" / "cocitations.jsonl", encoding="utf-8")
                                 if line.strip() for c in json.loads(line)["cited"]) - {""}
    excluded = {name: sorted(r["paper_id"] for r in records if normalise_title(r["title"] or "") in titles)
                for name, titles in others.items()}
    out = {p for ids in excluded.values() for p in ids}
    usable = [r for r in records if r["paper_id"] not in out]
    rng = random.Random(SEED)
    by_class: dict[str, list[str]] = {}
    for r in usable:
        c = venue_class(r["venues"])
        if c is not None and str(r.get("year") or "").isdigit():
            by_class.setdefault(c, []).append(r["paper_id"])
    venue_year = {name: [] for name in PER_CLASS}
    for c in sorted(by_class):
        ids = sorted(by_class[c])
        rng.shuffle(ids)
        start = 0
        for name, n in PER_CLASS.items():
            venue_year[name] += ids[start:start + n]
            start += n
    venue_year = {k: sorted(venue_year[k]) for k in ("train", "dev", "test")}
    taken = {p for ids in venue_year.values() for p in ids}
    names = counted_names(records)
    no_authors = sorted(r["paper_id"] for r in usable if not r.get("authors"))
    candidates = [r["paper_id"] for r in usable if r["paper_id"] not in taken and r.get("authors")]
    pools = build_pools(candidates, names, AUTHOR_POOLS, seed=SEED)
    pools = {k: pools[k] for k in ("dev", "test")}
    body = {"venue_year": venue_year, "same_author": pools}
    check_disjoint(body)
    queries = {k: len(qrels_of(v, names)) for k, v in pools.items()}
    return {
        "source": f"acl-anthology/{ACL_FILE}", "source_sha256": file_sha256(source), "seed": SEED,
        "sizes": {"venue_year": {k: len(v) for k, v in venue_year.items()},
                  "venue_classes": {k: dict(sorted(Counter(venue_class(r["venues"]) for r in records
                                                           if r["paper_id"] in set(v)).items()))
                                    for k, v in venue_year.items()},
                  "same_author_pools": {k: len(v) for k, v in pools.items()}, "same_author_queries": queries},
        "rules": {"venue": VENUE_RULE, "venue_year_draw": f"per class and split, seeded shuffle: {PER_CLASS}",
                  "same_author": AUTHOR_RULE, "same_author_pools": f"seed paper + up to 3 related papers, {AUTHOR_POOLS}",
                  "excluded": "ACL papers whose normalised title is a CSFCube / reviewer-set / context2doc-test / "
                              "co-citation-set paper's are in no split"},
        "excluded": excluded,
        "no_authors": {"count": len(no_authors), "ids": no_authors},
        "splits": body,
        "checksum": checksum(body),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA), help="data root (default %(default)s)")
    parser.add_argument("--out", default=str(SPLIT_FILE), help="split file (default %(default)s)")
    args = parser.parse_args()
    split = build(Path(args.data))
    write_json(args.out, split)
    print(json.dumps(split["sizes"], indent=1), {k: len(v) for k, v in split["excluded"].items()},
          split["no_authors"]["count"])


if __name__ == "__main__":
    main()
