"""Round 19, the index store's loose ends found by round-18 helpers: a paper id held twice by an index made directly
(or a shard) refused naming both positions, an index with its texts on disk saved twice, a NaN in an IVF training
sample named by its row at the source (and a config error no longer hidden behind it), and `aspire search --stages
whole` / `--rerank hybrid` on an index without whole-abstract vectors refused once, before any query is made."""

from __future__ import annotations

import io

import faiss
import numpy as np
import pytest

from aspire.index import EncodedCorpus, IndexBuildConfig, IndexConfig, SentenceIndex, ann
from aspire.index.ann import build_faiss, check_finite, train_rows
from aspire.index.texts import SentencesOnDisk
from tests.test_reliability_round18_store import corpus


def cfg(**index) -> IndexBuildConfig:
    return IndexBuildConfig(index=IndexConfig(**{"kind": "flat", **index}))


# ---- a paper id twice ------------------------------------------------------------------------------------------------
def test_an_index_made_directly_refuses_a_paper_id_twice_naming_both_positions():
    """`SentenceIndex(...)` took ids ["a", "b", "a"]: `positions` held {'a': 2, 'b': 1}, so paper 0 could not be
    looked up by its id yet came back in results as "a"."""
    c = corpus(3)
    index = faiss.IndexFlatL2(c.dim)
    index.add(c.vectors)
    with pytest.raises(ValueError, match=r"paper id 'a' is at positions 0 and 2"):
        SentenceIndex(index, c.vectors, c.offsets, ["a", "b", "a"], c.titles, c.sentences, [], cfg(), "flat", "fp", "m")
    made = SentenceIndex(index, c.vectors, c.offsets, ["a", "b", "c"], c.titles, c.sentences, [], cfg(), "flat", "fp", "m")
    assert made.positions == {"a": 0, "b": 1, "c": 2}


def test_build_still_keeps_the_first_of_a_repeated_id_and_rejects_the_other():
    """What `build` did with a repeat is documented and right (the second goes to `rejected`): unchanged."""
    c = corpus(4)
    c.paper_ids[2] = "p0"
    index = SentenceIndex.build(c, cfg(), "fp")
    assert index.paper_ids == ["p0", "p1", "p3"]
    assert index.rejected == [{"paper_id": "p0", "reason": "duplicate paper_id (again in this corpus)"}]


def test_a_shard_holding_a_paper_id_twice_is_refused_not_written_unreadable(tmp_path):
    """`save_shard` wrote it, and `load_shard` then refused its papers.jsonl ("paper_id 'p0' repeats line 1's")."""
    c = corpus(3)
    c.paper_ids[1] = "p0"
    path = tmp_path / "shard-00000-of-00001"
    with pytest.raises(ValueError, match=r"cannot save shard \S+: paper id 'p0' is at positions 0 and 1"):
        c.save_shard(path, {"model_name": "m", "model_fingerprint": "fp"})
    assert not path.exists()
    c.paper_ids[1] = "p1"
    c.save_shard(path, {"model_name": "m", "model_fingerprint": "fp"})
    assert EncodedCorpus.load_shard(path)[0].paper_ids == ["p0", "p1", "p2"]


# ---- texts on disk, saved twice --------------------------------------------------------------------------------------
def test_an_index_loaded_with_texts_on_disk_saves_twice_and_loads_back_the_same(tmp_path):
    """The first save removed gen-000001, whose papers.jsonl the texts are mapped from; the second save's size estimate
    read that file's size from its path: FileNotFoundError."""
    built = SentenceIndex.build(corpus(7), cfg(), "fp", "m")
    root = tmp_path / "idx"
    built.save(root)
    index = SentenceIndex.load(root, texts="disk")
    assert isinstance(index.sentences, SentencesOnDisk)
    size = index.sentences.path.stat().st_size
    first = index.save(root)
    assert not (root / "gen-000001").exists()
    second = index.save(root)  # FileNotFoundError: .../gen-000001/papers.jsonl
    assert second.name == "gen-000003" and not first.exists()
    assert index.sentences.nbytes == size  # the papers file's lines, all of them, though the file is gone
    back = SentenceIndex.load(root, texts="memory")
    assert back.paper_ids == built.paper_ids and back.titles == built.titles and back.sentences == built.sentences
    np.testing.assert_array_equal(back.vectors, built.vectors)
    np.testing.assert_array_equal(back.offsets, built.offsets)
    np.testing.assert_array_equal(back.whole, built.whole)
    query = built.vectors[:2]
    np.testing.assert_array_equal(back.search_sentences(query, 5)[1], built.search_sentences(query, 5)[1])


# ---- a NaN in the IVF training sample, named at the source --------------------------------------------------------------
def test_build_faiss_names_the_row_of_a_nan_in_the_training_sample_by_its_row_in_the_vectors():
    """`train_faiss` numbered the rows of the sample it was given: "rows [10]", where row 10 was fine."""
    c = corpus(100)
    config = IndexConfig(kind="ivf", ivf_nlist=4, ivf_train_size=50, seed=0)
    row = int(train_rows(len(c.vectors), config)[10])  # the sample's 11th vector
    assert row != 10
    c.vectors[row, 2] = np.nan
    with pytest.raises(ValueError, match=rf"of the training sample hold NaN or infinite values \(rows \[{row}\]\)") as err:
        build_faiss(c.vectors, config)
    assert isinstance(err.value, ann.NonFiniteVectors) and err.value.rows.tolist() == [row]


def test_check_finite_numbers_rows_from_first_row_or_by_the_rows_given():
    x = np.zeros((4, 3), np.float32)
    x[1, 0], x[3, 2] = np.inf, np.nan
    with pytest.raises(ValueError, match=r"rows \[101, 103\]") as err:
        check_finite(x, "a batch", 100)
    assert isinstance(err.value, ann.NonFiniteVectors) and err.value.rows.tolist() == [101, 103]
    with pytest.raises(ValueError, match=r"rows \[7, 40\]"):
        check_finite(x, "a sample", rows=np.array([9, 40, 3, 7]))
    check_finite(np.ones((2, 3), np.float32), "clean")


def test_build_names_every_nonfinite_row_of_the_corpus_and_no_longer_hides_a_config_error_behind_one():
    """Any ValueError of `build_faiss` was taken for a NaN once the corpus held one: an ivf_nlist the corpus cannot
    fill was reported as the NaN, and fixing that brought the real error only on the next run."""
    c = corpus(100)
    config = cfg(kind="ivf", ivf_nlist=4, ivf_train_size=50, seed=0)
    sampled = set(train_rows(len(c.vectors), config.index).tolist())
    inside = int(sorted(sampled)[5])
    outside = next(r for r in range(len(c.vectors)) if r not in sampled)
    c.vectors[inside, 0] = c.vectors[outside, 1] = np.nan
    papers = sorted({c.paper_ids[int(np.searchsorted(c.offsets, r, side="right")) - 1] for r in (inside, outside)})
    with pytest.raises(ValueError, match=rf"2 sentence vector\(s\) of the corpus hold NaN or infinite values \(rows "
                                         rf"\[{min(inside, outside)}, {max(inside, outside)}\]\) of {len(papers)} "
                                         rf"paper\(s\) \[.*\]; an index cannot rank them") as err:
        SentenceIndex.build(c, config, "fp")
    assert all(repr(p) in str(err.value) for p in papers)  # the one outside the sample too
    with pytest.raises(ValueError, match=r"^index.ivf_nlist=100000: an IVF index needs at least one sentence vector"):
        SentenceIndex.build(c, cfg(kind="ivf", ivf_nlist=100000), "fp")


# ---- aspire search --stages whole / --rerank hybrid on an index without whole vectors --------------------------------
@pytest.fixture(scope="module")
def index_without_whole(tmp_path_factory):
    root = tmp_path_factory.mktemp("no-whole") / "idx"
    SentenceIndex.build(corpus(6, whole=False), cfg(), "fp", "m").save(root)
    return root


@pytest.mark.parametrize("flag, use", [(["--stages", "whole"], "first stage 'whole'"),
                                       (["--rerank", "hybrid"], "re-ranker 'hybrid'")])
def test_search_refuses_stages_an_index_cannot_serve_once_before_any_query(index_without_whole, flag, use, tmp_path,
                                                                           monkeypatch, capsys):
    """Only the saved defaults were checked when the searcher opened: `--interactive` answered every line with the
    error (exit 1), and `--queries` made (encoded) every query before the first failed."""
    from aspire.cli import search as cli

    made = []
    real = cli.QueryMaker.from_line
    monkeypatch.setattr(cli.QueryMaker, "from_line", lambda self, text: made.append(text) or real(self, text))
    expected = f"error: {use} needs the papers' whole-abstract vectors"
    monkeypatch.setattr("sys.stdin", io.StringIO("p1\np2\np3\n"))
    capsys.readouterr()
    assert cli.main(["--index", str(index_without_whole), "--interactive", "--quiet", *flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("error:") == 1 and made == []
    queries = tmp_path / "q.txt"
    queries.write_text("p1\np2\np3\n")
    assert cli.main(["--index", str(index_without_whole), "--queries", str(queries), "--quiet", *flag]) == 2
    assert capsys.readouterr().err.startswith(expected) and made == []
    assert cli.main(["--index", str(index_without_whole), "--queries", str(queries), "--quiet", "--k", "2"]) == 0
    assert len(made) == 3  # the index's own defaults need no whole vectors: every query is answered
