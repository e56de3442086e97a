"""Round 76: two CLI messages that named the wrong thing to change.

`aspire index add` / `aspire search` without --backend encode with the backend the index records; a `--quantize` that
does not go with it was refused as `--quantize bf16 goes with --backend torch or openvino`, as if the user had given
--backend (and another backend's vectors would not match the index's anyway). It now names the index and says to leave
out --quantize (`aspire.cliutil.backend_options`' `recorded_in`).

`aspire evaluate ... --search-pipeline P --rerank X` (and `--ranked`, `--predictions`, which run no model) checked X as
a cross-encoder first, so a short name (`minilm`) or a missing folder was refused as not a trained cross-encoder, or as
an unknown model, before the command's own refusal: leave out --rerank. The check now waits for the commands that
take --rerank. No GPU, no model loaded: the loads are `HashEncoder`s, as in tests/test_reliability_round74_review.py."""

from __future__ import annotations

import json

import pytest

from aspire.cli.evaluate import main as evaluate_main
from aspire.cli.search import main as search_main
from aspire.index.__main__ import main
from tests.test_index_shards import write_corpus
from tests.test_reliability_round74_gpuauto import build, gpu_loads  # noqa: F401 (fixture gpu_loads)


def test_quantize_against_the_backend_an_index_records_names_the_index(tmp_path, capsys, gpu_loads):  # noqa: F811
    assert build(capsys, tmp_path, "--backend", "onnx")[0] == 0
    index = tmp_path / "idx"
    more = write_corpus(tmp_path / "m.jsonl", ["b1"])
    wanted = (f"error: the index {index} records backend onnx; --quantize bf16 goes with --backend torch or openvino: "
              "leave out --quantize\n")  # was "--quantize bf16 goes with --backend torch or openvino": no --backend given
    assert main(["add", "--index", str(index), "--corpus", str(more), "--quantize", "bf16"]) == 2
    assert capsys.readouterr().err == wanted
    query = tmp_path / "query.json"
    query.write_text(json.dumps({"paper_id": "new", "title": "a title", "abstract": ["one sentence.", "two."]}))
    args = ["--index", str(index), "--query-file", str(query), "--quiet", "--quantize", "bf16"]
    assert search_main(args) == 2
    assert capsys.readouterr().err == wanted
    assert len(gpu_loads) == 1  # the build's load only: both refused before a model loads
    # the user's own --backend is named as given, as before
    assert search_main([*args, "--backend", "onnx"]) == 2
    assert capsys.readouterr().err == "error: --quantize bf16 goes with --backend torch or openvino\n"
    assert main(["add", "--index", str(index), "--corpus", str(more)]) == 0  # without --quantize: the index's onnx
    assert gpu_loads[-1] == (None, {"backend": "onnx", "quantize": None})


@pytest.mark.parametrize("command", [
    ["csfcube", "--model", "minilm", "--search-pipeline", "search.rerank=none"],
    ["context2doc", "--model", "minilm", "--search-pipeline"],
])
@pytest.mark.parametrize("rerank", ["minilm", "nope"])  # a short name, a folder that is not there
def test_search_pipeline_with_rerank_is_told_to_leave_out_rerank_first(command, rerank, tmp_path, capsys):
    name = rerank if rerank == "minilm" else str(tmp_path / rerank)
    with pytest.raises(SystemExit) as exit_:
        evaluate_main([*command, "--rerank", name, "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--search-pipeline takes" in err and "--rerank" in err.rsplit("leave out", 1)[1], err
    assert "not a trained cross-encoder" not in err and "unknown model" not in err  # was the first message
    assert not (tmp_path / "out").exists()


def test_ranked_and_predictions_with_rerank_are_told_to_leave_out_rerank_first(tmp_path, capsys):
    ranked = tmp_path / "ranked"
    ranked.mkdir()
    with pytest.raises(SystemExit):
        evaluate_main(["csfcube", "--ranked", str(ranked), "--exp", "x", "--rerank", "minilm", "--out",
                       str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "--ranked scores existing files; leave out --model/--scorer/--bm25/--rerank" in err, err
    with pytest.raises(SystemExit):
        evaluate_main(["reviewers", "--predictions", f"{tmp_path}:x", "--rerank", "minilm"])
    err = capsys.readouterr().err
    assert "--predictions scores given files; leave out --model/--scorer/--bm25/--rerank" in err, err


def test_rerank_where_it_is_taken_is_still_checked_first(tmp_path, capsys):
    assert evaluate_main(["context2doc", "--bm25", "--rerank", "minilm", "--out", str(tmp_path / "out")]) == 2
    assert "error: --rerank minilm: cross-encoder 'minilm': not a trained cross-encoder" in capsys.readouterr().err
