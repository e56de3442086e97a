"""Round 33: index building (`aspire index build`, `aspire.index.build`) and evaluation's encoding cache
(`aspire.evaluate.encode`), checked with the tiny random BERT of conftest and stand-in encoders."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.data.papers import Paper
from aspire.index import IndexBuildConfig, IndexConfig, SentenceIndex
from aspire.index.__main__ import main as index_main
from aspire.index.build import build_index
from aspire.index.disk import IndexFormatError, require_live_generation

REPO = Path(__file__).resolve().parents[1]


def write_corpus(path: Path, n: int, extra: list[str] = ()) -> Path:
    lines = [json.dumps({"paper_id": f"p{i}", "title": "a model of text",
                         "abstract": ["we propose a new method.", f"results {i} improve."]}) for i in range(n)]
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


def generation_files(root: Path) -> dict[str, bytes]:
    gen = root / require_live_generation(root)
    return {p.name: p.read_bytes() for p in sorted(gen.iterdir())}


class StubEncoder:
    """Sentence vectors from a fixed random function of each sentence's text; counts its calls."""

    dim = 8

    def __init__(self, tag: str = "stub-v1") -> None:
        self.tag, self.calls = tag, []

    def fingerprint(self) -> str:
        return self.tag

    def _vec(self, text: str) -> torch.Tensor:
        seed = int.from_bytes(hashlib.sha256((self.tag + text).encode()).digest()[:4], "little")
        return torch.from_numpy(np.random.default_rng(seed).standard_normal(self.dim)).float()

    def encode(self, papers, batch_size=32, progress=False) -> DocBatch:
        self.calls.append(("encode", [p.paper_id for p in papers]))
        vectors = [torch.stack([self._vec(s) for s in p.sentences]) for p in papers]
        return DocBatch.from_list(vectors, [p.paper_id for p in papers], [list(p.sentences) for p in papers],
                                 torch.stack([v.mean(0) for v in vectors]))

    def encode_abstract(self, papers, batch_size=32, progress=False, **options) -> torch.Tensor:
        self.calls.append(("abstract", [p.paper_id for p in papers], options))
        return torch.stack([self._vec(" ".join(p.sentences)) for p in papers])


# ---- a build is repeatable ---------------------------------------------------------------------------------------

def test_building_twice_gives_the_same_files(tmp_path, tiny_model_dir):
    """The same corpus, model and config: every file of the generation byte-identical; the manifest differs only
    in its `saved_utc` time stamp."""
    corpus = write_corpus(tmp_path / "papers.jsonl", 7, ["{broken"])
    for out in ("a", "b"):
        assert index_main(["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out",
                           str(tmp_path / out), "index.kind=flat", "--quiet"]) == 0
    a, b = generation_files(tmp_path / "a"), generation_files(tmp_path / "b")
    assert sorted(a) == sorted(b) and "rejected.jsonl" in a
    assert {name for name in a if a[name] != b[name]} <= {"manifest.json"}
    ma, mb = json.loads(a["manifest.json"]), json.loads(b["manifest.json"])
    ma.pop("saved_utc"), mb.pop("saved_utc")
    assert ma == mb


# ---- a crash inside a build leaves nothing a search would read -----------------------------------------------

@pytest.mark.parametrize("where", ["aspire.index.build.encode_corpus", "aspire.index.store.SentenceIndex.build",
                                   "aspire.index.store.write_index_papers"])
def test_a_crash_inside_a_build_leaves_no_half_index(tmp_path, monkeypatch, where):
    corpus = write_corpus(tmp_path / "papers.jsonl", 5)
    config = IndexBuildConfig(index=IndexConfig(kind="flat"))

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-build")

    fresh, old = tmp_path / "fresh", tmp_path / "old"
    build_index(old, "stub", write_corpus(tmp_path / "small.jsonl", 2), config, load_encoder=lambda n: StubEncoder(),
                progress=False)
    with monkeypatch.context() as m:
        m.setattr(where, crash)
        for out, overwrite in ((fresh, False), (old, True)):
            with pytest.raises(KeyboardInterrupt):
                build_index(out, "stub", corpus, config, overwrite, lambda n: StubEncoder(), progress=False)
    with pytest.raises(IndexFormatError, match="no CURRENT"):  # the check search, serve and add make first
        require_live_generation(fresh)
    with pytest.raises(IndexFormatError):
        SentenceIndex.load(fresh)
    assert not fresh.exists() or not [p.name for p in fresh.iterdir() if not p.name.startswith(".lock")]
    assert SentenceIndex.load(old).paper_ids == ["p0", "p1"]  # --overwrite: the old index stays live until replaced
    index, gen = build_index(fresh, "stub", corpus, config, load_encoder=lambda n: StubEncoder(), progress=False)
    assert index.n_papers == 5 and SentenceIndex.load(fresh).paper_ids == [f"p{i}" for i in range(5)]
    assert sorted(p.name for p in fresh.iterdir() if not p.name.startswith(".lock")) == ["CURRENT", gen.name]


# ---- progress and rejected records ---------------------------------------------------------------------------------

def test_build_progress_on_stderr_with_rate_and_eta_and_quiet_hides_it(tmp_path, tiny_model_dir, capsys):
    corpus = write_corpus(tmp_path / "papers.jsonl", 6)
    build = ["build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "index.kind=flat"]
    assert index_main([*build, "--out", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert "encoding papers" not in out and "6 papers" in out  # results on stdout, progress on stderr
    assert "encoding papers: 100%" in err and "6/6" in err
    assert "paper/s" in err and "00:00<00:00" in err  # tqdm's rate and elapsed<remaining (the ETA)
    assert "papers/s" in err  # the build's own summary line: its rate
    assert index_main([*build, "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_rejected_records_are_listed_with_reasons_in_line_order(tmp_path):
    extra = ["{broken", json.dumps({"paper_id": "p0", "title": "again", "abstract": ["x."]}),
             json.dumps({"paper_id": "e", "title": "t", "abstract": []}),
             json.dumps({"paper_id": "z y", "title": "t", "abstract": ["x."]})]
    corpus = write_corpus(tmp_path / "papers.jsonl", 3, extra)
    index, _ = build_index(tmp_path / "idx", "stub", corpus, IndexBuildConfig(index=IndexConfig(kind="flat")),
                           load_encoder=lambda n: StubEncoder(), progress=False)
    assert index.paper_ids == ["p0", "p1", "p2"]
    rejected = SentenceIndex.load(tmp_path / "idx").rejected
    assert [r["line"] for r in rejected] == [4, 5, 6, 7]
    assert all(r["reason"] and r["corpus"] == str(corpus) for r in rejected)
    assert "duplicate" in rejected[1]["reason"]


def test_a_corpus_with_nothing_to_index_is_refused_naming_reasons_before_the_model_loads(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("{broken\n" + json.dumps({"paper_id": "e", "title": "t", "abstract": []}) + "\n")

    def no_model(name):
        raise AssertionError("the model was loaded")

    with pytest.raises(ValueError, match=r"all 2 records .* were rejected: line 1: invalid JSON.*line 2 paper 'e'"):
        build_index(tmp_path / "idx", "stub", corpus, IndexBuildConfig(), load_encoder=no_model, progress=False)
    with pytest.raises(IndexFormatError):
        require_live_generation(tmp_path / "idx")


# ---- options checked by name before torch loads -----------------------------------------------------------------

IMPORTS_TORCH = ("import runpy, sys\nsys.argv = ['aspire.index', *sys.argv[1:]]\ntry:\n"
                 "    runpy.run_module('aspire.index', run_name='__main__')\nfinally:\n"
                 "    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")


@pytest.mark.parametrize("bad, said", [
    (["encode.backend=tensorrt"], "encode.backend: unknown backend 'tensorrt'"),
    (["encode.quantize=fp8"], "encode.quantize: 'fp8' does not go with encode.backend torch"),
    (["encode.backend=onnx", "encode.quantize=bf16"], "encode.quantize: 'bf16' does not go with encode.backend onnx"),
    (["--backend", "torch", "--quantize", "int8"], "--quantize int8 goes with --backend onnx"),
])
def test_a_bad_backend_option_is_refused_by_name_before_torch_loads(tmp_path, tiny_model_dir, bad, said):
    """The config's encode.backend/encode.quantize were checked only after torch and faiss loaded (seconds), and an
    unknown encode.quantize was reported as `--quantize fp8 goes with --backend ` (no backend, no key named)."""
    corpus = write_corpus(tmp_path / "papers.jsonl", 1)
    for command in (["build", "--out", str(tmp_path / "idx")], ["encode-shard", "--shards", str(tmp_path / "sh")]):
        if command[0] == "encode-shard" and bad[0] == "--backend":
            continue
        r = subprocess.run([sys.executable, "-c", IMPORTS_TORCH, *command, "--model", str(tiny_model_dir),
                            "--corpus", str(corpus), *bad], capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 2, r.stderr
        assert f"error: {said}" in r.stderr
        assert "torch imported: False" in r.stderr
    assert not (tmp_path / "idx").exists() and not (tmp_path / "sh").exists()


# ---- evaluation's encoding cache ----------------------------------------------------------------------------------

def test_evaluate_encoding_cache_is_keyed_and_reused_as_documented(tmp_path):
    from aspire.evaluate.encode import encode_papers

    papers = [Paper(f"q{i}", f"title {i}", [f"sentence {i} one.", f"sentence {i} two."]) for i in range(3)]
    enc = StubEncoder()
    record: list[dict] = []
    ctx, hit = encode_papers(enc, papers, "contextual", tmp_path, record=record)
    assert not hit and len(enc.calls) == 1
    whole, hit = encode_papers(enc, papers, "pass", tmp_path, record=record)  # the contextual entry's whole vectors
    assert hit and len(enc.calls) == 1
    assert torch.equal(whole.emb[:, 0], ctx.whole) and whole.sentences == [[" ".join(p.sentences)] for p in papers]
    assert record[0]["cache_entry"] == record[1]["cache_entry"] and record[1]["from_cache"]
    again, hit = encode_papers(StubEncoder(), papers, "contextual", tmp_path)  # a second encoder, same fingerprint
    assert hit and torch.equal(again.emb, ctx.emb)
    other = StubEncoder("stub-v2")  # another fingerprint: encoded again, never the first one's vectors
    _, hit = encode_papers(other, papers, "contextual", tmp_path)
    assert not hit and len(other.calls) == 1
    a, hit_a = encode_papers(enc, papers, "abstract", tmp_path, encode_options={"normalize": True})
    b, hit_b = encode_papers(enc, papers, "abstract", tmp_path, encode_options={"normalize": False})
    c, hit_c = encode_papers(enc, papers, "abstract", tmp_path, encode_options={"normalize": True})
    assert (hit_a, hit_b, hit_c) == (False, False, True)
    assert [call[2] for call in enc.calls if call[0] == "abstract"] == [{"normalize": True}, {"normalize": False}]
    with pytest.raises(ValueError, match="takes no options"):
        encode_papers(enc, papers, "pass", tmp_path, encode_options={"normalize": True})
    with pytest.raises(ValueError, match=r"unknown encoding 'sentences'; valid: \["):
        encode_papers(enc, papers, "sentences", tmp_path)
