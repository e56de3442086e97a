"""Round 49: the ACL Anthology reader (`aspire.data.acl.read_acl`) and the config layer (`aspire.config`), checked
against a plain json/gzip reading of the real file and hand-built expectations: a paper id given twice is refused
(the later record, naming the first line), as `iter_papers` refuses it; `check_ranges` refuses a fractional value
of an `int | None` field as it does for an `int` one; overrides, coercion, bounds and round trips as documented."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aspire.config import ConfigError, apply_overrides, check_ranges, from_dict, load_config, ranged, to_dict
from aspire.data.acl import HeldOut, normalise_title, read_acl

ACL = Path(__file__).resolve().parents[2] / "shared" / "data" / "acl-anthology" / "papers.jsonl.gz"


# ---- read_acl --------------------------------------------------------------------------------------------------

def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_paper_id_given_twice_is_refused_naming_both_lines(fresh):
    path = _write(fresh / "dup.jsonl", [
        {"paper_id": "X1", "title": "First", "abstract": "One thing here. Two things here."},
        {"paper_id": "X1", "title": "Second", "abstract": "Other text here. More text."},
        {"paper_id": "Y", "title": "Fifth", "abstract": "Seventh sentence. Eighth sentence."},
    ])
    with pytest.raises(ValueError, match=r"dup\.jsonl: paper id 'X1' is used by two records \(lines 1 and 2\)"):
        read_acl(path, frozenset(), 0)  # two papers under one id were both kept, and took turns in the split cache
    read_acl.cache_clear()
    # a held-out copy does not count: the other one is used
    papers, stats = read_acl(path, frozenset({"first"}), 0)
    assert [p.title for p in papers] == ["Second", "Fifth"] and stats["removed_benchmark"] == 1


def test_a_repeated_id_is_refused_whatever_the_sample(fresh):
    records = [{"paper_id": f"P{i % 6}", "title": f"Title {i}", "abstract": f"Sentence {i} here. Another one."}
               for i in range(12)]
    path = _write(fresh / "dup.jsonl", records)
    with pytest.raises(ValueError, match=r"paper id 'P0' is used by two records \(lines 1 and 7\)"):
        read_acl(path, frozenset(), 4)  # once caught only when both copies fell in the sample
    read_acl.cache_clear()
    ints = _write(fresh / "ints.jsonl", [{"paper_id": 7, "title": "Third", "abstract": "A b. C d."},
                                         {"paper_id": "7", "title": "Fourth", "abstract": "E f. G h."}])
    with pytest.raises(ValueError, match=r"paper id '7' is used by two records"):
        read_acl(ints, frozenset(), 0)  # 7 is the paper "7"


@pytest.fixture(scope="module")
def real_acl(tmp_path_factory):
    if not ACL.is_file():
        pytest.skip(f"ACL Anthology data not found at {ACL}")
    raw = [json.loads(line) for line in gzip.open(ACL, "rt", encoding="utf-8") if line.strip()]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASPIRE_CACHE", str(tmp_path_factory.mktemp("acl-cache")))
        read_acl.cache_clear()
        held = frozenset(normalise_title(r["title"]) for r in raw[:5])
        first = read_acl(ACL, held, 40)
        read_acl.cache_clear()
        second = read_acl(ACL, held, 40)
        read_acl.cache_clear()
        yield raw, held, first, second


@pytest.mark.slow
def test_real_acl_sample_matches_a_plain_reading(real_acl):
    raw, held, (papers, stats), (again, stats2) = real_acl
    by_id = {str(r["paper_id"]): r for r in raw}
    assert len(by_id) == len(raw)  # the real file repeats no id
    assert [p.paper_id for p in papers] == [p.paper_id for p in again] and stats == stats2  # seed 0, every call
    assert len(papers) == 40 and len({p.paper_id for p in papers}) == 40
    removed = [r for r in raw if normalise_title(r["title"]) in held]
    assert stats["read"] == len(raw) and stats["removed_benchmark"] == len(removed) >= 5
    assert "removed_benchmark_by" not in stats  # a set of titles: by title alone
    for p in papers:
        r = by_id[p.paper_id]
        assert normalise_title(r["title"]) not in held
        assert p.title == r["title"]
        for key in ("year", "venues", "authors", "booktitle", "doi"):
            if key in r:
                assert p.extra[key] == r[key], (p.paper_id, key)
        joined = "".join("".join(p.sentences).split())  # the split keeps every character but spaces, in order
        assert joined == "".join(r["abstract"].split()), p.paper_id
    # the sample is seed 0's draw from the valid, kept records in file order
    kept = [r for r in raw if normalise_title(r["title"]) not in held]
    if not stats["rejected"]:
        expect = [str(r["paper_id"]) for r in random.Random(0).sample(kept, 40)]
        assert [p.paper_id for p in papers] == expect


def test_held_out_by_id_counts_per_rule(fresh):
    path = _write(fresh / "h.jsonl", [
        {"paper_id": "A", "title": "Alpha paper", "abstract": "Alpha text here. More alpha."},
        {"paper_id": "B", "title": "Beta paper", "abstract": "Beta text here. More beta."},
        {"paper_id": "C", "title": "Gamma paper", "abstract": "Gamma text here. More gamma."},
    ])
    papers, stats = read_acl(path, HeldOut(titles=frozenset({"alphapaper"}), paper_ids=frozenset({"A", "B"})), 0)
    assert [p.paper_id for p in papers] == ["C"]
    assert stats["removed_benchmark"] == 2 and stats["removed_benchmark_by"] == {"title": 1, "paper_id": 1,
                                                                                 "abstract": 0}


# ---- config ----------------------------------------------------------------------------------------------------

@dataclass
class _Sub:
    lr: float = ranged(1e-3, gt=0)
    n: int = ranged(2, ge=1)
    cap: int | None = ranged(None, ge=1)
    flag: bool = False
    name: str = "x"


@dataclass
class _Top:
    train: _Sub = field(default_factory=_Sub)
    tags: list[str] = field(default_factory=list)


def test_check_ranges_refuses_a_fraction_for_an_int_or_none_field():
    with pytest.raises(ConfigError, match=r"cap: must be an integer, got 2\.5"):
        check_ranges(_Sub(cap=2.5))
    check_ranges(_Sub(cap=None))
    check_ranges(_Sub(cap=3))

    @dataclass
    class Typed:
        a: int | None = ranged(None, ge=0)

    Typed.__dataclass_fields__["a"].type = int | None  # the real type, not its text
    with pytest.raises(ConfigError, match="a: must be an integer"):
        check_ranges(Typed(a=1.5))
    with pytest.raises(ConfigError, match="must be an integer"):  # the real config that checks one built in Python
        from aspire.data.negatives import HardNegativesConfig, check_config
        check_config(HardNegativesConfig(method="nearest", max_length=2.5))


def test_overrides_last_wins_unknown_keys_and_coercion():
    cfg = load_config(_Top, None, ["train.lr=3", "train.lr=5", "--train.n=4"])
    assert cfg.train.lr == 5.0 and cfg.train.n == 4
    assert load_config(_Top, None, ["train.lr=3", "train={n: 7}"]).train == _Sub(lr=3.0, n=7)
    with pytest.raises(ConfigError) as err:
        load_config(_Top, None, ["train.lrr=1"])
    assert "train.lrr" in str(err.value) and "['cap', 'flag', 'lr', 'n', 'name']" in str(err.value)
    for override, said in (("train.n=0", "train.n: must be >= 1, got 0"), ("train.lr=.inf", "train.lr: must be a finite number"),
                           ("train.n=2.5", "train.n: expected an integer, got 2.5"),
                           ("train.name=no", "train.name: expected a string, got the boolean")):
        with pytest.raises(ConfigError, match=said):
            load_config(_Top, None, [override])
    assert load_config(_Top, None, ["train.flag=yes"]).train.flag is True
    assert load_config(_Top, None, ["train.name=0123"]).train.name == "0123"
    assert load_config(_Top, None, ["train.lr=1e-3"]).train.lr == 1e-3
    with pytest.raises(ConfigError, match="octal"):
        load_config(_Top, None, ["train.n=010"])


def test_to_dict_from_dict_and_apply_overrides_round_trip(tmp_path):
    cfg = load_config(_Top, None, ["train.name=1e-3", "train.cap=3", "tags=[a, b]"])
    assert from_dict(_Top, to_dict(cfg)) == cfg
    assert apply_overrides(cfg, []) == cfg
    assert apply_overrides(cfg, ["train.n=9"]) == dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, n=9))
    from aspire.config import save_config
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(_Top, tmp_path / "c.yaml") == cfg
