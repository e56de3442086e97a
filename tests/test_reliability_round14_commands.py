"""The command layer and the alignment plots, round 14: `aspire encode` refuses a bad `--out` or `--quantize` in one
line before torch loads (it once encoded the whole corpus first); sentence texts holding `$...$` (CSFCube has 293
such sentences, 29 of which matplotlib's mathtext cannot parse) are drawn as written, and the plot's cells are the
alignment's distances and OT plan; `aspire data group --help` says the stage reads none of its `--config`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from aspire.batch import DocBatch  # noqa: E402
from aspire.viz import pair_alignment, plot_alignment, plot_ranked_list, sentence_label  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# a command run in a process of its own: its exit status, its stderr, and whether torch had been imported
PROBE = """\
import sys
from aspire.cli import main
code = main(sys.argv[1:])
print("torch imported:", "torch" in sys.modules)
sys.exit(code)
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "papers.jsonl"
    path.write_text(json.dumps({"paper_id": "p1", "title": "a model", "abstract": "We propose a model. It works."})
                    + "\n", encoding="utf-8")
    return path


def test_encode_refuses_an_out_folder_under_a_file_before_torch(tmp_path, corpus, tiny_model_dir):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "vectors"
    done = _run("encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(out), "-q")
    # once: the whole corpus encoded, then "error: Not a directory: .../afile/.tmp-vectors-1a2b3c4d", no option named
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: --out {out}: {tmp_path / 'afile'} is a file, not a folder"]
    assert "torch imported: False" in done.stdout


@pytest.mark.parametrize("options, says", [
    (["--quantize", "int8"], "error: --quantize int8 goes with --backend onnx"),
    (["--backend", "onnx", "--quantize", "bf16"], "error: --quantize bf16 goes with --backend torch or openvino"),
])
def test_encode_refuses_a_quantize_its_backend_does_not_take_before_torch(tmp_path, corpus, tiny_model_dir, options,
                                                                           says):
    done = _run("encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--out", str(tmp_path / "v"),
                "-q", *options)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [says]
    assert "torch imported: False" in done.stdout  # once found after the corpus was read and torch loaded
    assert not (tmp_path / "v").exists()


# sentences as CSFCube's abstracts write them: `$...$` LaTeX (two of them ones mathtext cannot parse: the plot once
# raised ValueError when drawn), dollar amounts (once drawn as italic math, spaces dropped), HTML and braces
QUERY = ["The Minimum Quartet Tree Cost problem builds a tree from the $3{n \\choose 4}$ weighted quartets.",
         "It cost $5 and $10 <b>per</b> run &amp; more."]
CAND = ["Our analysis yielded a $73.8 \\pm 5.15%$ accuracy.", "plain {x}_y ^ z", "one more candidate sentence"]


def _alignment():
    g = torch.Generator().manual_seed(3)
    query = DocBatch.from_list([torch.randn(len(QUERY), 6, generator=g)], ["Q"], [QUERY])
    cand = DocBatch.from_list([torch.randn(len(CAND), 6, generator=g)], ["C"], [CAND])
    return pair_alignment(query, cand, [{"eps": 0.05}, {"tau": 5000.0, "eps": 0.2}])


def test_sentence_texts_with_dollars_are_drawn_as_written():
    al = _alignment()
    fig = plot_alignment(al)
    fig.canvas.draw()  # raised "ParseSyntaxException: Expected \choose" before
    panels = [ax for ax in fig.axes if ax.images]
    for ax in panels:
        ylabels = ax.get_yticklabels()
        assert [t.get_text() for t in ylabels] == [sentence_label("q", i, s, width=44) for i, s in enumerate(QUERY)]
        assert not any(t.get_parse_math() for t in ylabels)
    xlabels = panels[-1].get_xticklabels()
    assert [t.get_text() for t in xlabels] == [sentence_label("c", j, s, width=30) for j, s in enumerate(CAND)]
    assert not any(t.get_parse_math() for t in xlabels)


def test_a_ranked_list_draws_titles_and_sentences_as_written():
    pair = SimpleNamespace(query_sentence=0, hit_sentence=1, dist=0.5, weight=0.25, query_text=QUERY[0],
                           hit_text=CAND[0])
    hit = SimpleNamespace(rank=1, score=0.5, paper_id="C", title="Costs of $O(n^2)$ and $\\frac{1}{$ sorting",
                          pairs=[pair])
    fig = plot_ranked_list([hit])
    fig.canvas.draw()  # raised on the title's `$\frac{1}{$` before
    texts = [t for t in fig.axes[0].texts]
    assert [t.get_text() for t in texts][2:] == ["q: " + QUERY[0], "s: " + CAND[0]]
    assert not any(t.get_parse_math() for t in texts)


@pytest.mark.parametrize("S, T", [(1, 1), (1, 4), (3, 1)])
def test_the_cells_drawn_are_the_distances_and_the_plans(S, T):
    """One-sentence papers and long sentences: every panel's cells are the alignment's numbers (the plan in percent),
    and each label is its own sentence's start."""
    g = torch.Generator().manual_seed(S * 10 + T)
    q_texts = [f"query {i} " + "word " * 30 for i in range(S)]
    c_texts = [f"cand {j} " + "x" * 80 for j in range(T)]
    query = DocBatch.from_list([torch.randn(S, 5, generator=g)], ["Q"], [q_texts])
    cand = DocBatch.from_list([torch.randn(T, 5, generator=g)], ["C"], [c_texts])
    al = pair_alignment(query, cand, {"eps": 0.1})
    np.testing.assert_allclose(al.plans[0].plan.sum(), 1.0, atol=1e-5)
    fig = plot_alignment(al)
    distances, plan = [ax for ax in fig.axes if ax.images]
    np.testing.assert_allclose(np.asarray(distances.images[0].get_array()), al.cost, rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(plan.images[0].get_array()), 100.0 * al.plans[0].plan, atol=1e-9)
    labels = [t.get_text() for t in distances.get_yticklabels()]
    assert all(label.startswith(f"q{i} query {i} ") and label.endswith("…") for i, label in enumerate(labels))
    assert all(len(line) <= 44 for label in labels for line in label.split("\n"))


def test_the_group_stages_config_help_says_it_is_not_read(capsys):
    from aspire.cli.data import main

    with pytest.raises(SystemExit) as done:
        main(["group", "--help"])
    assert done.value.code == 0
    assert "the group stage reads none of it" in " ".join(capsys.readouterr().out.split())


def test_the_demo_table_prints_the_figures_of_the_runs_it_made(tmp_path, monkeypatch, capsys):
    """Each row of the table is its own run's test figures (a distinct number a model, scorer and facet here), in the
    order of `RUNS` then `ASPECT_RUNS`; the seconds lines are the runs' timings."""
    from aspire import demo
    from aspire.benchmarks.csfcube import FILES as csfcube_files
    from aspire.evaluate import csfcube

    calls = []

    def fake_run(root, model, scorer, out, options):
        calls.append((model, scorer, options.encoding, dict(options.scorer_options), Path(out)))
        k = len(calls)
        return {"test": {g: {"MAP": 10.0 * k + i, "NDCG%20": 10.0 * k + i + 0.5} for i, g in enumerate(demo.SPECTER)},
                "timings_s": {"load_model": 0.1 * k, "encode": 1.0 * k, "score": 0.01 * k, "encode_from_cache": k > 1}}

    monkeypatch.setattr(csfcube, "run_csfcube", fake_run)
    for name in csfcube_files:  # the folder the demo checks for before any run (the runs themselves are faked)
        (tmp_path / name).touch()
    out = tmp_path / "out"
    assert demo.main(["--data", str(tmp_path), "--out", str(out), "--model", "minilm", "--backend", "torch"]) == 0
    printed = capsys.readouterr().out.splitlines()
    runs = [("minilm", r, out) for r in demo.RUNS] + [("aspire-minilm", r, out / "aspect") for r in demo.ASPECT_RUNS]
    assert calls == [(m, scorer, enc, opts, folder / scorer) for m, (_, scorer, opts, enc), folder in runs]
    rows = [line for line in printed if line.startswith("| ")][2:]  # after the header and SPECTER's row
    expected = [f"| {m} {label} | " + " | ".join(f"{10.0 * k + i:.2f} / {10.0 * k + i + 0.5:.2f}"
                                                 for i in range(len(demo.SPECTER))) + " |"
                for k, (m, (label, *_), _) in enumerate(runs, start=1)]
    assert rows == expected
    seconds = printed[printed.index("seconds: model load / encoding / ranking / metrics and files / the run") + 1:]
    assert [line.rsplit(": ", 1)[1].split(" / ")[:3] for line in seconds] == [
        [f"{0.1 * k:.1f}", f"{1.0 * k:.1f}" + (" (read back)" if k > 1 else ""), f"{0.01 * k:.1f}"]
        for k in range(1, len(runs) + 1)]


@pytest.mark.parametrize("stage", ["run-all", "cocite-from-records"])
def test_a_data_stage_names_its_out_under_a_file(tmp_path, stage, capsys):
    from aspire.cli.data import main

    records = tmp_path / "records.jsonl"
    records.write_text("{}\n")
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "cc"
    assert main([stage, "--in", str(records), "--out", str(out)]) == 2
    # once "error: Not a directory: .../afile/cc/pipeline_report.json" (run-all), a file the user never named
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --out {out}: {tmp_path / 'afile'} is a file, "
                                                            "not a folder"]
