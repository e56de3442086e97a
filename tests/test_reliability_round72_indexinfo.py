"""What an index says about the backend it was encoded with: `aspire index info` printed the manifest only, which holds
no backend or precision (they are in the generation's config.yaml); `add` without --backend encoded with the recorded
backend without a word, while build and encode-shard say which backend they chose; `encode-shard --merge-into`
printed no summary of the index it wrote, while build and merge do."""

from __future__ import annotations

import json

from aspire.index.__main__ import main
from aspire.index.store import SentenceIndex
from tests.test_index_shards import loads, run, write_corpus  # noqa: F401 (loads: a fixture)


def info(capsys, index) -> dict:
    status, out, err = run(capsys, "info", "--index", str(index))
    assert (status, err) == (0, ""), err
    return json.loads(out)


def index_recording_no_backend(tmp_path, capsys, corpus):
    """An index recording no backend, as one merged from shards written before backends were recorded (as in
    tests/test_index_shards.py); the exact torch model encoded it."""
    shards = tmp_path / "old-shards"
    assert run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards),
               "--backend", "torch")[0] == 0
    for path in shards.glob("shard-*/shard.json"):
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({k: v for k, v in meta.items() if k not in ("backend", "quantize")}))
    assert run(capsys, "merge", "--shards", str(shards), "--out", str(tmp_path / "old"), "index.kind=flat")[0] == 0
    assert SentenceIndex.load(tmp_path / "old").config.encode.backend is None
    return tmp_path / "old"


def test_info_says_the_backend_and_precision_the_index_records(tmp_path, capsys, loads):  # noqa: F811
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(5)])
    built = {}
    for name, flags in {"onnx": ["--backend", "onnx", "--quantize", "int8"], "torch": ["--backend", "torch"]}.items():
        built[name] = tmp_path / name
        assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(built[name]),
                   "index.kind=flat", *flags)[0] == 0
    onnx = info(capsys, built["onnx"])
    assert onnx["encoded_with"] == {"backend": "onnx", "precision": "int8", "recorded": True}
    manifest = SentenceIndex.read_manifest(built["onnx"])  # the manifest's own fields are all still there, unchanged
    assert {k: v for k, v in onnx.items() if k != "encoded_with"} == manifest
    assert "encoded_with" not in json.loads((built["onnx"] / manifest["path"] / "manifest.json").read_text())
    assert info(capsys, built["torch"])["encoded_with"] == {"backend": "torch", "precision": "fp32", "recorded": True}
    old = index_recording_no_backend(tmp_path, capsys, corpus)  # the exact torch model's, as `add` and search take it
    assert info(capsys, old)["encoded_with"] == {"backend": "torch", "precision": "fp32", "recorded": False}


def test_add_says_in_one_line_which_backend_it_encodes_with(tmp_path, capsys, loads):  # noqa: F811
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(4)])
    index = tmp_path / "idx"
    assert run(capsys, "build", "--model", "minilm", "--corpus", str(corpus), "--out", str(index), "index.kind=flat",
               "--backend", "onnx", "--quantize", "int8")[0] == 0
    assert main(["add", "--index", str(index), "--corpus", str(write_corpus(tmp_path / "m1.jsonl", ["b1"]))]) == 0
    out, err = capsys.readouterr()
    assert "indexed 1 new paper(s)" in out
    assert err.count("encoding with") == 1
    assert "encoding with backend onnx int8: the backend the index records" in err
    assert loads[-1] == {"backend": "onnx", "quantize": "int8"}
    # given, the backend is the user's: nothing to say
    assert main(["add", "--index", str(index), "--corpus", str(write_corpus(tmp_path / "m2.jsonl", ["b2"])),
                 "--backend", "onnx", "--quantize", "int8"]) == 0
    assert "encoding with" not in capsys.readouterr().err
    # an index recording none: encoded by the exact torch model, said so
    old = index_recording_no_backend(tmp_path, capsys, corpus)
    assert main(["add", "--index", str(old), "--corpus", str(tmp_path / "m1.jsonl")]) == 0
    assert ("encoding with backend torch fp32: the index records no backend (built before backends were recorded), "
            "so the exact torch model") in capsys.readouterr().err
    assert loads[-1] == {}


def test_encode_shard_merge_into_prints_the_summary_merge_prints(tmp_path, capsys, loads):  # noqa: F811
    corpus = write_corpus(tmp_path / "c.jsonl", [f"a{i}" for i in range(7)])
    shards, index = tmp_path / "shards", tmp_path / "idx"
    status, out, _ = run(capsys, "encode-shard", "--model", "minilm", "--corpus", str(corpus), "--shards", str(shards),
                         "--num-shards", "2", "--merge-into", str(index), "index.kind=flat", "--backend", "torch")
    assert status == 0
    lines = out.splitlines()
    assert lines[:2] == [f"wrote {p}" for p in sorted(shards.iterdir())]
    status, merged, _ = run(capsys, "merge", "--shards", str(shards), "--out", str(tmp_path / "merged"),
                            "index.kind=flat")
    assert status == 0
    gen = SentenceIndex.read_manifest(index)["path"]  # both a first generation: the same lines, but for the folder
    assert lines[2:] == merged.replace(str(tmp_path / "merged"), str(index)).splitlines()
    assert lines[2].startswith(f"index {gen}: 7 papers, ") and lines[3] == "indexed 7 new paper(s)"
