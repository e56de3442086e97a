"""Round 34: the ACL task formats (`aspire.benchmarks.acl_formats`) and the held-out rules
(`aspire.benchmarks.heldout`): user label files refused by line for every malformed line, the paper-level
intervals refusing a level that is no share, and the committed split checked against the real ACL file."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from aspire.benchmarks.acl_formats import (
    ACL_FILE,
    bootstrap_papers,
    heldout_ids,
    load_split,
    paired_papers_test,
    read_label_file,
)
from tests.test_reliability_round23_formats import raw_acl_records

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
ACL = DATA / "acl-anthology" / ACL_FILE


def _write(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / "labels.jsonl"
    path.write_bytes(body)
    return path


# ---- read_label_file: every malformed line is a ValueError naming its line ----

def test_label_integer_too_large_for_a_float_is_named(tmp_path):
    """A 401-digit integer label was an OverflowError ("int too large to convert to float") naming no record."""
    path = _write(tmp_path, b'{"paper_id": "a", "label": 1}\n{"paper_id": "b", "label": 1' + b"0" * 400 + b"}\n")
    with pytest.raises(ValueError, match=r"labels\.jsonl:2 \(paper b\): label 1000.* is not a finite number"):
        read_label_file(path, "number")


def test_label_number_of_too_many_digits_names_its_line(tmp_path):
    """json refuses an integer of over 4300 digits with a plain ValueError: it escaped the handler, naming no line."""
    path = _write(tmp_path, b'{"paper_id": "a", "label": 1}\n{"paper_id": "b", "label": 1' + b"0" * 5000 + b"}\n")
    with pytest.raises(ValueError, match=r"labels\.jsonl:2: not JSON"):
        read_label_file(path, "number")


def test_label_deeply_nested_line_names_its_line(tmp_path):
    """A deeply nested line was a RecursionError."""
    path = _write(tmp_path, b'{"paper_id": "a", "label": "x"}\n' + b"[" * (sys.getrecursionlimit() * 20) + b"\n")
    with pytest.raises(ValueError, match=r"labels\.jsonl:2: not JSON"):
        read_label_file(path, "class")


def test_label_line_not_utf8_names_its_line(tmp_path):
    """A Latin-1 byte was a UnicodeDecodeError naming a position in a read buffer, no line."""
    path = _write(tmp_path, b'{"paper_id": "a", "label": "x"}\n\n{"paper_id": "b", "label": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"labels\.jsonl:3: not UTF-8"):
        read_label_file(path, "class")


def test_label_lines_counted_and_read_as_before(tmp_path):
    """Lines end at \\r\\n, \\r or \\n as text mode cut them (line numbers unchanged); U+2028 inside a string, valid
    unescaped JSON, cuts nothing; blank lines are skipped; classes are stripped."""
    body = '{"paper_id": "a", "label": " x\u2028y "}\r\n\r\n{"paper_id": "b", "label": "z"}\r{"paper_id": "c"}\n'
    path = _write(tmp_path, body.encode("utf-8"))
    with pytest.raises(ValueError, match=r"labels\.jsonl:4 \(paper c\): missing label"):
        read_label_file(path, "class")
    path = _write(tmp_path, body.replace('{"paper_id": "c"}', '{"paper_id": "c", "label": "w"}').encode("utf-8"))
    assert read_label_file(path, "class") == {"a": "x\u2028y", "b": "z", "c": "w"}
    numbers = _write(tmp_path, b'{"paper_id": "a", "label": 2019}\n{"paper_id": "b", "label": 1e308}\n')
    assert read_label_file(numbers, "number") == {"a": 2019.0, "b": 1e308}


# ---- bootstrap_papers / paired_papers_test: level is a share in (0, 1), as stats refuses otherwise ----

def _accuracy(y, pred):
    return float(np.mean(np.asarray(y) == np.asarray(pred)))


@pytest.mark.parametrize("level", [0, 95, -0.5, 1, float("nan")])
def test_bootstrap_level_not_a_share_is_refused(level):
    """level 0 gave a silent one-point interval ((0.5, 0.5) here), 95 numpy's quantile error."""
    with pytest.raises(ValueError, match="level must be a share between 0 and 1"):
        bootstrap_papers(_accuracy, [1, 0, 1, 1], [1, 1, 1, 0], n_boot=20, level=level)
    with pytest.raises(ValueError, match="level must be a share between 0 and 1"):
        paired_papers_test(_accuracy, [1, 0, 1, 1], [1, 1, 1, 0], [1, 0, 0, 1], n_perm=5, n_boot=5, level=level)


def test_bootstrap_and_paired_test_match_a_hand_loop():
    """The percentile interval and the randomisation p-value against a loop written here (same draws)."""
    rng0 = np.random.default_rng(3)
    y = rng0.integers(0, 3, 30)
    a, b = np.where(rng0.random(30) < 0.7, y, (y + 1) % 3), np.where(rng0.random(30) < 0.5, y, (y + 1) % 3)
    lo, hi = bootstrap_papers(_accuracy, y, a, n_boot=200, seed=7, level=0.9)
    rng = np.random.default_rng(7)
    stats = [_accuracy(y[i], a[i]) for i in (rng.integers(0, 30, 30) for _ in range(200))]
    assert (lo, hi) == pytest.approx((np.quantile(stats, 0.05), np.quantile(stats, 0.95)), abs=1e-12)
    out = paired_papers_test(_accuracy, y, a, b, n_perm=300, n_boot=50, seed=1)
    rng = np.random.default_rng(1)
    observed = _accuracy(y, a) - _accuracy(y, b)
    hits = 1
    for _ in range(300):
        swap = rng.random(30) < 0.5
        hits += abs(_accuracy(y, np.where(swap, b, a)) - _accuracy(y, np.where(swap, a, b))) >= abs(observed) - 1e-12
    assert out["delta"] == pytest.approx(observed) and out["p_value"] == pytest.approx(hits / 301)
    assert out["n_units"] == 30 and not math.isnan(out["p_value"])


# ---- the real ACL file: the committed split, its labels and what training must leave out ----

needs_data = pytest.mark.skipif(not ACL.is_file(), reason=f"real data not present at {ACL}")


@needs_data
def test_real_split_labels_and_heldout_by_hand():
    """Venue classes and years of every venue/year paper from the raw records by a hand loop of the documented rule;
    the held-out ids are exactly the dev and test papers; no venue/year training paper shares a normalised title or
    an abstract key with a held-out paper; every split paper is in the ACL file with an abstract."""

    from aspire.benchmarks.acl_formats import read_records
    from aspire.benchmarks.venue import load_venue_task
    from aspire.benchmarks.year import load_year_task
    from aspire.data.acl import abstract_key, normalise_title

    raw = raw_acl_records(ACL)
    records = {r["paper_id"]: r for r in read_records(ACL)}
    assert set(records) == set(raw)
    splits, classes = load_venue_task(records)
    _, years = load_year_task(records)
    body = load_split()["splits"]
    assert heldout_ids() == {p for task in body.values() for name, ids in task.items() if name != "train" for p in ids}
    main = {"acl", "emnlp", "naacl", "eacl", "coling", "findings", "aacl"}
    other = {"tacl": "journal", "cl": "journal", "clinicalnlp": "bionlp",
             **{v: v for v in ("lrec", "semeval", "wmt", "iwslt", "sigdial", "conll", "bea", "bionlp", "inlg")}}
    for pid, label in classes.items():
        venues = [v for v in raw[pid]["venues"] if v not in ("ws", "ijcnlp")]
        assert venues and all(v in main or v in other for v in venues), pid
        specific = {other[v] for v in venues if v in other}
        assert len(specific) <= 1 and label == (specific.pop() if specific else "main"), pid
        assert years[pid] == float(raw[pid]["year"]), pid
    assert len(classes) == len(years) == sum(len(v) for v in splits.values()) == 1430
    held = heldout_ids()
    titles = {normalise_title(raw[p]["title"]) for p in held} - {""}
    keys = {abstract_key(raw[p]["abstract"]) for p in held} - {""}
    for pid in body["venue_year"]["train"]:
        assert normalise_title(raw[pid]["title"]) not in titles and abstract_key(raw[pid]["abstract"]) not in keys, pid


@needs_data
def test_real_split_rebuilds_identically(monkeypatch):
    """experiments/build_scirepeval_splits.py on the real data gives the committed file key for key (ids, sizes,
    exclusions, source SHA-256 and checksum), and the checksum is the SHA-256 of the ids."""
    import hashlib

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    import build_scirepeval_splits

    committed = load_split()
    rebuilt = build_scirepeval_splits.build(DATA)
    assert rebuilt == committed
    assert committed["checksum"] == hashlib.sha256(json.dumps(committed["splits"], sort_keys=True).encode()).hexdigest()
