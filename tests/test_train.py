"""The trainer on a tiny random BERT: loss goes down, resume is exact, checkpoints are atomic."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from aspire.config import ConfigError, load_config
from aspire.train import checkpoint as ckpt
from aspire.train.config import Config, kind_reads
from aspire.train.data import EpochBatchSampler, TripletCollator, load_split
from aspire.train.document_model import KINDS, DocumentModel
from aspire.train.trainer import METRICS, Trainer, build_model, linear_schedule, run

REPO = Path(__file__).resolve().parents[1]
# a random tiny model's sentence distances are far from the paper's scale: Sinkhorn is capped in tests
pytestmark = pytest.mark.filterwarnings("ignore::aspire.scoring.SinkhornConvergenceWarning")
WORDS = ("the model method result data learning neural network language text sentence document "
         "similarity scientific abstract citation aspect task performance approach").split()


def write_examples_dir(root: Path, n_sets: int = 12, seed: int = 0) -> Path:
    """A small examples directory in the `aspire.data.cocite` format, with `cc_align` / `abs_align`."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    papers, sets = [], []
    for s in range(n_sets):
        size = 3 if s % 3 == 0 else 2
        members = [f"p{s}_{k}" for k in range(size)]
        sets.append(members)
        for pid in members:
            sents = [" ".join(rng.choices(WORDS, k=rng.randint(4, 9))) + "." for _ in range(rng.randint(2, 4))]
            papers.append({"paper_id": pid, "title": " ".join(rng.choices(WORDS, k=4)), "abstract": sents})
    n_sents = {p["paper_id"]: len(p["abstract"]) for p in papers}
    (root / "abstracts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    for split, chosen in (("train", sets[: n_sets - 3]), ("dev", sets[n_sets - 3 :])):
        lines = []
        for members in chosen:
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    align = [rng.randrange(n_sents[a]), rng.randrange(n_sents[b])]
                    lines.append({"example_id": f"{a}|{b}", "query_id": a, "positive_id": b,
                                  "negative_ids": [], "set_ids": ["|".join(members)],
                                  "cc_align": align, "abs_align": align[::-1]})
        (root / f"examples.{split}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def tiny_config(model_dir: Path, examples_dir: Path, out_dir: Path, *overrides: str) -> Config:
    base = [
        f"model.encoder={model_dir}", f"data.examples_dir={examples_dir}", f"train.out_dir={out_dir}",
        "train.batch_size=4", "train.lr=1e-3", "train.warmup_steps=2", "train.max_steps=6",
        "train.log_every=1", "train.eval_every=3", "train.save_every=2", "train.progress=false",
        "train.device=cpu", "data.max_sentences=4",
    ]
    cfg = load_config(Config, REPO / "configs" / "base.yaml", base + list(overrides))
    if "ot_max_iter" not in kind_reads(cfg.model.kind):  # a kind without OT refuses the setting: nothing reads it
        return cfg
    return load_config(Config, REPO / "configs" / "base.yaml", [*base, "model.ot_max_iter=100", *overrides])


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / METRICS).read_text().splitlines()]


# ---- configs ------------------------------------------------------------------------------------------
def test_every_paper_config_loads_and_differs_from_base_only_where_needed():
    base = load_config(Config, REPO / "configs" / "base.yaml")
    kinds = {}
    paper_models = [REPO / "configs" / f"{name}.yaml" for name in
                    ("ts_aspire", "ot_aspire", "tsot_aspire", "max_aspire", "att_aspire", "abs_aspire", "specter_cocite")]
    for path in paper_models:
        cfg = load_config(Config, path)
        kinds[cfg.model.kind] = path.name
        assert cfg.train.lr == base.train.lr and cfg.loss == base.loss
        assert len(path.read_text().splitlines()) <= 8, f"{path.name} should only set what differs"
    assert set(kinds) == {"ts", "ot", "ts+ot", "max", "att", "abs", "cocite_vector"}
    def extends_base(path):  # its chain of `base:` files ends at base.yaml
        found = re.search(r"^base: (\S+)$", path.read_text(), re.M)
        return bool(found) and (found[1] == "base.yaml" or extends_base(path.parent / found[1]))

    trainers = [path for path in (REPO / "configs").glob("*.yaml") if extends_base(path)]
    assert {"multitask_codes.yaml", "contrastive_negatives.yaml"} <= {path.name for path in trainers}
    for path in trainers:
        load_config(Config, path)


def test_unknown_keys_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="bogus"):
        load_config(Config, REPO / "configs" / "ts_aspire.yaml", ["train.bogus=1"])
    from aspire.train.__main__ import main

    with pytest.raises(SystemExit):
        main(["--config", str(REPO / "configs" / "ts_aspire.yaml"), "--model.kindd=ot"])


# ---- data ---------------------------------------------------------------------------------------------
def test_sampler_shards_are_disjoint_and_resumable():
    full = [i for b in EpochBatchSampler(50, 4, seed=3, epoch=1) for i in b]
    assert len(full) == 48 and len(set(full)) == 48
    shards = [list(EpochBatchSampler(50, 4, 3, 1, rank=r, world_size=2)) for r in range(2)]
    flat = [i for s in shards for b in s for i in b]
    assert len(flat) == len(set(flat)) == 48
    assert list(EpochBatchSampler(50, 4, 3, 1, start=5)) == list(EpochBatchSampler(50, 4, 3, 1))[5:]
    assert list(EpochBatchSampler(50, 4, 3, 2)) != list(EpochBatchSampler(50, 4, 3, 1))


def test_collate_marks_own_set_and_alignment(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector")
    data = load_split(cfg.data, "train")
    assert len(data) == 2 * sum(1 for _ in open(examples_dir / "examples.train.jsonl"))  # both directions
    model = build_model(cfg)
    collate = TripletCollator(model.tokenize, data.papers)
    batch = collate([data[i] for i in range(4)])
    names = sorted(data.papers)
    for b in range(4):
        own = {names[i] for i in batch.group_ids[b].tolist() if i >= 0}
        assert set(data[b].members) == own and data[b].query_id in own
        assert names[batch.pos_ids[b]] == data[b].positive_id
    assert batch.align[0].tolist() == list(data[0].align)
    assert batch.align[1].tolist() == list(data[0].align)[::-1]  # the reversed direction


def test_linear_schedule_shape():
    f = linear_schedule(warmup=4, total=10)
    assert [round(f(s), 3) for s in (0, 3, 4, 7, 10)] == [0.2, 0.8, 1.0, 0.5, 0.0]  # the peak once, at update 4


# ---- training -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_loss_decreases_on_repeated_batch(kind, tiny_model_dir, examples_dir, tmp_path):
    align = "abs_align" if kind == "abs" else "cc_align"
    # a cosine of normalised vectors moves little against a margin of 1: the cosine kinds train with MNRL
    cosine = kind in ("abstract", "hybrid")
    loss = "loss.kind=mnrl" if cosine else "loss.kind=triplet"
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, f"model.kind={kind}", f"data.align={align}", loss)
    model = build_model(cfg)
    model.train()
    data = load_split(cfg.data, "train")
    spread = [data[i] for i in range(0, len(data), 3)][:8]  # pairs from several co-cited sets
    batch = TripletCollator(model.tokenize, data.papers)(spread)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    torch.manual_seed(0)
    for _ in range(8):
        out = model(batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        losses.append(out["loss"].item())
    assert losses[0] > 0
    # mean-pooled whole texts of a random tiny model start nearly alike: a slower (but steady) descent
    assert losses[-1] < (0.9 if cosine else 0.75) * losses[0], losses


def test_run_writes_checkpoints_metrics_and_best(tiny_model_dir, examples_dir, tmp_path):
    out = tmp_path / "run"
    result = run(tiny_config(tiny_model_dir, examples_dir, out, "model.kind=cocite_vector"))
    assert result["step"] == 6
    latest = ckpt.read_pointer(out)
    assert latest["checkpoint"] == "checkpoint-000006"
    best = ckpt.read_pointer(out, ckpt.BEST)
    assert best["step"] in (3, 6)
    metrics = read_metrics(out)
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3, 4, 5, 6]
    # warm-up over 2 steps, the peak at update 2, then linear decay to 0 at step 6: the rate each update used
    assert [round(m["lr"] / 1e-3, 4) for m in metrics if "loss" in m] == [0.3333, 0.6667, 1.0, 0.75, 0.5, 0.25]
    assert [m["step"] for m in metrics if "dev_loss" in m] == [3, 6]
    assert min(m["dev_loss"] for m in metrics if "dev_loss" in m) == pytest.approx(best["dev_loss"])
    from transformers import AutoModel

    AutoModel.from_pretrained(out / latest["checkpoint"] / "model")  # plain HF opens it
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    assert len(kept) <= 3 and "checkpoint-000006" in kept
    # the run folder stands for its best checkpoint's model wherever a --model is taken
    from aspire.encoders.pretrained import resolve_model

    assert resolve_model(out) == out / best["checkpoint"] / "model"


def test_an_encoding_of_a_run_folder_records_its_checkpoint_so_training_on_changes_nothing(tmp_path, tiny_model_dir,
                                                                                            monkeypatch):
    import shutil

    from aspire.cli.encode import main as encode_main
    from aspire.encoders.pretrained import pinned_model
    from aspire.index.corpus import EncodedCorpus

    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "checkpoint-000001" / "model")
    ckpt.write_pointer(run, ckpt.BEST, {"checkpoint": "checkpoint-000001", "step": 1, "dev_loss": 0.5})
    corpus = tmp_path / "papers.jsonl"
    corpus.write_text(json.dumps({"paper_id": "p", "title": "A title", "abstract": ["One sentence.", "Two."]}) + "\n")
    assert encode_main(["--model", str(run), "--corpus", str(corpus), "--out", str(tmp_path / "v"), "-q"]) == 0
    assert EncodedCorpus.load_shard(tmp_path / "v")[1]["model_name"] == str(run / "checkpoint-000001" / "model")
    monkeypatch.chdir(tmp_path)  # a relative folder is recorded absolute: the record loads from anywhere
    assert pinned_model("run") == str(run / "checkpoint-000001" / "model")
    from aspire.index import SentenceIndex
    from aspire.index.__main__ import main as index_main

    assert index_main(["build", "--model", str(run), "--corpus", str(corpus), "--out", str(tmp_path / "i"),
                       "--backend", "torch", "index.kind=flat", "-q"]) == 0
    assert SentenceIndex.load(tmp_path / "i").model_name == str(run / "checkpoint-000001" / "model")
    assert pinned_model("minilm") == "minilm" and pinned_model(str(tiny_model_dir)) == str(tiny_model_dir)


def test_a_run_folder_is_its_best_model_else_its_latest(tmp_path):
    from aspire.encoders.pretrained import resolve_model
    from aspire.paths import run_model

    out = tmp_path / "run"
    for step in (2, 4):
        (out / f"checkpoint-00000{step}" / "model").mkdir(parents=True)
        (out / f"checkpoint-00000{step}" / "model" / "config.json").write_text("{}")
    assert run_model(out) is None and run_model(tmp_path) is None  # no pointer yet: not a run's model
    ckpt.write_pointer(out, ckpt.LATEST, {"checkpoint": "checkpoint-000004", "step": 4})
    assert run_model(out) == out / "checkpoint-000004" / "model"
    ckpt.write_pointer(out, ckpt.BEST, {"checkpoint": "checkpoint-000002", "step": 2, "dev_loss": 0.5})
    assert run_model(out) == resolve_model(str(out)) == out / "checkpoint-000002" / "model"
    for record, message in (({"checkpoint": "checkpoint-000009"}, "names 'checkpoint-000009', which holds no "
                                                                   "model/config.json"),
                            ({"checkpoint": "../checkpoint-000002"}, "names '../checkpoint-000002'"),
                            ({"step": 2}, "not a training run's pointer")):
        ckpt.write_pointer(out, ckpt.BEST, record)
        with pytest.raises(ValueError, match=re.escape(message)):
            resolve_model(out)
    with pytest.raises(ValueError, match="or a training run's folder"):
        resolve_model(tmp_path)


def test_dev_before_logs_the_starting_dev_loss_and_leaves_training_alone(tiny_model_dir, examples_dir, tmp_path):
    plain = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", "model.kind=cocite_vector"))
    with_ref = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", "model.kind=cocite_vector",
                               "train.dev_before=true"))
    assert with_ref["weights_digest"] == plain["weights_digest"]
    dev = [m for m in read_metrics(tmp_path / "b") if "dev_loss" in m]
    assert [m["step"] for m in dev] == [0, 3, 6]
    assert dev[1:] == [m for m in read_metrics(tmp_path / "a") if "dev_loss" in m]
    assert not (tmp_path / "b" / "checkpoint-000000").exists()
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "c", "model.kind=cocite_vector")
    untouched = Trainer(cfg, build_model(cfg), load_split(cfg.data, "train"), load_split(cfg.data, "dev"))
    assert dev[0]["dev_loss"] == pytest.approx(untouched.dev_loss())


def test_building_a_trainer_changes_no_process_wide_state(tiny_model_dir, examples_dir, tmp_path, monkeypatch):
    import random

    import numpy as np

    from aspire.train.trainer import process_ranks

    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "t", "model.kind=cocite_vector", "train.seed=5")
    model, train, dev = build_model(cfg), load_split(cfg.data, "train"), load_split(cfg.data, "dev")
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    Trainer(cfg, model, train, dev)  # no seeding: the entry point (`run`) seeds a fresh run
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert (np.random.get_state()[1] == before[2]).all()
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under torchrun, with no process group started
    with pytest.raises(RuntimeError, match="no process group is started: call .*init_distributed"):
        Trainer(cfg, model, train, dev)
    with pytest.raises(RuntimeError, match="no process group"):
        process_ranks()


def test_dev_loss_uses_the_same_dev_batches_whatever_the_training_seed(tiny_model_dir, examples_dir, tmp_path):
    losses = []
    for seed in (0, 1, 7):
        cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / str(seed), "model.kind=ts",
                          f"train.seed={seed}", "data.dev_batches=1")
        trainer = Trainer(cfg, build_model(cfg), load_split(cfg.data, "train"), load_split(cfg.data, "dev"))
        losses.append(trainer.dev_loss())
    assert losses[0] > 0
    assert losses == pytest.approx([losses[0]] * 3, rel=1e-6)


def test_resume_gives_the_same_weights(tiny_model_dir, examples_dir, tmp_path):
    straight = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "a", "model.kind=cocite_vector"))
    part = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", "model.kind=cocite_vector",
                           "train.stop_after=4"))
    assert part["step"] == 4 and part["weights_digest"] != straight["weights_digest"]
    resumed = run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", "model.kind=cocite_vector"), resume=True)
    assert resumed["step"] == 6
    assert resumed["weights_digest"] == straight["weights_digest"]
    losses = lambda d: [m["loss"] for m in read_metrics(d) if "loss" in m]  # noqa: E731
    assert losses(tmp_path / "b") == losses(tmp_path / "a")
    with pytest.raises(ValueError, match="train.batch_size: 4 -> 2"):
        run(tiny_config(tiny_model_dir, examples_dir, tmp_path / "b", "model.kind=cocite_vector",
                        "train.batch_size=2", "train.max_steps=9"), resume=True)


def test_fresh_run_refuses_existing_checkpoints_and_resume_needs_one(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path / "c", "model.kind=cocite_vector", "train.max_steps=2")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        run(cfg, resume=True)
    run(cfg)
    with pytest.raises(FileExistsError):
        run(cfg)


def test_half_written_checkpoint_is_never_read(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    ckpt.save_checkpoint(out, 2, lambda p: (p / "model").mkdir(), {"step": 2})

    def crash(path: Path) -> None:
        (path / "model").mkdir()
        raise KeyboardInterrupt  # killed while writing checkpoint 4

    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(out, 4, crash, {"step": 4})
    assert ckpt.read_pointer(out)["checkpoint"] == "checkpoint-000002"
    assert ckpt.load_state(out / "checkpoint-000002")["step"] == 2
    assert not (out / "checkpoint-000004").exists()
    ckpt.clean_temp(out)
    assert [p.name for p in out.iterdir() if p.name.startswith(".tmp")] == []


def test_saved_model_encodes_and_scores_like_the_trained_one(tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=ts+ot")
    model = build_model(cfg)
    data = load_split(cfg.data, "train")
    papers = [data.papers[p] for p in sorted(data.papers)[:5]]
    model.save_pretrained(tmp_path / "saved")
    loaded = DocumentModel.from_pretrained(tmp_path / "saved")
    assert loaded.inference_name == "ot" and loaded.model_cfg == model.model_cfg
    a, b = model.encode(papers), loaded.encode(papers)
    assert torch.equal(a.emb, b.emb) and torch.equal(a.mask, b.mask)
    assert a.mask.sum(1).tolist() == [len(p.sentences) for p in papers]
    sim = loaded.score(a, a)  # (5, 5) similarity: a paper is closest to itself
    assert sim.shape == (5, 5)
    assert torch.equal(sim.argmax(dim=1), torch.arange(5))


def test_hard_negatives_from_file_join_the_loss(tiny_model_dir, examples_dir, tmp_path):
    hard = tmp_path / "hard.jsonl"
    names = sorted(json.loads(x)["paper_id"] for x in open(examples_dir / "abstracts.jsonl"))
    hard.write_text("".join(json.dumps({"paper_id": n, "negatives": [names[0], names[-1]]}) + "\n" for n in names))
    # names[-1] is a dev paper, passed over where a dev loss is taken (tests/test_train_dev_negatives.py)
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=max", f"data.hard_negatives={hard}",
                      "data.use_dev=false")
    data = load_split(cfg.data, "train")
    for e in data.examples:
        assert e.negative is not None and e.negative not in e.members
        assert e.negative == (names[0] if names[0] not in e.members else names[-1])
    model = build_model(cfg)
    batch = TripletCollator(model.tokenize, data.papers)([data[i] for i in range(4)])
    assert batch.hard_rows.tolist() == [0, 1, 2, 3]
    # the first four examples share one co-cited set: only the hard negatives give them a loss
    assert int(model(batch)["triples"]) == 4
    plain = load_split(tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=max").data, "train")
    no_hard = TripletCollator(model.tokenize, plain.papers)([plain[i] for i in range(4)])
    assert int(model(no_hard)["triples"]) == 0


@pytest.mark.parametrize("negatives", ["all", "one"])
def test_model_loss_matches_a_hand_computation(negatives, tiny_model_dir, examples_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, examples_dir, tmp_path, "model.kind=cocite_vector", f"loss.negatives={negatives}")
    model = build_model(cfg).eval()
    data = load_split(cfg.data, "train")
    examples = [data[i] for i in range(0, 12)]  # the first sets: several anchors share a set (masked out)
    batch = TripletCollator(model.tokenize, data.papers)(examples)
    with torch.no_grad():
        out = model(batch)
        docs = model.embed(batch.inputs)
    B = len(examples)
    a, p = docs.emb[:B, 0], docs.emb[B : 2 * B, 0]
    dist = torch.cdist(a, p)
    per_anchor = []
    for i, e in enumerate(examples):
        allowed = [j for j in range(B) if examples[j].positive_id not in e.members]
        if negatives == "one":
            after = [(i + k) % B for k in range(1, B + 1)]
            allowed = [j for j in after if j in allowed][:1]
        if allowed:
            per_anchor.append(torch.stack([torch.relu(dist[i, i] - dist[i, j] + 1.0) for j in allowed]).mean())
    assert int(out["triples"]) == len(per_anchor) == B
    assert out["loss"].item() == pytest.approx(torch.stack(per_anchor).mean().item(), rel=1e-5)
