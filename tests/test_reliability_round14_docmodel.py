"""Round 14, the document model: its terms against loops over sentence pairs, its exports against the model they
came from, and its save -> load round trip, on a tiny random BERT."""

from __future__ import annotations

import pytest
import torch

from aspire.config import ConfigError
from aspire.train.document_model import DocumentModel
from aspire.train.export import export_adapter
from aspire.train.trainer import build_model
from tests.test_train import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
PAPERS = [{"paper_id": "p1", "title": "a title", "abstract": ["the model of text.", "we propose a new method."]},
          {"paper_id": "p2", "title": "", "abstract": ["results show the approach improves performance."]}]


def _lora_model(tiny_model_dir, examples_dir, tmp_path, *overrides):
    """A kind `ts` LoRA model saved under tmp_path/model, its adapter moved off zero."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", "model.adapter.kind=lora", *overrides)
    model = build_model(cfg)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "model")
    return model, tmp_path / "model"


# ---- export_adapter: a base that loads, with the same weights, as another model -------------------------------
@pytest.mark.parametrize("change", ["config", "vocabulary"])
def test_adapter_export_refuses_a_base_with_the_same_weights_but_another_config_or_vocabulary(
        change, tiny_model_dir, examples_dir, tmp_path):
    """The version-1 fingerprint hashed the weights and the vocabulary's size, not the model config nor the vocabulary:
    a base with GELU swapped for ReLU (vectors 0.02 off) or two words' ids swapped (0.7 off) was accepted. The export
    names what differs (before comparing fingerprints, which version 2 tells apart too)."""
    from test_fingerprint_versions import changed_copy

    model, saved = _lora_model(tiny_model_dir, examples_dir, tmp_path)
    base = changed_copy(tiny_model_dir, tmp_path / "base", change)
    what = "config hidden_act" if change == "config" else "tokenizer model"
    with pytest.raises(ValueError, match=f"is not the base .* its {what} differs"):
        export_adapter(saved, tmp_path / "out", str(base))
    assert not (tmp_path / "out").exists()
    out, _ = export_adapter(saved, tmp_path / "out", str(tiny_model_dir))  # its own base: the very model
    torch.testing.assert_close(DocumentModel.from_pretrained(out).encode(PAPERS).emb, model.encode(PAPERS).emb,
                               rtol=0, atol=0)


# ---- task formats: a warm start from an adapted encoder --------------------------------------------------------
@pytest.mark.parametrize("kind, setting, said", [
    ("lora", "model.adapter.dropout=0.5", r"dropout: encoder 0.0, config 0.5"),
    ("ia3", "model.adapter.target_modules=[query]", r"targets: encoder \['key', 'output.dense', 'value'\], "
                                                    r"config \['query'\]"),
])
def test_warm_start_refuses_adapter_settings_the_loaded_adapter_does_not_have(kind, setting, said, tiny_model_dir,
                                                                             examples_dir, tmp_path):
    """The loaded adapter keeps its own settings: `model.adapter.dropout=0.5` over a LoRA adapter saved with 0 trained
    with none (every LoRA dropout an Identity), and ia3 `target_modules=[query]` over one on key, value and
    output.dense trained those three; both unsaid."""
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "run", f"model.adapter.kind={kind}")
    build_model(cfg).save_pretrained(tmp_path / "model")
    with pytest.raises(ConfigError, match=f"asks for others \\({said}\\)"):
        build_model(tiny_config(tmp_path / "model", examples_dir, tmp_path / "warm", f"model.adapter.kind={kind}",
                                setting))
    model = build_model(tiny_config(tmp_path / "model", examples_dir, tmp_path / "warm", f"model.adapter.kind={kind}"))
    assert list(model.encoder.model.peft_config) == ["default"]  # the same settings: it goes on training


# ---- the training terms against loops over sentence pairs -------------------------------------------------------
def _batch(kind, tiny_model_dir, examples_dir, tmp_path, *overrides):
    from aspire.train.data import TripletCollator, load_split

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, f"model.kind={kind}", "loss.margin=0.3", *overrides)
    model = build_model(cfg).eval()
    data = load_split(cfg.data, "train")
    examples = [data[i] for i in range(0, 24, 3)]
    batch = TripletCollator(model.tokenize, data.papers)(examples)
    with torch.no_grad():
        out, docs = model(batch), model.embed(batch.inputs)
    from aspire.losses import in_batch_negative_mask, pick_one_negative

    neg, has = pick_one_negative(in_batch_negative_mask(batch.group_ids, batch.pos_ids))
    return model, examples, batch, out, docs, [len(examples) + int(n) if h else None for n, h in zip(neg, has)]


def _aligned(examples, batch, docs, i):
    """The (anchor, positive) sentence vectors `examples[i].align` names (past a title sentence), or None."""
    B, e, titled = len(examples), examples[i], batch.inputs.titled
    if e.align is None:
        return None
    a, p = e.align[0] + int(titled[i]), e.align[1] + int(titled[B + i])
    if not (a < docs.mask.shape[1] and p < docs.mask.shape[1] and docs.mask[i, a] and docs.mask[B + i, p]):
        return None
    return docs.emb[i, a], docs.emb[B + i, p]


def test_ts_ot_triplet_terms_equal_loops_over_sentence_pairs(tiny_model_dir, examples_dir, tmp_path):
    """`aligned`: L2 of the aligned pair against the min over every pair of real sentences of the negative; `ot`:
    the OT distance of each pair alone (the batched Sinkhorn run per pair); each a hinge at the margin."""
    model, examples, batch, out, docs, neg = _batch("ts+ot", tiny_model_dir, examples_dir, tmp_path,
                                                    "model.include_title=true")
    B, ot = len(examples), model._scorers["ot"]

    def min_l2(i, j):
        return min(float((docs.emb[i, s] - docs.emb[j, t]).norm()) for s in range(docs.mask.shape[1]) if docs.mask[i, s]
                   for t in range(docs.mask.shape[1]) if docs.mask[j, t])

    def ot_dist(i, j):
        return float(ot.pairwise_dist(docs.index(torch.tensor([i])), docs.index(torch.tensor([j])))[0])

    aligned, transport = [], []
    for i in range(B):
        if neg[i] is None:
            continue
        transport.append(max(0.0, ot_dist(i, B + i) - ot_dist(i, neg[i]) + 0.3))
        pair = _aligned(examples, batch, docs, i)
        if pair is not None:
            aligned.append(max(0.0, float((pair[0] - pair[1]).norm()) - min_l2(i, neg[i]) + 0.3))
    assert aligned and transport
    assert out["loss/aligned"].item() == pytest.approx(sum(aligned) / len(aligned), rel=1e-5)
    assert out["loss/ot"].item() == pytest.approx(sum(transport) / len(transport), rel=1e-5)
    assert out["loss"].item() == pytest.approx(sum(aligned) / len(aligned) + sum(transport) / len(transport), rel=1e-5)


def test_hybrid_triplet_terms_equal_cosines_of_whole_vectors_and_the_aligned_sentence(tiny_model_dir, examples_dir,
                                                                                    tmp_path):
    """`whole`: 1 - cos of the whole vectors; `facet`: 1 - cos of the anchor's aligned sentence and the other's whole
    vector, checked against torch's triplet loss with a cosine distance."""
    _, examples, batch, out, docs, neg = _batch("hybrid", tiny_model_dir, examples_dir, tmp_path)
    B, whole = len(examples), docs.whole
    cos_dist = lambda x, y: 1 - torch.nn.functional.cosine_similarity(x, y, dim=-1)  # noqa: E731
    rows = [i for i in range(B) if neg[i] is not None]
    want = torch.nn.functional.triplet_margin_with_distance_loss(
        whole[rows], whole[[B + i for i in rows]], whole[[neg[i] for i in rows]], distance_function=cos_dist,
        margin=0.3)
    assert out["loss/whole"].item() == pytest.approx(want.item(), rel=1e-5)
    facet = [i for i in rows if _aligned(examples, batch, docs, i) is not None]
    anchors = torch.stack([_aligned(examples, batch, docs, i)[0] for i in facet])
    want = torch.nn.functional.triplet_margin_with_distance_loss(
        anchors, whole[[B + i for i in facet]], whole[[neg[i] for i in facet]], distance_function=cos_dist, margin=0.3)
    assert out["loss/facet"].item() == pytest.approx(want.item(), rel=1e-5)


# ---- the merged export against sentence-transformers and peft ----------------------------------------------------
def test_merged_abstract_model_encodes_in_sentence_transformers_as_trained(tiny_model_dir, examples_dir, tmp_path):
    """A kind `abstract` LoRA model merged (peft's merge_and_unload) and opened by sentence-transformers (mean pooling,
    normalised, cut at the model's max_length) gives the model's own vectors; its settings survive the export."""
    from sentence_transformers import SentenceTransformer

    from aspire.data.papers import abstract_text, as_papers
    from aspire.train.export import export_merged

    model, saved = _lora_model(tiny_model_dir, examples_dir, tmp_path, "model.kind=abstract", "model.max_length=12",
                               "abstract.joiner=' | '")
    out = export_merged(saved, tmp_path / "merged")
    merged = DocumentModel.from_pretrained(out)
    assert (merged.abstract_cfg, merged.encoder.settings()) == (model.abstract_cfg, model.encoder.settings())
    assert merged.model_cfg.adapter.kind == "none"
    want = model.encode(PAPERS).emb[:, 0]
    torch.testing.assert_close(merged.encode(PAPERS).emb[:, 0], want, rtol=0, atol=1e-6)
    st = SentenceTransformer(str(out), device="cpu")
    st.max_seq_length = 12  # read from the tokenizer (128) otherwise: aspire_encoder.json is aspire's
    texts = [abstract_text(p.title, p.sentences, " | ") for p in as_papers(PAPERS)]
    torch.testing.assert_close(st.encode(texts, convert_to_tensor=True, normalize_embeddings=True), want, rtol=0,
                               atol=1e-6)
