"""Round 15, training and framework configuration, training data and multi-task mixing: edge cases of seeds,
override errors, task settings and data records that earlier rounds missed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pytest
import torch

from aspire.config import ConfigError, apply_overrides, from_dict, load_config
from aspire.data.papers import Paper
from aspire.index.config import SearchConfig
from aspire.train.data import EpochBatchSampler
from aspire.train.mixing import MixSampler


# ---- seeds -------------------------------------------------------------------------------------------------
def _mixed_sampler(seed: int) -> MixSampler:
    return MixSampler([10, 6], [0, 10], "mixed", [1.0, 1.0], 4, seed=seed, epoch=0)


def _brute_mixed_batch(seed: int, g: int) -> list[int]:
    """Micro-batch g of `_mixed_sampler(seed)` from the definition: task t's pass p is the permutation drawn from
    ((seed * 1000003 + t) * 1000003 + p) mod 2**64, cut into chunks of its share (2 pairs of each task)."""
    out = []
    for t, (size, offset) in enumerate(((10, 0), (6, 10))):
        per_pass = size // 2
        gen = torch.Generator().manual_seed(((seed * 1_000_003 + t) * 1_000_003 + g // per_pass) % 2**64)
        perm = torch.randperm(size, generator=gen)
        out += (perm[(g % per_pass) * 2 : (g % per_pass) * 2 + 2] + offset).tolist()
    return out


@pytest.mark.parametrize("seed", [0, 7, 18_000_000, 20240101, 2**40])
def test_mixed_batches_of_any_seed_follow_the_definition(seed):
    """A multi-task run with `train.seed=20240101` (a date: any seed from about 1.85e7 on) stopped at its first batch
    with torch's 'Overflow when unpacking long long': the task permutation's seed passed 2**64. The seeds below keep
    their batches exactly (a resumed run reads the same ones)."""
    sampler = _mixed_sampler(seed)
    batches = [sampler.batch(g) for g in range(8)]
    assert batches == [_brute_mixed_batch(seed, g) for g in range(8)]
    assert sorted(batches[0]) == sorted(set(batches[0])) and len(batches[0]) == 4


@pytest.mark.parametrize("seed", [0, 3, 2**44, 2**63])
def test_epoch_permutation_of_any_seed_is_the_seeded_one(seed):
    """`EpochBatchSampler.permutation` overflowed torch's seed from seed 1.8e13 on; below, it is unchanged."""
    expected = torch.randperm(9, generator=torch.Generator().manual_seed((seed * 1_000_003 + 2) % 2**64))
    assert torch.equal(EpochBatchSampler.permutation(9, seed, 2), expected)
    assert sorted(next(iter(EpochBatchSampler(9, 3, seed, 2)))) == sorted(expected[:3].tolist())


# ---- override errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("override", ["k.x=1", "k={a: 1}"])
def test_apply_overrides_names_the_section_in_a_merge_error(override):
    """`apply_overrides(config, ..., "search")` named every other error `search.KEY`, but a value given a sub-key
    (`k.x=1`) was named `k`, as if it were a top-level key."""
    with pytest.raises(ConfigError, match=r"^search\.k: is one value"):
        apply_overrides(SearchConfig(), [override], "search")
    with pytest.raises(ConfigError, match=r"^search\.k: must be >= 1"):  # the other errors, as they were
        apply_overrides(SearchConfig(), ["k=0"], "search")
    assert apply_overrides(SearchConfig(), ["k=7"], "search").k == 7


# ---- value types -------------------------------------------------------------------------------------------
@dataclass
class _Listed:
    """A config with a `Sequence` field, as `_coerce` claims to read one."""

    ids: Sequence[int] = field(default_factory=list)


def test_a_sequence_field_is_read_as_a_list_of_its_items():
    """`typing.get_origin(Sequence[int])` is `collections.abc.Sequence`, which `_coerce` did not list: a Sequence
    field took any value unchecked (`ids: 5`, `ids: [a]`, the YAML 1.1 octal `010` as 8)."""
    assert from_dict(_Listed, {"ids": [1, "2"]}).ids == [1, 2]
    assert load_config(_Listed, None, ["ids=[3, 4]"]).ids == [3, 4]
    with pytest.raises(ConfigError, match=r"^ids: expected a list, got 5"):
        from_dict(_Listed, {"ids": 5})
    with pytest.raises(ConfigError, match=r"^ids\[0\]: expected int, got 'a'"):
        from_dict(_Listed, {"ids": ["a"]})
    with pytest.raises(ConfigError, match=r"^ids\[1\]: 010 is the octal number 8"):
        load_config(_Listed, None, ["ids=[1, 010]"])


# ---- task formats ------------------------------------------------------------------------------------------
def _authored(pid: str, *names) -> Paper:
    return Paper(pid, pid.upper(), [f"{pid} text."], extra={"authors": list(names)})


@pytest.mark.parametrize("odd", [None, 7, ["Ann", "Lee"]])
def test_author_task_refuses_an_author_that_is_not_a_name(odd):
    """`authors: [null, ...]` was read as the author "none" (`str(None)`): two papers each listing a null author were
    paired as sharing an author, and with a paper by someone actually called "None" too."""
    from aspire.train.config import TaskConfig
    from aspire.train.tasks import author_pairs

    task = TaskConfig(name="author", sources=["acl"])
    papers = [_authored("a", odd, "Ann Lee"), _authored("b", odd), _authored("c", "None")]
    with pytest.raises(ValueError, match=r"author task: paper a: 'authors' must be a list of names"):
        author_pairs(papers, task, 0)


def test_author_pairs_match_a_brute_force_of_shared_names():
    """Pairs (min_shared_authors 2, views 5: every partner) against a loop over every two papers; names compared
    lower-cased with spaces collapsed, an empty name ignored, an author of more than max_author_papers linking nothing."""
    from aspire.train.config import TaskConfig
    from aspire.train.tasks import author_key, author_pairs

    papers = [_authored("a", "Ann Lee", "Bo Chen", "Pro Lific"), _authored("b", "ann  LEE", "Bo Chen", ""),
              _authored("c", "Bo Chen", "Pro Lific"), _authored("d", "Pro Lific", "Ann Lee"),
              _authored("e", "Pro Lific", "Dee"), _authored("f", "Dee", "Bo Chen", "Ann Lee"), _authored("g", "Pro Lific")]
    task = TaskConfig(name="author", sources=["acl"], min_shared_authors=2, views=5, max_author_papers=4)
    examples, stats = author_pairs(papers, task, 4)
    names = [{author_key(n) for n in p.extra["authors"] if n.strip()} for p in papers]
    count = {a: sum(a in n for n in names) for a in set().union(*names)}
    linking = [{a for a in n if 2 <= count[a] <= 4} for n in names]
    expected = {(p.paper_id, q.paper_id) for i, p in enumerate(papers) for j, q in enumerate(papers)
                if i != j and len(linking[i] & linking[j]) >= 2}
    assert {(e.query_id, e.positive_id) for e in examples} == expected
    assert expected == {("a", "b"), ("b", "a"), ("a", "f"), ("f", "a"), ("b", "f"), ("f", "b")}
    assert all(e.task == 4 for e in examples) and len(examples) == len(expected)
    assert stats["authors_over_max"] == 1  # pro lific (5 papers)


def _adapted(tiny_model_dir, out, *overrides: str):
    """The tiny model with a LoRA adapter (r 4) and the formats `overrides` give, saved to `out` and loaded back."""
    from aspire.encoders import ContextualSentenceEncoder
    from aspire.train.config import Config
    from aspire.train.task_formats import apply_formats

    encoder = ContextualSentenceEncoder.from_pretrained(tiny_model_dir)
    apply_formats(encoder, load_config(Config, None, ["model.adapter.kind=lora", "model.adapter.r=4", *overrides]).model,
                  ["cocite"])
    encoder.save_pretrained(out)
    return ContextualSentenceEncoder.from_pretrained(out)


def test_an_adapted_encoder_with_no_adapter_configured_is_refused(tiny_model_dir, tmp_path):
    """`model.encoder` an adapted model with `model.adapter.kind: none` (the default): `apply_formats` skipped every
    check and its LoRA trained alone, the base frozen (1,024 of the tiny model's 30,400 weights), where the config
    asks for no adapter, a full fine-tune."""
    from aspire.train.config import Config
    from aspire.train.task_formats import apply_formats

    encoder = _adapted(tiny_model_dir, tmp_path / "lora")
    with pytest.raises(ConfigError, match=r"has adapters of its own \(lora \['default'\]\) and model\.adapter\.kind is "
                                          r"none"):
        apply_formats(encoder, Config().model, ["cocite"])
    apply_formats(encoder, load_config(Config, None, ["model.adapter.kind=lora", "model.adapter.r=4"]).model, ["cocite"])
    trains = {n for n, p in encoder.model.named_parameters() if p.requires_grad}
    assert trains and all("lora_" in n for n in trains)  # the described adapter: a warm start, as before


def test_codes_an_adapted_encoder_does_not_train_are_refused(tiny_model_dir, tmp_path):
    """Task codes asked of an adapted encoder without them got new embedding rows outside its adapter: frozen, never
    trained, silently; asked of one trained with other codes, a TypeError from inside transformers' resize. Its own
    codes go on training (peft's trainable token delta)."""
    from aspire.encoders.codes import code_id
    from aspire.train.config import Config
    from aspire.train.task_formats import apply_formats

    plain = _adapted(tiny_model_dir, tmp_path / "plain")
    coded = _adapted(tiny_model_dir, tmp_path / "coded", "model.control_codes=task")
    cfg = load_config(Config, None, ["model.adapter.kind=lora", "model.adapter.r=4", "model.control_codes=task"]).model
    vocabulary = len(plain.tokenizer)
    with pytest.raises(ConfigError, match=r"model\.control_codes=task: .* do not train the code\(s\) \['\[COCITE\]'\] "
                                          r"\(its codes: none\)"):
        apply_formats(plain, cfg, ["cocite"])
    assert len(plain.tokenizer) == vocabulary and plain.codes == []  # refused before anything was added
    with pytest.raises(ConfigError, match=r"do not train the code\(s\) \['\[CROP\]'\] \(its codes: \['\[COCITE\]'\]\)"):
        apply_formats(coded, cfg, ["crop"])
    apply_formats(coded, cfg, ["cocite"])
    coded.train()
    from test_formats import PAPERS

    coded(coded.tokenize(PAPERS)).emb.sum().backward()
    delta = [p for n, p in coded.model.named_parameters() if "trainable_tokens_delta" in n]
    assert delta and delta[0].grad is not None and float(delta[0].grad.abs().sum()) > 0
    assert coded.model.peft_config["default"].trainable_token_indices == [code_id(coded.tokenizer, "[COCITE]")]


def test_author_pairs_link_one_name_written_with_combining_accents_and_precomposed():
    # the task kept its own copy of the name key, without the benchmark's NFC step: "Özateş" written with combining
    # accents (3 such names in the ACL file) was another author than the precomposed one, and these two papers no pair
    from aspire.train.config import TaskConfig
    from aspire.train.tasks import author_pairs

    decomposed, composed = "S\u0327aziye O\u0308zates\u0327", "\u015eaziye \u00d6zate\u015f"
    papers = [_authored("a", decomposed, "Bo Chen"), _authored("b", composed, "Bo Chen"), _authored("c", "Dee")]
    task = TaskConfig(name="author", sources=["acl"], min_shared_authors=2, views=5, max_author_papers=4)
    examples, _ = author_pairs(papers, task, 0)
    assert {(e.query_id, e.positive_id) for e in examples} == {("a", "b"), ("b", "a")}
