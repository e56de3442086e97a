"""Contextual sentence encoder on a tiny random BERT: pooling, batching, offsets, truncation, saving."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from transformers import AutoModel

from aspire.data import Paper
from aspire.encoders import ContextualSentenceEncoder, load_encoder, resolve_model
from aspire.encoders.pretrained import assemble_split_zip

PAPERS = [
    Paper("p1", "A new model", ["We propose a new model.", "It improves the results, e.g. on text.", "Fig 2."]),
    Paper("p2", "Citation similarity", ["The document similarity of scientific text is based on citation data."]),
    Paper("p3", "Two", ["Data.", "The paper show results."]),
]


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> ContextualSentenceEncoder:
    return load_encoder(tiny_model_dir)


def hand_pooled(encoder: ContextualSentenceEncoder, paper: Paper) -> torch.Tensor:
    """Per-sentence means computed by hand from the BERT layout [CLS] title [SEP] s_1 … s_n [SEP]."""
    tok = encoder.tokenizer
    title_ids = tok(paper.title, add_special_tokens=False)["input_ids"]
    sent_ids = [tok(s, add_special_tokens=False)["input_ids"] for s in paper.sentences]
    ids = [tok.cls_token_id, *title_ids, tok.sep_token_id, *[i for s in sent_ids for i in s], tok.sep_token_id]
    types = [0] * (len(title_ids) + 2) + [1] * (sum(map(len, sent_ids)) + 1)
    with torch.no_grad():
        hidden = encoder.model(
            input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types])
        ).last_hidden_state[0]
    out, pos = [], len(title_ids) + 2
    for s in sent_ids:
        out.append(hidden[pos : pos + len(s)].mean(0))
        pos += len(s)
    return torch.stack(out)


def test_pooling_equals_hand_computed_sentence_means(encoder):
    batch = encoder.encode(PAPERS)
    for i, paper in enumerate(PAPERS):
        n = len(paper.sentences)
        torch.testing.assert_close(batch.emb[i, :n], hand_pooled(encoder, paper), atol=1e-5, rtol=1e-5)
        assert batch.mask[i].tolist() == [True] * n + [False] * (batch.emb.shape[1] - n)
    assert batch.paper_ids == ["p1", "p2", "p3"]
    assert batch.sentences[0] == PAPERS[0].sentences


def test_paper_alone_equals_paper_in_padded_batch(encoder):
    together = encoder.encode(PAPERS, batch_size=3)
    for i, paper in enumerate(PAPERS):
        alone = encoder.encode([paper])
        n = len(paper.sentences)
        torch.testing.assert_close(alone.emb[0, :n], together.emb[i, :n], atol=1e-5, rtol=1e-5)
    assert together.emb[1, 1:].abs().max() == 0  # padded rows are zero


def test_spans_follow_offsets_for_unicode_and_one_piece_sentences(encoder):
    paper = Paper("u", "Café", ["Naïve café résumé α.", "α", "Über → ß ü.", "model"])
    inputs = encoder.tokenize([paper])
    got = [int((inputs.sent_index[0] == k).sum()) for k in range(4)]
    want = [len(encoder.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in paper.sentences]
    assert got == want
    assert got[1] == 1 and got[3] == 1  # single-piece sentences keep their one piece
    torch.testing.assert_close(encoder.encode([paper]).emb[0], hand_pooled(encoder, paper), atol=1e-5, rtol=1e-5)


def test_truncation_is_reported_and_windows_keep_every_sentence(tiny_model_dir):
    long = Paper("long", "Title", [f"The model {k} improves the results of the task." for k in range(12)])
    window = load_encoder(tiny_model_dir, max_length=40)
    report = window.truncation_report([long, PAPERS[2]])
    assert [r.paper_id for r in report] == ["long"]
    rec = report[0]
    assert rec.cut and rec.cut == list(range(rec.cut[0], 12))
    assert set(rec.partial).isdisjoint(rec.cut) and len(rec.partial) <= 1
    batch = window.encode([long])
    assert batch.mask.all()  # every sentence has a vector

    cut = load_encoder(tiny_model_dir, max_length=40, overflow="truncate")
    batch = cut.encode([long])
    assert batch.mask[0].tolist() == [k not in rec.cut for k in range(12)]
    # sentences inside the first window are the same in both modes
    first = [k for k in range(12) if k not in rec.cut and k not in rec.partial]
    torch.testing.assert_close(batch.emb[0, first], window.encode([long]).emb[0, first])


def test_title_is_context_unless_configured(tiny_model_dir, encoder):
    with_title = load_encoder(tiny_model_dir, include_title=True).encode(PAPERS[:1])
    assert with_title.sentences[0] == [PAPERS[0].title, *PAPERS[0].sentences]
    assert with_title.mask[0].sum() == 4
    without = encoder.encode(PAPERS[:1])
    torch.testing.assert_close(with_title.emb[0, 1:4], without.emb[0, :3], atol=1e-5, rtol=1e-5)
    title_only = encoder.encode([Paper("t", "A new model", [])])
    assert title_only.sentences == [["A new model"]] and title_only.mask.tolist() == [[True]]


def test_sentence_without_pieces_is_an_error_naming_the_paper(encoder):
    with pytest.raises(ValueError, match=r"paper bad: sentence\(s\) \[1\]"):
        encoder.encode([Paper("bad", "Title", ["A model.", "   ", "Text."])])


@pytest.mark.parametrize("one", [PAPERS[0], {"paper_id": "a", "title": "t", "abstract": ["A model."]},
                                 "We propose a model.", None], ids=["Paper", "dict", "str", "None"])
def test_one_paper_not_in_a_list_is_refused_by_every_encode(encoder, one):
    """Iterating a lone string or record would encode its characters or keys as papers."""
    for encode in (encoder.encode, encoder.encode_independent, encoder.encode_abstract, encoder.truncation_report):
        with pytest.raises(TypeError, match=f"expected a list of papers, got {type(one).__name__}"):
            encode(one)
    record = {"paper_id": "a", "title": PAPERS[0].title, "abstract": PAPERS[0].sentences}
    torch.testing.assert_close(encoder.encode_abstract([record]), encoder.encode_abstract([PAPERS[0]]))
    assert encoder.encode_independent(p for p in [record]).paper_ids == ["a"]


def test_save_and_load_in_hugging_face_format(tmp_path, tiny_model_dir):
    enc = load_encoder(tiny_model_dir, include_title=True, max_length=64)
    enc.save_pretrained(tmp_path / "saved")
    AutoModel.from_pretrained(tmp_path / "saved")  # plain transformers opens it
    again = load_encoder(tmp_path / "saved")
    assert again.settings() == enc.settings()
    assert again.fingerprint() == enc.fingerprint()
    torch.testing.assert_close(again.encode(PAPERS).emb, enc.encode(PAPERS).emb)
    other = load_encoder(tmp_path / "saved", include_title=False)
    assert other.fingerprint() != enc.fingerprint()


def test_independent_and_abstract_vectors(encoder):
    ind = encoder.encode_independent(PAPERS)
    alone = encoder.embed_texts([PAPERS[0].sentences[1]])
    torch.testing.assert_close(ind.emb[0, 1], alone[0], atol=1e-5, rtol=1e-5)
    assert ind.mask.sum().item() == sum(len(p.sentences) for p in PAPERS)
    vec = encoder.encode_abstract(PAPERS, normalize=True)
    assert vec.shape == (3, encoder.dim)
    torch.testing.assert_close(vec.norm(dim=1), torch.ones(3))
    cls = encoder.encode_abstract(PAPERS, pooling="cls")
    assert not torch.allclose(cls, encoder.encode_abstract(PAPERS))
    with pytest.raises(ValueError, match="pooling"):
        encoder.encode_abstract(PAPERS, pooling="max")


def test_unknown_model_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"\['aspire-minilm', 'minilm', 'mpnet'\]"):
        resolve_model("specter-from-the-hub")


def test_split_zip_is_verified_and_extracted_atomically(tmp_path):
    archive = tmp_path / "m.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("m/config.json", json.dumps({"a": 1}))
        z.writestr("m/weights.bin", bytes(range(256)) * 64)
    data = archive.read_bytes()
    pieces = []
    for k, start in enumerate(range(0, len(data), 5000)):
        pieces.append(tmp_path / f"m.zip.00{k + 1}")
        pieces[-1].write_bytes(data[start : start + 5000])
    out = assemble_split_zip(pieces, tmp_path / "cache" / "m", "m")
    assert (out / "weights.bin").read_bytes() == bytes(range(256)) * 64

    corrupt = bytearray(data)
    corrupt[data.index(bytes(range(256))) + 10] ^= 0xFF  # flip a byte inside the stored weights
    pieces[0].write_bytes(bytes(corrupt[:5000]))
    pieces[1].write_bytes(bytes(corrupt[5000:10000]))
    with pytest.raises(ValueError, match="CRC"):
        assemble_split_zip(pieces, tmp_path / "cache2" / "m", "m")
    assert not (tmp_path / "cache2" / "m").exists()  # nothing half-extracted is left to load


@pytest.mark.slow
def test_minilm_on_real_csfcube_abstracts(shared_data):
    from aspire.scoring import get_scorer

    rows = [json.loads(line) for _, line in zip(range(60), open(shared_data / "csfcube/abstracts-csfcube-preds.jsonl"))]
    papers = [Paper(r["paper_id"], r["title"], r["abstract"]) for r in rows]
    enc = load_encoder("minilm")
    batch = enc.encode(papers, batch_size=16)
    assert batch.emb.shape == (60, max(len(p.sentences) for p in papers), 384)
    assert batch.mask.sum(1).tolist() == [len(p.sentences) for p in papers]
    sim = get_scorer("minl2").score(batch, batch)  # (60, 60) similarity
    assert (sim.argmax(dim=1) == torch.arange(60)).all()  # every paper is nearest to itself


@pytest.mark.slow
def test_mpnet_is_reassembled_from_its_wheels():
    path = resolve_model("mpnet")
    assert (path / "model.safetensors").stat().st_size > 400_000_000
    enc = load_encoder("mpnet")
    assert enc.dim == 768 and enc.max_length == 512
    batch = enc.encode(PAPERS)
    assert batch.emb.shape[-1] == 768 and torch.isfinite(batch.emb).all()


def test_single_segment_option_keeps_every_piece_in_segment_zero(tiny_model_dir, encoder):
    single = load_encoder(tiny_model_dir, segment_ids=False)
    assert single.tokenize(PAPERS).token_type_ids is None
    assert encoder.tokenize(PAPERS).token_type_ids.max() == 1
    paper = PAPERS[0]
    tok = single.tokenizer
    ids = tok(paper.title, " ".join(paper.sentences))["input_ids"]
    with torch.no_grad():
        hidden = single.model(input_ids=torch.tensor([ids])).last_hidden_state[0]  # token types default to 0
    first = len(tok(paper.title, add_special_tokens=False)["input_ids"]) + 2
    n0 = len(tok(paper.sentences[0], add_special_tokens=False)["input_ids"])
    torch.testing.assert_close(single.encode([paper]).emb[0, 0], hidden[first : first + n0].mean(0), atol=1e-5, rtol=1e-5)
    assert single.fingerprint() != encoder.fingerprint()


def test_the_long_abstract_warning_names_twenty_and_the_command_lists_every_one(tiny_model_dir, tmp_path, caplog,
                                                                                  capsys):
    import json
    import logging

    from aspire.cli import main

    long = [Paper(f"p{i}", "Title", [f"The model {k} improves the results of the task." for k in range(30)])
            for i in range(25)]
    with caplog.at_level(logging.WARNING, logger="aspire"):
        load_encoder(tiny_model_dir).encode(long)
    warning = " ".join(r.getMessage() for r in caplog.records if "longer than" in r.getMessage())
    assert "25 paper(s) longer than 128 word pieces" in warning and "p19 and 5 more" in warning
    assert "p20" not in warning and "aspire encode --model M --corpus FILE --long-report" in warning
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text("".join(json.dumps({"paper_id": p.paper_id, "title": p.title, "abstract": p.sentences}) + "\n"
                              for p in [*long, Paper("short", "Title", ["One short sentence."])]))
    assert main(["encode", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--long-report"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("\t")[0] for line in out.splitlines()] == [p.paper_id for p in long]
    assert "25 of 26 papers longer than 128 word pieces" in err


def test_non_finite_vectors_are_an_error_naming_the_papers(tiny_model_dir):
    """A model holding a NaN (a diverged run) gave papers NaN vectors, which every scorer then ranked first."""
    broken = load_encoder(tiny_model_dir)
    piece = broken.tokenizer("citation", add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        broken.model.embeddings.word_embeddings.weight[piece] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite vectors for 1 item\(s\): paper p2;"):
        broken.encode(PAPERS)
    with pytest.raises(ValueError, match=r"non-finite vectors for 1 item\(s\): paper p2;"):  # was "text 1"
        broken.encode_abstract(PAPERS)
    with pytest.raises(ValueError, match=r"non-finite vectors for 1 item\(s\): text 1;"):  # no names given
        broken.embed_texts([" ".join(p.sentences) for p in PAPERS])
    assert broken.encode([PAPERS[0], PAPERS[2]]).paper_ids == ["p1", "p3"]


def test_a_window_too_short_for_the_specials_is_refused_and_long_titles_are_cut_to_fit(tiny_model_dir):
    """max_length 8 once failed on a long title (the tokenizer's "sequence to truncate too short"), 1 with a
    tensor-size error, -5 with an OverflowError."""
    for bad, said in ((1, "max_length 1 leaves no room"), (5, "max_length 5 leaves no room"),
                      (-5, "max_length must be >= 0")):
        with pytest.raises(ValueError, match=said):
            load_encoder(tiny_model_dir, max_length=bad)
    with pytest.raises(ValueError, match="max_title_tokens >= 1"):
        load_encoder(tiny_model_dir, max_title_tokens=0)
    short = load_encoder(tiny_model_dir, max_length=6)
    long_title = Paper("t", "a very long title about citation models and the similarity of scientific text", ["A model."])
    batch = short.encode([long_title, *PAPERS])
    assert batch.lengths.tolist() == [1, 3, 1, 2]
    assert short.encode([long_title]).emb.allclose(batch.emb[:1, :1])
    with pytest.raises(ValueError, match="max_length must be >= 0"):
        short.embed_texts(["a text"], max_length=-1)
    long_text = " ".join(["citation"] * 300)  # past the tiny model's 128 positions: once a tensor-size error
    torch.testing.assert_close(short.embed_texts([long_text], max_length=100_000), short.embed_texts([long_text],
                               max_length=128))  # the tiny model's positions
