"""Round 33: evaluation options, `aspire encode`, the command registry, lazy exports and the layer table, checked
against references written here (a direct encode, subprocesses, the defining modules, brute-force loops)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from aspire.evaluate.options import (
    ENCODE_OPTIONS,
    EvalOptions,
    Stages,
    check_encode_options,
    default_exp,
    exact_g,
    options_exp,
    scorer_options,
)

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "faiss", "spacy", "sklearn", "onnxruntime", "openvino", "matplotlib")


# --- evaluation options -------------------------------------------------------------------------------------------

def test_eval_options_defaults_as_documented():
    got = {f.name for f in fields(EvalOptions)}
    opts = EvalOptions()
    assert (opts.encoding, opts.scorer_options, opts.cache_dir, opts.batch_size, opts.device, opts.encode_options,
            opts.query_text, opts.cand_sentences, opts.encoder_options, opts.facet_code) == (
        "contextual", {}, None, 32, None, {}, "abstract", "all", {}, "auto")
    assert got == {"encoding", "scorer_options", "cache_dir", "batch_size", "device", "encode_options",
                        "query_text", "cand_sentences", "encoder_options", "facet_code"}
    # the abstract scorer runs its own encoding; the record is of the checked options
    assert EvalOptions().checked("abstract", False).record()["encoding"] == "abstract"
    assert EvalOptions(encoding="pass").checked("abstract", False).encoding == "pass"
    stages = Stages()
    assert (stages.bm25, stages.alpha, stages.k1, stages.b, stages.rerank, stages.staged) == (
        False, None, 1.25, 0.75, None, False)


@pytest.mark.parametrize("kwargs, scorer, faceted, words", [
    ({"encoding": "contextal"}, "minl2", False, ["'contextal'", "contextual", "independent"]),
    ({"facet_code": "methods"}, "minl2", True, ["'methods'", "method", "background"]),
    ({"query_text": "title"}, "abstract", True, ["'title'", "title+facet"]),
    ({"cand_sentences": "some"}, "minl2", True, ["'some'", "facet"]),
    ({"query_text": "facet"}, "minl2", True, ["'facet'", "abstract"]),
    ({"query_text": "facet"}, "abstract", False, ["faceted"]),
    ({"cand_sentences": "facet"}, "abstract", True, ["'facet'", "minl2"]),
    ({"cand_sentences": "facet"}, "ot", False, ["faceted"]),
    ({"encoding": "abstract"}, "minl2", False, ["'abstract'", "scorer 'abstract'"]),
    ({"encoding": "pass", "encode_options": {"normalize": True}}, "abstract", False, ["pass", "normalize"]),
    ({"encode_options": {"max_length": 5}}, "minl2", False, ["contextual", "max_length"]),
    ({"encoding": "independent", "encode_options": {"joiner": " "}}, "ot", False, ["'joiner'", "pooling"]),
    ({"encode_options": {"max_lenght": 5}}, "abstract", False, ["'max_lenght'", "max_length"]),
    ({"encode_options": {"max_length": -1}}, "abstract", False, ["max_length", "-1"]),
    ({"encode_options": {"max_length": True}}, "abstract", False, ["max_length", "True"]),
    ({"encode_options": {"normalize": 1}}, "abstract", False, ["normalize", "1"]),
    ({"encode_options": {"pooling": "max"}}, "abstract", False, ["pooling", "'max'"]),
    ({"encode_options": {"joiner": 3}}, "abstract", False, ["joiner", "3"]),
])
def test_eval_options_refuse_bad_values_by_name(kwargs, scorer, faceted, words):
    with pytest.raises(ValueError) as err:
        EvalOptions(**kwargs).checked(scorer, faceted)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_encode_options_accepted_per_encoding():
    """Every option ENCODE_OPTIONS lists (pooling too, which the field's comment left out) is taken by its
    encoding, with a value of the right type."""
    values = {"max_length": 0, "normalize": False, "pooling": "cls", "joiner": None}
    for encoding, keys in ENCODE_OPTIONS.items():
        check_encode_options(encoding, {k: values[k] for k in keys})
        scorer = "abstract" if encoding == "abstract" else "minl2"
        assert EvalOptions(encoding=encoding, encode_options={k: values[k] for k in keys}).checked(
            scorer, False).encode_options == {k: values[k] for k in keys}
    assert "pooling" in ENCODE_OPTIONS["independent"] and "pooling" in ENCODE_OPTIONS["abstract"]


def test_scorer_options_refuse_by_flag():
    assert scorer_options("ot", tau=0.5, eps=0.1) == {"tau": 0.5, "eps": 0.1}
    assert scorer_options("minl2,maxpassage", window=2) == {"window": 2}
    for kwargs, flag in (({"tau": 0.0}, "--tau"), ({"tau": float("nan")}, "--tau"), ({"eps": -1.0}, "--eps")):
        with pytest.raises(ValueError, match=flag):
            scorer_options("ot", **kwargs)
    with pytest.raises(ValueError, match="--window"):
        scorer_options("minl2", window=2)


def test_experiment_names_distinct_and_exact():
    # exact_g reads back as the value it writes, for values :g would round (a brute-force check)
    for x in (0.815, 1.0, 0.81500001, 1234567.0, 1e-7, 3.0000001, 0.1 + 0.2):
        assert float(exact_g(x)) == x
    names = {default_exp("m", "ot", scorer_options={"tau": t}) for t in (1234567.0, 1234568.0, 0.05, 0.0500001)}
    assert len(names) == 4
    assert options_exp("m", "ot", EvalOptions()) == default_exp("m", "ot")
    assert options_exp("m", "ot", EvalOptions(encoder_options={"backend": "torch", "quantize": None})) == "m-contextual-ot"
    assert options_exp("m", "ot", EvalOptions(encoder_options={"quantize": "bf16"})) == "m-contextual-ot-quantize-bf16"


def test_stages_refuse_a_fusion_weight_with_nothing_to_fuse():
    """`Stages(alpha=...)` without BM25 ran the model alone, and BM25 with an alpha but no model ran BM25 alone, the
    weight dropped without a word (`exp` named them as unfused runs)."""
    with pytest.raises(ValueError, match="no BM25"):
        Stages(alpha=0.5).checked(has_model=True)
    with pytest.raises(ValueError, match="no model"):
        Stages(bm25=True, alpha=0.5).checked(has_model=False)
    with pytest.raises(ValueError, match="no model"):
        Stages(bm25=True, alpha=0.5).exp(None)
    # what runs is unchanged
    assert Stages(bm25=True, alpha=0.5).checked(has_model=True).exp("m") == "m-bm25-a0.5"
    assert Stages(bm25=True).exp(None) == "bm25"
    assert Stages().exp("m") == "m"
    for alpha in (None, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            Stages(bm25=True, alpha=alpha).checked(has_model=True)
    with pytest.raises(ValueError, match="give a model"):
        Stages().checked(has_model=False)


# --- aspire encode ------------------------------------------------------------------------------------------------

def _corpus(path: Path) -> Path:
    records = [
        {"paper_id": "p1", "title": "a model", "abstract": ["we propose a new model.", "the results show performance."]},
        {"paper_id": "p2", "title": "data", "abstract": ["this paper is on data.", "we show results."],
         "pred_labels": ["background_label", "result_label"]},
        "not json",
        {"paper_id": "p3", "title": "x", "abstract": []},
        {"paper_id": "p1", "title": "dup", "abstract": ["a text."]},
        {"paper_id": "p4", "title": "citation", "abstract": ["scientific document similarity.", "aspect of text.",
                                                             "language model."]},
    ]
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_encode_round_trip_equals_a_direct_encode(tiny_model_dir, tmp_path, capsys):
    from aspire.cli.encode import main
    from aspire.encoders import load_encoder
    from aspire.index.corpus import EncodedCorpus, read_corpus

    corpus = _corpus(tmp_path / "c.jsonl")
    out = tmp_path / "vectors"
    assert main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out), "--device", "cpu",
                 "--batch-size", "2", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["offsets.npy", "papers.jsonl", "rejected.jsonl", "shard.json",
                                                      "vectors.npy", "whole.npy"]
    loaded, meta = EncodedCorpus.load_shard(out)
    assert loaded.paper_ids == ["p1", "p2", "p4"]  # the corpus's order, the rejected left out
    assert [r["line"] for r in loaded.rejected] == [3, 4, 5]  # input-line order
    assert [r["paper_id"] for r in loaded.rejected] == [None, "p3", "p1"]

    encoder = load_encoder(str(tiny_model_dir), device="cpu")
    assert meta["model_name"] == str(tiny_model_dir) and meta["model_fingerprint"] == encoder.fingerprint()
    assert meta["model_fingerprint"].startswith("v2-") and len(meta["model_fingerprint"]) == 3 + 16
    papers, _ = read_corpus(corpus)
    kept = [p for p in papers if p.paper_id in ("p1", "p2", "p4")][:3]
    assert [p.paper_id for p in kept] == ["p1", "p2", "p4"]
    batch = encoder.encode(kept, batch_size=8)
    vectors = np.load(out / "vectors.npy")
    offsets = np.load(out / "offsets.npy")
    whole = np.load(out / "whole.npy")
    assert vectors.dtype == np.float32 and whole.dtype == np.float32
    assert offsets.tolist() == [0, 2, 4, 7] and vectors.shape == (7, 32) and whole.shape == (3, 32)
    for p in range(3):
        n = int(batch.lengths[p])
        direct = batch.emb[p, :n].float().numpy()
        assert offsets[p + 1] - offsets[p] == n
        np.testing.assert_allclose(vectors[offsets[p]:offsets[p + 1]], direct, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(whole[p], batch.whole[p].float().numpy(), rtol=1e-4, atol=1e-5)
    rows = [json.loads(line) for line in (out / "papers.jsonl").read_text().splitlines()]
    assert [r["paper_id"] for r in rows] == ["p1", "p2", "p4"]
    assert rows[1]["sentences"] == ["this paper is on data.", "we show results."]
    assert rows[1]["labels"] == ["background_label", "result_label"]
    assert "3 papers, 7 sentence vectors of dimension 32, 3 record(s) rejected" in capsys.readouterr().out


def test_encode_empty_corpus_is_named_as_empty(tiny_model_dir, tmp_path, capsys):
    """An empty (or blank-line) corpus was reported as 'all 0 records ... were rejected': none was."""
    from aspire.cli.encode import main

    for text in ("", "\n\n"):
        corpus = tmp_path / "empty.jsonl"
        corpus.write_text(text)
        assert main(["--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "o"),
                     "--quiet"]) != 0
        err = capsys.readouterr().err
        assert f"{corpus} holds no records" in err and "rejected" not in err, err
        assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert main(["--model", str(tiny_model_dir), "--corpus", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) != 0
    assert "all 1 records" in capsys.readouterr().err


# --- the command registry -----------------------------------------------------------------------------------------

_HELP = textwrap.dedent("""
    import sys
    from aspire.cli import main
    try:
        code = main([sys.argv[1], "--help"])
    except SystemExit as exit:
        code = exit.code
    heavy = sorted(m for m in sys.argv[2].split(",") if m in sys.modules)
    print("RESULT", code, ",".join(heavy) or "-", file=sys.stderr)
""")


def test_every_command_help_without_heavy_imports():
    from aspire.cli import COMMANDS

    for name, (module, _) in COMMANDS.items():
        run = subprocess.run([sys.executable, "-c", _HELP, name, ",".join(HEAVY)], capture_output=True, text=True,
                             cwd=REPO, timeout=60)
        assert run.stderr.strip().splitlines()[-1] == "RESULT 0 -", (name, run.stderr[-2000:])
        assert run.stdout.startswith(f"usage: aspire {name}"), (name, run.stdout[:200])
        assert callable(importlib.import_module(module).main), name


def test_unknown_command_lists_valid_ones(capsys):
    from aspire.cli import COMMANDS, main

    with pytest.raises(SystemExit) as exit:
        main(["nosuch"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "'nosuch'" in err and all(f"'{name}'" in err for name in COMMANDS)
    assert main([]) == 2
    listing = capsys.readouterr().err
    assert all(f"  {name} " in listing for name in COMMANDS), listing


# --- lazy exports -------------------------------------------------------------------------------------------------

LAZY_PACKAGES = ("aspire.encoders", "aspire.scoring", "aspire.losses", "aspire.index", "aspire.evaluate",
                 "aspire.train", "aspire.serve")


def test_lazy_exports_resolve_to_the_defining_modules_objects():
    code = textwrap.dedent(f"""
        import importlib
        for package in {LAZY_PACKAGES!r}:
            pkg = importlib.import_module(package)
            assert set(pkg._lazy_exports) <= set(pkg.__all__), package
            for name, source in pkg._lazy_exports.items():
                assert getattr(pkg, name) is getattr(importlib.import_module(source), name), (package, name)
                assert name in dir(pkg)
        import aspire.scoring
        assert callable(aspire.scoring.sinkhorn) and not hasattr(aspire.scoring.sinkhorn, "__path__")
        try:
            aspire.scoring.no_such_export
        except AttributeError as err:
            assert "no_such_export" in str(err) and "aspire.scoring" in str(err), err
        else:
            raise SystemExit("no AttributeError")
        assert not hasattr(aspire.index, "no_such_export")
        print("OK")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=150)
    assert run.stdout.strip() == "OK", run.stderr[-3000:]


def _fake_package(root: Path, body: str) -> None:
    pkg = root / "fakelazy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from aspire.lazy import lazy_exports
        __all__ = ["thing", "gone"]
        lazy_exports(__name__, {"thing": "fakelazy.impl", "gone": "fakelazy.other"})
    """))
    (pkg / "impl.py").write_text(body)
    (pkg / "other.py").write_text("def renamed():\n    return 2\n")


def test_lazy_export_whose_module_raises_attribute_error_is_not_a_missing_name(tmp_path, monkeypatch):
    """An AttributeError raised while the defining module imports (a removed numpy or torch name, say) read as
    "no such export": `from package import thing` said only "cannot import name 'thing'", the module's error and
    traceback lost, and `hasattr` was False."""
    _fake_package(tmp_path, "import os\nBROKEN = os.path.no_such_helper\n\ndef thing():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("fakelazy")]:
        monkeypatch.delitem(sys.modules, name)
    import fakelazy

    with pytest.raises(ImportError) as err:
        from fakelazy import thing  # noqa: F401
    assert "no_such_helper" in str(err.value) and "fakelazy.impl" in str(err.value), str(err.value)
    assert isinstance(err.value.__cause__, AttributeError)
    with pytest.raises(ImportError, match="no_such_helper"):
        hasattr(fakelazy, "thing")


def test_lazy_export_missing_from_its_module_is_named(tmp_path, monkeypatch):
    """An export its module does not define (renamed there) was 'cannot import name ... (unknown location)' on the
    package, or an AttributeError naming only the defining module; it names the package, the name and the module."""
    _fake_package(tmp_path, "def thing():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("fakelazy")]:
        monkeypatch.delitem(sys.modules, name)
    import fakelazy

    assert fakelazy.thing() == 1
    with pytest.raises(ImportError) as err:
        from fakelazy import gone  # noqa: F401
    assert str(err.value) == "fakelazy exports 'gone' from fakelazy.other, which does not define it"
    with pytest.raises(AttributeError, match="'fakelazy' has no attribute 'absent'"):
        getattr(fakelazy, "absent")  # noqa: B009


# --- the layer table ----------------------------------------------------------------------------------------------

def test_layer_of_matches_a_brute_force_longest_prefix():
    from aspire.layers import LAYERS, layer_of

    modules = sorted({p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
                      for p in (REPO / "aspire").rglob("*.py")})
    for module in modules:
        if module.endswith(".__main__"):
            assert layer_of(module) == len(LAYERS) - 1
            continue
        matches = [(len(name), i) for i, names in enumerate(LAYERS) for name in names
                   if name == module or (name != "aspire" and module.startswith(name + "."))]
        assert matches, module
        assert layer_of(module) == max(matches)[1], module
    assert layer_of("aspire.cliutil") == 0 and layer_of("aspire.cli") == len(LAYERS) - 1
    with pytest.raises(ValueError, match="'aspire.nosuch'.*LAYERS"):
        layer_of("aspire.nosuch")
