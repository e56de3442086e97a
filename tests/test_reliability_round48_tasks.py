"""Round 48, training tasks: the `author` task counted an author's papers within the split, so an author prolific
in the source (over `max_author_papers`) linked papers in the small dev split; now counted over both splits."""

from __future__ import annotations

import json

from aspire.benchmarks.same_author import author_key
from aspire.train.tasks import _in_dev, author_task
from tests.test_train import tiny_config


def test_an_author_prolific_in_the_source_links_nothing_in_either_split(tiny_model_dir, examples_dir, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    share = 0.1
    ids = [f"W{i}" for i in range(40)]
    dev = [p for p in ids if _in_dev(p, share)]
    train = [p for p in ids if not _in_dev(p, share)]
    cap = max(len(dev), 2)
    assert 2 <= len(dev) <= cap < len(train)  # prolific over the source, not within the dev split
    rows = [{"paper_id": pid, "title": f"title {pid}", "abstract": ["a model.", "the data."],
             "authors": ["Pro Lific", f"solo {pid}"]} for pid in ids]
    rows += [{"paper_id": pid, "title": f"title {pid}", "abstract": ["a model.", "the data."],
              "authors": ["Ann Lee"]} for pid in ("Z1", "Z2", "Z3", "Z4")]
    path = tmp_path / "acl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = (f"{{name: author, sources: [acl], acl_path: {path}, benchmarks_dir: null, dev_share: {share}, "
            f"max_author_papers: {cap}, views: 2}}")
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"tasks=[{task}]")
    keys = {r["paper_id"]: {author_key(a) for a in r["authors"]} for r in rows}
    total = {}
    for ks in keys.values():
        for k in ks:
            total[k] = total.get(k, 0) + 1
    linking = {k for k, n in total.items() if n <= cap}
    for split in ("train", "dev"):
        data = author_task(cfg, cfg.tasks[0], split, 0)
        mine = [r["paper_id"] for r in rows if _in_dev(r["paper_id"], share) == (split == "dev")]
        assert set(data.papers) == set(mine)
        expect = {(a, b) for a in mine for b in mine if a != b and keys[a] & keys[b] & linking}
        got = {(e.query_id, e.positive_id) for e in data.examples}
        assert got <= expect, f"{split}: pairs linked only by the prolific author: {sorted(got - expect)[:3]}"
        for e in data.examples:  # negatives exclude exactly the papers sharing a linking author
            assert set(e.members) == {e.query_id} | {b for a, b in expect if a == e.query_id}
        assert data.stats["authors_over_max"] == 1
