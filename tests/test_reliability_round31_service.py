"""The cross-encoder scorer, the int8 recipe and the page's search service, round 31 (correctness).

Checked against independent references: the cross-encoder's logits against a direct forward of the Hugging Face
model on each pair alone (longest-first truncation to `max_length`, order kept whatever the batch size); the service's
answers against the Searcher's for the same query; `find_papers` against a brute-force loop of its documented rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from serve_support import PAPERS, encoder_fixture, index_fixture  # noqa: F401 (fixtures encoder, index)

from aspire.serve import RequestError, SearchService, open_service

# ---- the cross-encoder scorer ----------------------------------------------------------------------------------------

PAIRS = [
    ("a neural model", "we propose a new neural network model for document similarity."),
    ("citation", "the"),
    ("scientific documents and their citation sentences in a paper " * 3, "a model"),
    ("the task", "sentence " * 40),
    ("language", "text data learning results show performance improves the state of the art."),
]


def direct_logits(model_dir, pairs, max_length):
    """Each pair alone through the Hugging Face model: [CLS] q [SEP] t [SEP], cut longest first to max_length."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for q, t in pairs:
            enc = tok(q, t, truncation="longest_first", max_length=max_length, return_tensors="pt")
            assert enc["input_ids"].shape[1] <= max_length
            out.append(float(model(**enc).logits[0, 0]))
    return np.array(out)


@pytest.mark.parametrize("batch_size", [1, 2, 32])
def test_cross_encoder_logits_are_a_direct_forward_of_each_pair_in_order(tiny_cross_encoder_dir, batch_size):
    from aspire.scoring.crossencoder import CrossEncoderReranker

    reranker = CrossEncoderReranker(tiny_cross_encoder_dir, max_length=16, batch_size=batch_size)
    got = reranker.score_pairs(PAIRS)
    want = direct_logits(tiny_cross_encoder_dir, PAIRS, 16)
    assert got.dtype == np.float32 and got.shape == (len(PAIRS),)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    assert np.diff(np.sort(want)).min() > 1e-4  # the pairs score apart: an order mix-up would show
    texts = {f"d{i}": t for i, (_, t) in enumerate(PAIRS)}
    head = reranker.head_scores("a neural model", [(d, 1.0 - i / 10) for i, d in enumerate(texts)], texts, 3)
    np.testing.assert_allclose(list(head.values()),
                               direct_logits(tiny_cross_encoder_dir, [("a neural model", texts[d]) for d in head], 16),
                               rtol=0, atol=2e-6)
    assert list(head) == ["d0", "d1", "d2"]


# ---- the search service ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def service(index):
    return open_service(index, ["k=3", "ot_max_iter=100"])


@pytest.mark.parametrize("rerank", ["none", "minl2", "ot"])
def test_service_answers_are_the_searchers_for_the_same_query(service, rerank):
    body = {"paper_id": "q", "sentences": [2, 0], "k": 4, "rerank": rerank}
    if rerank != "none":
        body["shortlist"] = 4
    out = service.search(body)
    searcher = service.searcher
    want = searcher.search(searcher.query_from_index("q", [0, 2]), k=4, rerank=rerank,
                           shortlist=4 if rerank != "none" else None)
    assert [h["paper_id"] for h in out["hits"]] == [h.paper_id for h in want]
    np.testing.assert_allclose([h["score"] for h in out["hits"]], [h.score for h in want], rtol=1e-6, atol=1e-7)
    assert [h["rank"] for h in out["hits"]] == list(range(1, len(want) + 1))
    for hit in out["hits"]:  # each hit's distances are the L2 distances of the selected query sentences to its own
        selected = searcher.query_from_index("q", [0, 2])
        query = selected.emb[0][selected.mask[0]].float()  # (2, D): the selected sentences' vectors
        cand = searcher.query_from_index(hit["paper_id"]).emb[0].float()
        np.testing.assert_allclose(hit["dist"], torch.cdist(query, cand).numpy(), atol=2e-5)


def brute_force_find(service, text):
    """`find_papers`' documented rule, written out: the exact id, ids starting with the text, then titles holding every
    word (case-insensitive, as parts of words); index order within each group, no paper twice."""
    ids, titles = service.index.paper_ids, service.index.titles
    needle = text.strip()
    order = []
    if needle:
        order += [i for i, pid in enumerate(ids) if pid == needle]
        order += [i for i, pid in enumerate(ids) if pid.startswith(needle)]
    order += [i for i, t in enumerate(titles) if all(w.casefold() in t.casefold() for w in needle.split())]
    return [ids[i] for i in dict.fromkeys(order)]


@pytest.mark.parametrize("text", ["", "q", "  PARS ", "documents parser", "a", "Neural", "zzz", "parsing neural", "ti"])
def test_find_papers_is_the_documented_rule_page_by_page(service, text):
    want = brute_force_find(service, text)
    for limit in (1, 2, 20):
        got, offset = [], 0
        while offset is not None:
            page = service.find_papers(text, limit=limit, offset=offset)
            assert len(page["papers"]) <= limit
            got += [p["paper_id"] for p in page["papers"]]
            offset = page["next_offset"]
        assert got == want, (text, limit)


def test_find_papers_matches_titles_without_regard_to_case_as_unicode_folds_it(service):
    """'Case-insensitive' by `str.lower` alone missed what only case folding equates: a title "Große Modelle" was not
    found by "GROSSE" (lower keeps "ß", the upper case of which is "SS"), nor "STRASSE" found "straße"."""
    searcher = service.searcher
    titles = list(searcher.index.titles)
    try:
        searcher.index.titles[:] = ["Große Modelle", "STRASSE", *titles[2:]]
        folded = SearchService(searcher)
        assert [p["paper_id"] for p in folded.find_papers("GROSSE")["papers"]] == [searcher.index.paper_ids[0]]
        assert [p["paper_id"] for p in folded.find_papers("straße")["papers"]] == [searcher.index.paper_ids[1]]
        assert [p["paper_id"] for p in folded.find_papers("große MODELLE")["papers"]] == [searcher.index.paper_ids[0]]
    finally:
        searcher.index.titles[:] = titles


@pytest.mark.parametrize("call, message", [
    (lambda s: s.paper("nope"), "unknown paper_id 'nope'"),
    (lambda s: s.search({"paper_id": "Q", "sentences": [0]}), "unknown paper_id 'Q'"),
])
def test_unknown_paper_ids_are_named_404(service, call, message):
    with pytest.raises(RequestError, match=message) as err:
        call(service)
    assert err.value.status == 404


@pytest.mark.parametrize("body, message", [
    ({"k": 0}, "k must be an integer in 1..50"),
    ({"k": 51}, "k must be an integer in 1..50"),
    ({"k": 3, "shortlist": 2, "rerank": "ot"}, r"shortlist \(2\) must be at least k \(3\)"),
    ({"shortlist": 5001, "rerank": "ot"}, "shortlist must be an integer in 1..5000"),
    ({"k": 40, "shortlist": 20, "rerank": "minl2"}, r"shortlist \(20\) must be at least k \(40\)"),
    ({"shortlist": 0, "rerank": "ot"}, "shortlist must be"),
])
def test_k_and_shortlist_bounds_are_refused_by_name(service, body, message):
    with pytest.raises(RequestError, match=message) as err:
        service.search({"paper_id": "q", "sentences": [0], **body})
    assert err.value.status == 400


@pytest.mark.parametrize("labels, message", [
    ({"q": ["background_label"]}, r"facet labels of paper 'q': 1 label\(s\), not one for each of its 3 indexed"),
    ({"a": ["background_label"] * 3}, r"paper 'a': 3 label\(s\), not one for each of its 2"),
    ({"q": "background_label"}, "paper 'q': a string"),
    ({"zz": ["background_label"]}, "facet labels for paper 'zz', which the index does not hold"),
])
def test_labels_that_do_not_fit_the_index_are_refused_by_paper(service, labels, message):
    """Labels of another length than the paper's sentences were taken, then `paper("q")` raised IndexError (a 500 on
    the page) or, with more labels than sentences, served labels of another abstract without a word."""
    with pytest.raises(ValueError, match=message):
        SearchService(service.searcher, labels)
    fitting = SearchService(service.searcher, {"a": ["background_label", "method_label"]})
    assert [s["facet"] for s in fitting.paper("a")["sentences"]] == ["background", "method"]
    assert [s["label"] for s in fitting.paper("q")["sentences"]] == [None, None, None]


# ---- the int8 recipe's block quantizer ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bits, block", [(8, 8), (8, 24), (8, 48), (4, 31), (4, 0)])
def test_block_sizes_matmul_nbits_cannot_load_are_refused_by_name(bits, block):
    """ONNX Runtime's MatMulNBits loads power-of-two blocks of 16 or more only: block 24 or 48 once wrote a graph no
    session could open ('Only power-of-two block sizes >= 16 are supported'), block 31 at 4 bits a numpy broadcast
    error, block 0 a ZeroDivisionError."""
    from aspire.encoders import onnx_int8

    with pytest.raises(ValueError, match=rf"block must be a power of two >= 16 \(MatMulNBits' block_size\), got {block}"):
        onnx_int8.block_quantize(np.ones((40, 3), np.float32), bits=bits, block=block)


def test_matmul_nbits_at_block_16_loads_and_keeps_the_product(tmp_path):
    """The smallest block ONNX Runtime takes: the quantized product is within the int8 rounding of the exact one."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from aspire.encoders import onnx_int8

    rng = np.random.default_rng(1)
    w = rng.normal(size=(64, 48)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 48])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "f.onnx"))
    assert onnx_int8.matmul_nbits(tmp_path / "f.onnx", tmp_path / "q.onnx", bits=8, block=16) == 1
    x = rng.normal(size=(3, 64)).astype(np.float32)
    y = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    exact = x @ w
    assert np.abs(y - exact).max() < 0.02 * np.abs(exact).max()
