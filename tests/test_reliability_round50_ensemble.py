"""Round 50: the ensemble's config checks (aspire.evaluate.ensemble.load_ensemble) on tiny hand-made files."""

from __future__ import annotations

import pytest

from aspire.evaluate.ensemble import load_ensemble


def _write(tmp_path, text):
    path = tmp_path / "ens.yaml"
    path.write_text(text)
    return path


def test_members_differing_in_options_or_scorer_are_accepted(tmp_path):
    path = _write(tmp_path, "members:\n"
                  " - {name: a, model: m, scorer: maxpassage, scorer_options: {window: 2}}\n"
                  " - {name: b, model: m, scorer: maxpassage, scorer_options: {window: 3}}\n"
                  " - {name: c, model: m, scorer: abstract}\n"
                  " - {name: d, model: bm25}\n")
    assert [m.name for m in load_ensemble(path).members] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("member, match", [
    ("{name: a, model: m, scorer: abstract, wieght: 2}", r"wieght"),
    ("{name: a, model: m, scorer: abstract, weight: -1}", r"members\[0\] \(a\): weight must be >= 0"),
    ("{name: a, model: m, scorer: abstract, weight: .nan}", r"members\[0\] \(a\): weight must be >= 0"),
    ("{name: b, model: m, scorer: abstract}", r"members\[0\] \(b\): every member needs a distinct name"),
])
def test_bad_member_is_refused_naming_it(tmp_path, member, match):
    path = _write(tmp_path, f"members:\n - {member}\n - {{name: b, model: bm25}}\n")
    with pytest.raises(Exception, match=match):
        load_ensemble(path)
