"""The co-citation ingest of records leaves out a reworded copy of a context2doc test query that cites one of its
papers, as the `context2doc` task does: P13-1066's "There have been various extensions to multi-grain (Titov and
McDonald, 2008), labeled (Ramage et al, 2009), and sequential ..." (test query L236 less a clause, citing its two
papers) was the context of the training example D09-1026|P08-1036 of `aspire data run-all` on the real data."""

from __future__ import annotations

import json

from aspire.cli.data import main

TWINS = (235, 2448)  # the lines of P13-1066's and W06-1624's reworded copies of test queries L236 and L1574
OTHERS = (1, 3, 4, 5, 6, 7, 8)  # lines citing other papers, or other statements
TEST_SENTENCE = 1  # of OTHERS, a context2doc test sentence itself (dropped as an exact copy, as before the change)


def test_records_ingest_leaves_out_reworded_copies_of_test_queries(shared_data, tmp_path):
    lines = (shared_data / "cocite-acl" / "cocitations.jsonl").read_text(encoding="utf-8").splitlines()
    records = tmp_path / "slice.jsonl"
    records.write_text("".join(lines[n - 1] + "\n" for n in (*TWINS, *OTHERS)), encoding="utf-8")
    assert main(["cocite-from-records", "--in", str(records), "--out", str(tmp_path / "i"), "-q"]) == 0
    kept = [json.loads(line)["text"] for line in (tmp_path / "i" / "contexts.jsonl").read_text().splitlines()]
    twins = [json.loads(lines[n - 1])["context"] for n in TWINS]
    assert kept and not set(twins) & set(kept)
    report = json.loads((tmp_path / "i" / "report.json").read_text())
    others = {n: json.loads(lines[n - 1])["context"] for n in OTHERS}
    assert [n for n, text in others.items() if text not in kept] == [TEST_SENTENCE]  # the rest stay: none over-dropped
    assert report["counts"]["dropped_benchmark_test"] == len(TWINS) + 1
