"""Round 9 of the benchmark checks: run lines that `read_run` would refuse, and benchmark text under another title."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("rank, tag", [(0, "t"), (-3, "t"), (1, "two words"), (1, ""), (1, "tab\there")])
def test_run_line_refuses_a_line_read_run_would_refuse(tmp_path, rank, tag):
    """`read_run` says a rank below 1 is refused "as `run_line` refuses to write one"; `run_line` wrote rank 0 and a
    tag with a space (`q Q0 d 0 1 two words`: seven columns), which no reader of the file could take back."""
    from aspire.benchmarks.runs import read_run, run_line

    with pytest.raises(ValueError, match="rank|tag"):
        run_line("q1", "d1", rank, 1.0, tag)
    line = run_line("q1", "d1", 1, 0.5, "aspire")
    (tmp_path / "run.trec").write_text(line + "\n")
    assert read_run(tmp_path / "run.trec") == {"q1": [("d1", 0.5)]}


@pytest.mark.slow
def test_benchmark_titles_name_acl_papers_that_carry_a_benchmark_abstract_under_another_title(shared_data):
    """Training leaves benchmark papers out of the ACL abstracts by normalised title; an ACL record with a benchmark
    paper's abstract under another title was read: P19-1506 ("Like a Baby") is CSFCube paper 174798289 ("Visually
    Grounded, Situated Learning"), 2021.naacl-main.13 a reviewer-set submission, 2019.iwslt-1.25 carries venue/year
    dev paper 2019.iwslt-1.10's abstract (one word changed at character 692), 2022.deeplo-1.22 that of same-author
    test paper 2022.deeplo-1.1."""
    from aspire.benchmarks.heldout import benchmark_titles, excluded_titles

    titles = benchmark_titles(shared_data)
    removed, counts = excluded_titles(shared_data, "test")
    for twin in ("likeababyvisuallysituatedneurallanguageacquisition",  # CSFCube
                 "concealeddatapoisoningattacksonnlpmodels",  # reviewer submission
                 "multitasklearningfordifferentsubwordsegmentationsinneuralmachinetranslation",  # venue/year dev
                 "howtotranslateyoursamplesandchooseyourshotsanalyzingtranslatetrainfewshotcrosslingualtransfer"):
        assert twin in removed and twin in titles["abstract_twins"]
    others = frozenset().union(*(v for k, v in titles.items() if k != "abstract_twins"))
    assert not titles["abstract_twins"] & others and counts["abstract_twins"] == len(titles["abstract_twins"]) == 14


def test_same_author_qrels_and_venue_labels_match_a_brute_force_over_the_acl_records(shared_data):
    """The committed same-author pools' relevance (>= 2 shared names, lower-cased and spaces collapsed, names on more
    than 50 papers not counted) and the venue / year labels, recomputed here from the raw records."""
    from collections import Counter

    from aspire.benchmarks.acl_formats import ACL_FILE, read_records
    from aspire.benchmarks.same_author import load_same_author
    from aspire.benchmarks.venue import CLASSES, load_venue_task
    from aspire.benchmarks.year import load_year_task

    records = {r["paper_id"]: r for r in read_records(shared_data / "acl-anthology" / ACL_FILE)}
    key = lambda name: " ".join(name.lower().split())  # noqa: E731
    freq = Counter(n for r in records.values() for n in {key(a) for a in r["authors"] or [] if a.strip()})
    names = {p: {key(a) for a in r["authors"] or [] if a.strip() and freq[key(a)] <= 50} for p, r in records.items()}
    for split, n_queries in (("dev", 199), ("test", 400)):
        pool, qrels = load_same_author(records, split)
        brute = {q: {c: int(len(names[q] & names[c]) >= 2) for c in pool if c != q} for q in pool}
        assert qrels == {q: j for q, j in brute.items() if any(j.values())} and len(qrels) == n_queries
    splits, labels = load_venue_task(records)
    for pid, label in labels.items():
        venues = [v for v in records[pid]["venues"] if v not in ("ws", "ijcnlp")]
        classes = {CLASSES[v] for v in venues}
        assert label == (classes - {"main"} or {"main"}).pop() and len(classes - {"main"}) <= 1, pid
    per_class = {"train": 60, "dev": 20, "test": 50}
    assert {s: set(Counter(labels[p] for p in ids).values()) for s, ids in splits.items()} == {
        s: {n} for s, n in per_class.items()}
    _, years = load_year_task(records)
    assert all(years[p] == float(records[p]["year"]) for p in years)
