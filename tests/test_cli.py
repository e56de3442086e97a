"""The `aspire` command: dispatch, help text of every command, the one override form, user errors
as one line, and no library noise on stderr."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

from aspire.cli import COMMANDS
from aspire.cli import main as aspire_main
from aspire.cliutil import normalize_overrides

# every command line a user can ask --help of: the command, and each subcommand of the grouped ones
HELP_ARGVS = [[c] for c in COMMANDS] + [["index", s] for s in ("build", "add", "encode-shard", "merge", "info")] + [
    ["evaluate", s] for s in ("csfcube", "pools", "fuse", "reviewers", "context2doc", "compare", "fuse-runs", "suite")] + [["data", "run-all"], ["data", "hard-negatives"]]


def parsers_printing_help(argv, monkeypatch, capsys) -> tuple[argparse.ArgumentParser, str]:
    """Run `aspire ARGV --help`; return the parser that printed its help, and the text."""
    shown = []
    original = argparse.ArgumentParser.print_help

    def record(self, file=None):
        shown.append(self)
        original(self, file)

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", record)
    with pytest.raises(SystemExit) as exc:
        aspire_main([*argv, "--help"])
    assert exc.value.code == 0
    return shown[-1], capsys.readouterr().out


@pytest.mark.parametrize("argv", HELP_ARGVS, ids=" ".join)
def test_every_help_has_purpose_option_help_and_examples(argv, monkeypatch, capsys):
    parser, text = parsers_printing_help(argv, monkeypatch, capsys)
    assert parser.prog == "aspire " + " ".join(argv)
    assert parser.description and "\n" not in parser.description.strip().split("\n\n")[0]
    undocumented = [a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert undocumented == []
    examples = re.split(r"^examples?:$", text, flags=re.M)[-1].splitlines()
    runnable = [line for line in examples if line.strip().startswith(("aspire ", "python -m aspire", "torchrun"))]
    assert len(runnable) >= 2 or (argv[0] == "data" and len(runnable) >= 1), text


@pytest.mark.parametrize("argv", [["encode"], ["demo"], ["teacher"], ["index", "build"], ["index", "encode-shard"],
                                  ["evaluate", "csfcube"], ["evaluate", "pools"]], ids=" ".join)
def test_model_options_name_every_model_a_name_loads(argv, monkeypatch, capsys):
    """A --model (or --teacher) option's help lists every short name `resolve_model` takes, shipped models too."""
    from aspire.encoders.pretrained import MODELS

    parser, _ = parsers_printing_help(argv, monkeypatch, capsys)
    helps = [" ".join(a.help.split()) for a in parser._actions if {"--model", "--teacher"} & set(a.option_strings)]
    assert len(helps) == 1 and "aspire-minilm" in MODELS
    assert all(name in helps[0] for name in MODELS), helps


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        aspire_main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert all(f"  {name} " in text for name in COMMANDS) and "examples:" in text
    with pytest.raises(SystemExit) as exc:
        aspire_main(["frobnicate"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'frobnicate' (choose from 'index'" in err and "did you" not in err
    assert aspire_main([]) == 2  # `aspire` alone lists the commands (it once said "required: COMMAND, args")
    listing = capsys.readouterr().err
    assert all(f"  {name} " in listing for name in COMMANDS)


@pytest.mark.parametrize("argv, said", [
    (["serach"], "invalid choice: 'serach'; did you mean 'search'? (choose from 'index', 'search'"),
    (["index", "biuld"], "invalid choice: 'biuld'; did you mean 'build'?"),
    (["evaluate", "csfcub"], "invalid choice: 'csfcub'; did you mean 'csfcube'?"),
    (["evaluate", "csfcube", "--scorer", "otx"], "argument --scorer: invalid choice: 'otx'; did you mean 'ot'?"),
    (["data", "alin"], "invalid choice: 'alin'; did you mean 'align'?"),
    (["search", "--index", "x", "--rerank", "maxpasage"], "did you mean 'maxpassage'?"),
])
def test_a_mistyped_choice_names_the_nearest_one(argv, said, capsys):
    with pytest.raises(SystemExit) as exc:
        aspire_main(argv)
    assert exc.value.code == 2 and said in capsys.readouterr().err


def test_one_override_form_and_the_old_ones_with_a_note(capsys):
    assert normalize_overrides(["train.lr=1e-5", "index.kind=hnsw"]) == ["train.lr=1e-5", "index.kind=hnsw"]
    assert capsys.readouterr().err == ""
    assert normalize_overrides(["--train.lr=1e-5"]) == ["train.lr=1e-5"]
    assert "'--train.lr=1e-5' is read as 'train.lr=1e-5'" in capsys.readouterr().err
    assert normalize_overrides(["search.rerank=ot", "k=5"], section="search") == ["rerank=ot", "k=5"]
    err = capsys.readouterr().err
    assert "'k=5' is read as 'search.k=5'" in err and "rerank" not in err
    with pytest.raises(ValueError, match="section.key=value"):
        normalize_overrides(["train.lr"])


def test_train_reads_both_override_forms(tmp_path, capsys):
    from aspire.train.__main__ import main as train_main

    for override in ("model.kindd=ot", "--model.kindd=ot"):
        with pytest.raises(SystemExit) as exc:
            train_main(["--config", "configs/ts_aspire.yaml", override])
        assert exc.value.code == 2 and "model.kindd" in capsys.readouterr().err


def test_user_errors_are_one_line_with_exit_status_2(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text('{broken\n{"paper_id": 7, "title": "t"}\n' + "".join(
        json.dumps({"paper_id": f"e{i}", "title": "", "abstract": []}) + "\n" for i in range(6)))
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"paper_id": "g", "title": "t", "abstract": ["a sentence."]}) + "\n")
    cases = {
        ("index", "build", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "i")):
            "nothing to index: all 8 records of",
        ("index", "build", "--model", "nomodel", "--corpus", str(good), "--out", str(tmp_path / "i")):
            "unknown model 'nomodel'",
        ("search", "--index", str(tmp_path / "none"), "--query-id", "x", "search.k=many"): "holds no index",
        ("index", "info", "--index", str(tmp_path / "none")): "holds no index",
        ("search", "--index", str(tmp_path / "none"), "--query-id", "x"): "holds no index",
        ("serve", "--index", str(tmp_path / "none"), "--port", "0"): "holds no index",
        ("encode", "--model", str(tiny_model_dir), "--corpus", str(tmp_path / "missing.jsonl"), "--out",
         str(tmp_path / "v")): "No such file or directory",
    }
    for argv, message in cases.items():
        assert aspire_main(list(argv)) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (argv, err)
    assert aspire_main(list(next(iter(cases)))) == 2
    err = capsys.readouterr().err  # the first few reasons, then how many more
    assert ("line 1: invalid JSON" in err and "line 2 paper '7': missing field 'abstract'" in err
            and "paper 'e0': empty title and abstract" in err and "; and 3 more" in err)


def test_encode_writes_vectors_and_the_api_takes_dicts_and_strings(tmp_path, tiny_model_dir, capsys):
    from aspire.data.papers import Paper
    from aspire.encoders import load_encoder
    from aspire.index import EncodedCorpus

    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "a", "title": "a model", "abstract": ["we propose.", "it works."],
                                  "pred_labels": ["method_label", "result_label"]}) + "\n")
    assert aspire_main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out",
                        str(tmp_path / "v"), "--batch-size", "2", "--device", "cpu", "--quiet"]) == 0
    assert "1 papers, 2 sentence vectors of dimension 32" in capsys.readouterr().out
    saved, meta = EncodedCorpus.load_shard(tmp_path / "v")
    assert saved.labels == [["method_label", "result_label"]] and meta["model_name"] == str(tiny_model_dir)
    # an earlier encoding's folder is replaced; any other folder is left whole (`--out runs` for `runs/v` once
    # removed everything in runs/)
    argv = ["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "v"), "-q"]
    assert aspire_main(argv) == 0 and EncodedCorpus.load_shard(tmp_path / "v")[0].paper_ids == ["a"]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "model.bin").write_text("weeks of training")
    capsys.readouterr()
    assert aspire_main([*argv[:-2], str(tmp_path / "runs"), "-q"]) == 2
    assert "runs exists and is not an earlier encoding's folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["model.bin"]
    with pytest.raises(FileExistsError, match="is not a shard folder"):
        saved.save_shard(tmp_path / "runs", meta)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["model.bin"]

    encoder = load_encoder(tiny_model_dir, device="cpu")
    assert encoder.device.type == "cpu"
    mixed = encoder.encode([{"paper_id": "a", "title": "a model", "abstract": ["we propose.", "it works."]},
                            Paper("b", "a model", ["we propose."]), "We propose a model. It works well."])
    assert mixed.paper_ids == ["a", "b", "2"] and mixed.lengths.tolist() == [2, 1, 2]
    assert mixed.emb[0, :2].allclose(saved_vectors(saved), atol=1e-5)
    with pytest.raises(ValueError, match=r"item 1 \(paper_id 'x'\): missing field 'abstract'"):
        encoder.encode(["text.", {"paper_id": "x", "title": "t"}])


def saved_vectors(corpus):
    import torch

    return torch.from_numpy(corpus.vectors)


@pytest.mark.slow  # a fresh interpreter importing torch and transformers (~15 s on 2 cores)
def test_console_command_prints_results_only_on_stdout_and_no_library_noise(tmp_path, tiny_model_dir):
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": f"p{i}", "title": "a model of text", "abstract":
                                          "We propose a new method. The results improve the task."}) + "\n"
                              for i in range(4)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    build = subprocess.run([sys.executable, "-m", "aspire", "index", "build", "--model", str(tiny_model_dir),
                            "--corpus", str(corpus), "--out", str(tmp_path / "idx")],
                           capture_output=True, text=True, env=env, check=False)
    assert build.returncode == 0, build.stderr
    assert build.stdout.startswith(f"index {tmp_path / 'idx'}")
    noise = ("Loading weights", "FutureWarning", "Warning:", "faiss.loader", "not writable")
    assert not [n for n in noise if n in build.stderr], build.stderr  # the encoding bar alone
    query = tmp_path / "q.json"
    query.write_text(json.dumps({"paper_id": "q", "title": "t", "abstract": "We propose a method. It works."}))
    search = subprocess.run([sys.executable, "-m", "aspire", "search", "--index", str(tmp_path / "idx"),
                             "--query-file", str(query), "--json", "--k", "2", "--rerank", "ot", "-q"],
                            capture_output=True, text=True, env=env, check=False)
    assert search.returncode == 0 and search.stderr == "", search.stderr
    assert len(json.loads(search.stdout)["hits"]) == 2
    # search ends its process without the interpreter's teardown (aspire.cli.FAST_EXIT): output flushed, codes kept
    missing = subprocess.run([sys.executable, "-m", "aspire", "search", "--index", str(tmp_path / "nope"),
                              "--query-id", "p0"], capture_output=True, text=True, env=env, check=False)
    assert missing.returncode == 2 and missing.stdout == "" and len(missing.stderr.strip().splitlines()) == 1


def test_train_common_options_and_both_override_forms_reach_the_config(monkeypatch, capsys):
    seen = {}

    def fake_run(cfg, resume=False):
        seen.update(cfg=cfg, resume=resume)
        return {"step": 0}

    monkeypatch.setattr("aspire.train.trainer.run", fake_run)
    assert aspire_main(["train", "--config", "configs/ts_aspire.yaml", "--device", "cpu", "--batch-size", "4", "-q",
                        "train.max_steps=3", "--train.lr=0.5", "--resume"]) == 0
    assert json.loads(capsys.readouterr().out) == {"step": 0}
    cfg = seen["cfg"].train
    assert (cfg.device, cfg.batch_size, cfg.progress, cfg.max_steps, cfg.lr) == ("cpu", 4, False, 3, 0.5)
    assert seen["resume"] is True
    with pytest.raises(SystemExit):
        aspire_main(["train", "--config", "configs/ts_aspire.yaml", "--device", "gpu0"])
    assert "unknown device 'gpu0'" in capsys.readouterr().err
