"""Shared fixtures: a tiny random BERT with a local vocabulary (no network), and the shared data."""

from __future__ import annotations

import json
import os
import shutil
import string
from pathlib import Path

import pytest
import torch

os.environ.setdefault("ASPIRE_BACKEND", "torch")  # commands' --backend auto would pick the CPU's fastest: tests keep exact
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

TINY_WORDS = (
    "the a of and to in is we for on with that this by are as an be from at our which it model models "
    "method methods result results paper task data learning neural network language text sentence "
    "sentences show propose new approach using based performance state art improve improves two "
    "document documents similarity scientific abstract title citation aspect et al fig e g i vs cf "
    "café naïve résumé"
).split()


def pytest_collection_modifyitems(config, items):
    """Files that hold a slow test run first, each file's tests in their order: `make test` hands whole files to its
    workers in collection order, so the long files start early and the short ones fill the end, where a long file
    collected last kept one worker busy alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort: the order is otherwise kept


def build_tiny_model(path: Path, hidden: int = 32, max_position: int = 128) -> Path:
    """Save a random BertModel + BertTokenizerFast with a tiny vocabulary to `path` (HF format)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    chars = list(string.ascii_lowercase + string.digits + string.punctuation) + ["é", "ï", "ü", "ß", "→", "α"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted(set(TINY_WORDS))
    vocab += [c for c in chars if c not in vocab]
    vocab += ["##" + c for c in chars]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(path / "vocab.txt"), do_lower_case=True, strip_accents=False)
    tokenizer.model_max_length = max_position
    tokenizer.save_pretrained(path)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_position,
    )
    torch.manual_seed(0)
    BertModel(config).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A directory holding a tiny random BERT in Hugging Face format (built once per session)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def build_tiny_cross_encoder(path: Path, tokenizer_dir: Path, seed: int = 1) -> Path:
    """Save a random one-label BertForSequenceClassification (a trained cross-encoder's format) with the tiny
    tokenizer of `tokenizer_dir` to `path`; its head's weights are widened so that logits differ clearly."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizerFast.from_pretrained(tokenizer_dir)
    tokenizer.save_pretrained(path)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_cross_encoder_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A directory holding a tiny random cross-encoder (one logit) in Hugging Face format."""
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross"), tiny_model_dir)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private $ASPIRE_CACHE for a test module, so ONNX exports land in a temporary folder."""
    root = tmp_path_factory.mktemp("aspire-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASPIRE_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data`; tests needing it skip with a clear message when it is absent."""
    if not (SHARED_DATA / "csfcube").is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture()
def small_csfcube(shared_data, tmp_path):
    """CSFCube with every pool cut to 8 candidates (at least one relevant), all queries and splits kept."""
    src, root = shared_data / "csfcube", tmp_path / "csfcube"
    root.mkdir()
    keep = set()
    for facet in ("background", "method", "result"):
        anns = json.loads((src / f"test-pid2anns-csfcube-{facet}.json").read_text())
        for qid, ann in anns.items():
            pairs = [(c, g) for c, g in zip(ann["cands"], ann["relevance_adju"]) if c != qid]
            first_rel = next(p for p in pairs if p[1] >= 2)
            pairs = [first_rel] + [p for p in pairs if p != first_rel][:7]
            ann.update(cands=[c for c, _ in pairs], relevance_adju=[g for _, g in pairs])
            keep |= {qid, *ann["cands"]}
        (root / f"test-pid2anns-csfcube-{facet}.json").write_text(json.dumps(anns))
    for name in ("evaluation_splits.json", "queries-release.csv"):
        shutil.copy(src / name, root / name)
    with open(src / "abstracts-csfcube-preds.jsonl") as fh, open(root / "abstracts-csfcube-preds.jsonl", "w") as out:
        out.writelines(line for line in fh if json.loads(line)["paper_id"] in keep)
    return root


@pytest.fixture(scope="module")
def examples_dir(tmp_path_factory) -> Path:
    """A small co-citation examples folder (`tests.test_train.write_examples_dir`), one a test module."""
    from tests.test_train import write_examples_dir

    return write_examples_dir(tmp_path_factory.mktemp("examples"))


@pytest.fixture(scope="session")
def real_cocite_examples(shared_data, tmp_path_factory) -> Path:
    """`aspire data run-all` over the real co-citation contexts (`cocite-acl`, defaults), once a session: its
    `5_examples` folder, which the tests read and never write."""
    from aspire.cli.data import main

    records = shared_data / "cocite-acl" / "cocitations.jsonl"
    if not records.is_file():
        pytest.skip(f"shared co-citation data not found at {records}")
    out = tmp_path_factory.mktemp("real-cocite") / "run"
    assert main(["run-all", "--in", str(records), "--out", str(out), "-q"]) == 0
    return out / "5_examples"


@pytest.fixture()
def pools_in_pool_order(monkeypatch):
    """`aspire.evaluate.search_run.rank_pools_by_search` replaced by a stand-in that ranks every pool in its own order
    and records the encoder's fingerprint, as the real one records what ranked: for tests of a search run's records."""
    from aspire.evaluate import search_run

    def by_pool_order(pool_set, papers, encoder, pipeline, label_to_facet, cache_dir, batch_size, facet_code, record,
                      search=None):
        record.append({"fingerprint": encoder.fingerprint()})
        return {f: {q: list(p) for q, p in pool_set.pools[f].items()} for f in pool_set.facets}

    monkeypatch.setattr(search_run, "rank_pools_by_search", by_pool_order)


@pytest.fixture()
def fresh(tmp_path, monkeypatch):
    """`tmp_path`, with the aspire cache (ASPIRE_CACHE) under it and `read_acl`'s memo cleared before and after: an ACL
    file read here is read and split anew."""
    from aspire.data.acl import read_acl

    monkeypatch.setenv("ASPIRE_CACHE", str(tmp_path / "cache"))
    read_acl.cache_clear()
    yield tmp_path
    read_acl.cache_clear()
