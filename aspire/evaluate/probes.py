"""The runner of the SciRepEval formats on the ACL abstracts: venue classification, year regression,
same-author proximity (`aspire.benchmarks.venue`, `year`, `same_author`; split in `acl_formats`).

Each paper is represented two ways (`REPRESENTATIONS`), both from one contextual pass of the model as loaded
(`encode` over `title [SEP] abstract`, every window; a control-code or adapter model under its own code, or the
one `encoder_options["code"]` names):
- `abstract`: the whole-abstract vector of that pass (`DocBatch.whole`: the mean of every attended word piece);
- `sentences`: the mean of the paper's contextual sentence vectors.

Features go through the vector cache (`aspire.evaluate.cache`), one contextual entry per split and model
fingerprint, so a suite run encodes each paper once (the venue and year tasks share their papers) and a second
run encodes nothing. Probes (scikit-learn, seeded and deterministic): features standardised on the train split;
venue: logistic regression, C chosen by dev macro-F1 from `C_GRID`; year: ridge, α chosen by dev RMSE from
`ALPHA_GRID`; both fit on train only and scored once on test. Same-author: cosine similarity in the pool.
Intervals: percentile bootstrap over test papers (venue, year) or queries (same-author), 2,000 draws, seed 0.
`results.json` keeps each test paper's prediction (or each query's scores) for paired tests
(`compare_probe_results`).
"""

from __future__ import annotations

import errno
import json
import logging
import time
from pathlib import Path

import numpy as np

from aspire.benchmarks.acl_formats import ACL_FILE, SPLIT_FILE, bootstrap_papers, paired_papers_test
from aspire.benchmarks.runs import invocation
from aspire.benchmarks.stats import finite_number, table_row
from aspire.io import read_json, write_json

log = logging.getLogger(__name__)
REPRESENTATIONS = ("abstract", "sentences")
C_GRID = (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 1.0, 10.0)
ALPHA_GRID = (0.1, 1.0, 10.0, 100.0, 1e3, 3e3, 1e4, 3e4, 1e5)
FORMATS = ("venue", "year", "same-author")
METRICS = {"venue": ("macro-F1",), "year": ("Kendall tau", "RMSE (years)"), "same-author": ("MAP", "nDCG@10")}


def acl_index(data_dir: str | Path, split_file: str | Path = SPLIT_FILE, every_paper: bool = False
              ) -> tuple[dict, dict]:
    """({paper id: Paper} of the ACL papers `split_file` names (every split of every task; with `every_paper`,
    every ACL paper) with their abstracts split, {paper id: record metadata} of every ACL paper), from the ACL
    file the split was made from (`check_source`). Only those papers are split (the committed split names 2,030 of
    the file's 59,416 abstracts; splitting all of them took 8 minutes on a first run). `data_dir` is the folder
    `--data` names (the suite's: its ACL subfolder); FileNotFoundError naming `--data` when it holds no ACL file (the
    bare "No such file or directory" of the hashing named neither the option nor the folder it should be). The file
    is parsed once for both (`read_acl` and `read_records` each parsed it: about 1.7 s of 7 to 9 on the real file)."""
    from aspire.benchmarks.acl_formats import check_source, read_records, split_sets
    from aspire.data.acl import read_acl
    from aspire.data.papers import jsonl_objects

    path = Path(data_dir) / ACL_FILE
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, f"No such file (--data {data_dir} should be the ACL folder holding "
                                f"{ACL_FILE})", str(path))
    split = check_source(path, split_file)  # the split, read once
    ids = None if every_paper else {p for part in split_sets(split["splits"]).values() for p in part}
    records = list(jsonl_objects(path))  # a bad line or a damaged .gz: one error naming the file and line
    papers, _ = read_acl(path, frozenset(), 0, ids, records)
    return {p.paper_id: p for p in papers}, {r["paper_id"]: r for r in read_records(path, records)}


def encode_features(encoder, papers, cache_dir=None, batch_size: int = 32) -> dict[str, np.ndarray]:
    """`{representation: (N, D) float32}` of `papers` (module docstring), through the vector cache."""
    import torch

    from aspire.evaluate.encode import encode_papers

    ctx, _ = encode_papers(encoder, papers, "contextual", cache_dir, batch_size)
    if ctx.whole is None:
        raise ValueError("the encoder returned no whole-abstract vectors (DocBatch.whole)")
    with torch.no_grad():
        mask = ctx.mask.float()[..., None]  # (B, S, 1)
        mean = (ctx.emb.float() * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, D)
        return {"abstract": ctx.whole.float().numpy(), "sentences": mean.numpy()}


class Features:
    """A model's features of named paper sets, encoded on first use (one cache entry a set)."""

    def __init__(self, model: str, papers: dict, cache_dir=None, batch_size: int = 32, device: str | None = None,
                 encoder_options: dict | None = None):
        from aspire.encoders import load_encoder

        self.encoder = load_encoder(model, **dict(encoder_options or {}))
        self.loaded = self.encoder.loaded_checkpoint  # a run folder: the checkpoint it loaded, for results.json
        if device:
            self.encoder.to(device)
        self.papers, self.cache_dir, self.batch_size = papers, cache_dir, batch_size
        self.seconds = 0.0

    def of(self, ids: list[str]) -> dict[str, np.ndarray]:
        missing = [p for p in ids if p not in self.papers]
        if missing:
            raise ValueError(f"{len(missing)} split paper(s) are not in the ACL file as valid papers, e.g. {missing[0]}")
        t0 = time.perf_counter()
        out = encode_features(self.encoder, [self.papers[p] for p in ids], self.cache_dir, self.batch_size)
        self.seconds += time.perf_counter() - t0
        return out

    def fingerprint(self) -> str:
        return self.encoder.fingerprint()


def _standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mu, sd = train.mean(0), train.std(0) + 1e-8
    return [(x - mu) / sd for x in (train, *others)]


def venue_probe(X: dict[str, np.ndarray], y: dict[str, np.ndarray], grid=C_GRID, seed: int = 0) -> dict:
    """Logistic regression on `X["train"]`, C chosen by macro-F1 on dev; test predictions. `X`, `y`: by split."""
    from sklearn.linear_model import LogisticRegression

    from aspire.benchmarks.venue import macro_f1

    tr, dv, te = _standardise(X["train"], X["dev"], X["test"])
    dev_scores, fits = {}, {}
    for c in grid:
        fits[c] = LogisticRegression(C=c, max_iter=3000, random_state=seed).fit(tr, y["train"])
        dev_scores[c] = macro_f1(y["dev"], fits[c].predict(dv))
    best = max(grid, key=lambda c: (dev_scores[c], -c))  # ties: the stronger regularisation
    return {"chosen": {"C": best}, "dev": {str(c): s for c, s in dev_scores.items()},
            "pred": fits[best].predict(te)}


def year_probe(X: dict[str, np.ndarray], y: dict[str, np.ndarray], grid=ALPHA_GRID) -> dict:
    """Ridge on `X["train"]`, α chosen by RMSE on dev; test predictions."""
    from sklearn.linear_model import Ridge

    from aspire.benchmarks.year import rmse

    tr, dv, te = _standardise(X["train"], X["dev"], X["test"])
    dev_scores, fits = {}, {}
    for a in grid:
        fits[a] = Ridge(alpha=a).fit(tr, y["train"])
        dev_scores[a] = rmse(y["dev"], fits[a].predict(dv))
    best = min(grid, key=lambda a: (dev_scores[a], -a))
    return {"chosen": {"alpha": best}, "dev": {str(a): s for a, s in dev_scores.items()},
            "pred": fits[best].predict(te)}


def proximity_scores(X: np.ndarray, pool: list[str], qrels: dict) -> dict[str, dict[str, float]]:
    """Per query of `qrels`, MAP and nDCG@10 of its pool (every other paper) ranked by cosine similarity. `X`:
    (P, D), one row per paper of `pool`; ValueError unless every query is a pool paper judged against every other
    one (four rows for a pool of five once ranked four papers, the fifth silently left out of every query's MAP)."""
    from aspire.benchmarks.same_author import average_precision, ndcg_at

    if len(X) != len(pool):
        raise ValueError(f"proximity needs one feature row per pool paper: {len(X)} rows, {len(pool)} pool papers")
    in_pool = set(pool)
    outside = [q for q in qrels if q not in in_pool]
    if outside:
        raise ValueError(f"{len(outside)} same-author query(ies) are not in the pool, e.g. {outside[0]}")
    for q, judged in qrels.items():
        unjudged = [p for p in pool if p != q and p not in judged]
        if unjudged:
            raise ValueError(f"same-author query {q} has no judgment of {len(unjudged)} pool paper(s), e.g. "
                             f"{unjudged[0]}")
    unit = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T  # (P, P)
    where = {p: i for i, p in enumerate(pool)}
    out = {}
    for q, judged in qrels.items():
        i = where[q]
        order = [j for j in np.argsort(-sims[i], kind="stable") if j != i]  # ties: pool order
        relevant = np.array([judged[pool[j]] for j in order])
        out[q] = {"MAP": average_precision(relevant), "nDCG@10": ndcg_at(relevant, 10)}
    return out


def run_format(name: str, data_dir: str | Path, model: str, out: str | Path, cache_dir=None, batch_size: int = 32,
               device: str | None = None, encoder_options: dict | None = None, label_file=None,
               split_file: str | Path = SPLIT_FILE, features: Features | None = None, context: tuple | None = None
               ) -> dict:
    """Score `model` on one format (`FORMATS`) and write `out/results.json`; returns it. `label_file`: a user's
    labels for venue / year (`aspire.benchmarks.acl_formats.read_label_file`)."""
    from aspire.benchmarks.stats import UnitScores

    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid: {list(FORMATS)}")
    if label_file is not None and name == "same-author":
        raise ValueError("same-author takes no label file: its relevance comes from the author lists")
    t0 = time.perf_counter()
    papers, records = context or acl_index(data_dir, split_file)
    if name == "same-author":  # the task's data (and a user's labels) are checked before the model loads
        from aspire.benchmarks.same_author import RULE, load_same_author

        pool, qrels = load_same_author(records, "test", split_file)
    else:
        from aspire.benchmarks.venue import RULE, load_venue_task, macro_f1
        from aspire.benchmarks.year import kendall_tau, load_year_task, rmse

        splits, labels = (load_venue_task if name == "venue" else load_year_task)(records, split_file, label_file)
    feats = features or Features(model, papers, cache_dir, batch_size, device, encoder_options)
    encoded_before = feats.seconds
    # a model loaded by `Features`: for a training run's folder, the checkpoint it loaded (concatenated features name none)
    result: dict = {"format": name, "model": str(model), **getattr(feats, "loaded", {}),
                    "encoder_fingerprint": feats.fingerprint(),
                    "encoder_options": dict(encoder_options or {}),
                    "split_file": str(split_file), "command": invocation(), "representations": {}}
    if name == "same-author":
        X = feats.of(pool)
        result.update(rule=RULE, pool=len(pool), n_queries=len(qrels),
                      relevant_per_query=float(np.mean([sum(j.values()) for j in qrels.values()])))
        for rep in REPRESENTATIONS:
            per_query = proximity_scores(X[rep], pool, qrels)
            rep_out = {"metrics": {}, "ci95": {}, "per_query": per_query}
            for m in METRICS[name]:
                units = UnitScores.means({q: v[m] for q, v in per_query.items()})
                rep_out["metrics"][m], rep_out["ci95"][m] = units.value(), list(units.bootstrap())
            result["representations"][rep] = rep_out
    else:
        X = {s: feats.of(ids) for s, ids in splits.items()}
        y = {s: np.array([labels[p] for p in ids]) for s, ids in splits.items()}
        result.update(sizes={s: len(ids) for s, ids in splits.items()}, label_file=label_file and str(label_file))
        if name == "venue":
            result["rule"] = RULE
        metric_fns = {"macro-F1": macro_f1, "Kendall tau": kendall_tau, "RMSE (years)": rmse}
        for rep in REPRESENTATIONS:
            Xr = {s: X[s][rep] for s in splits}
            probe = venue_probe(Xr, y) if name == "venue" else year_probe(Xr, y)
            pred = probe.pop("pred")
            rep_out = {**probe, "metrics": {}, "ci95": {}, "test_ids": splits["test"],
                       "y": y["test"].tolist(), "pred": pred.tolist()}
            for m in METRICS[name]:
                rep_out["metrics"][m] = metric_fns[m](y["test"], pred)
                rep_out["ci95"][m] = list(bootstrap_papers(metric_fns[m], y["test"], pred))
            result["representations"][rep] = rep_out
    result["seconds"] = {"total": time.perf_counter() - t0, "encoding": feats.seconds - encoded_before}
    out = Path(out)
    write_json(out / "results.json", result, indent=None)
    return result


def check_probe_results(path: str | Path, name: str) -> None:
    """ValueError naming `path` unless it is a results folder (or `results.json`) of format `name`, so that
    `--compare` is refused before a run rather than after it. The file is read as `compare_probe_results` reads it
    (`aspire.io.read_json`: a key twice in one object, or a bare NaN / Infinity, which `write_json` never writes, is
    refused, naming the file and key or constant), and its values are checked as it checks them (`_check_values`: a
    null label, prediction or query score, once refused only after the run) in each representation that holds
    them (`per_query`; or `test_ids`, `y` and `pred`)."""
    p = Path(path)
    file = p / "results.json" if p.is_dir() else p
    if not file.is_file():
        raise ValueError(f"--compare {path}: no readable results.json; it should be a results folder of "
                         f"`aspire evaluate {name}`")
    try:  # plain json.loads once let a repeated key through, which compare_probe_results refused after the run
        doc = read_json(file, "results file", finite=True)
    except ValueError as err:
        raise ValueError(f"--compare {path}: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != name or not isinstance(doc.get("representations"), dict):
        what = (f"format {doc['format']!r}" if isinstance(doc, dict) and "format" in doc else
                f"benchmark {doc['benchmark']!r}" if isinstance(doc, dict) and "benchmark" in doc else
                "another kind of results")
        raise ValueError(f"--compare {path} holds {what}, not the results of `aspire evaluate {name}` "
                         f"(format {name!r}); give a results folder of that format")
    fields = ("per_query",) if name == "same-author" else ("test_ids", "y", "pred")
    held = {rep: x for rep, x in doc["representations"].items()
            if isinstance(x, dict) and all(isinstance(x.get(f), dict if f == "per_query" else list) for f in fields)}
    _check_values({**doc, "representations": held}, f"--compare {path}")


def compare_probe_results(a: str | Path, b: str | Path, n_perm: int = 2000, docs: dict | None = None) -> dict:
    """Paired tests of two `results.json` (folders or files) of one format, per representation and metric.

    ValueError naming the runs when the two do not pair: a file that is not a format's results, another format, a
    split of other sizes (train / dev / test, or the same-author pool, where both record them), a
    representation only one holds, other test papers or queries (same-author) or (venue, year) other test labels (a
    user's label file in one run only); a label, prediction or query score missing or null (`_check_values`: the
    run, paper or query and field named, before any metric). The same test papers listed in another order are
    paired by paper id.
    `docs`: `{a or b: its results.json}` where the caller has read it (`aspire.evaluate.fuse.results_doc`; the
    others are read here)."""
    from aspire.benchmarks.stats import UnitScores, paired_test
    from aspire.benchmarks.venue import macro_f1
    from aspire.benchmarks.year import kendall_tau, rmse

    def read(spec):  # a missing or unreadable file named (a JSONDecodeError named neither run)
        if docs is not None and docs.get(str(spec)) is not None:
            return docs[str(spec)]
        p = Path(spec)
        return read_json(p / "results.json" if p.is_dir() else p, "results file", finite=True)

    ra, rb = read(a), read(b)
    for path, doc in ((a, ra), (b, rb)):  # another benchmark's results.json was a KeyError 'format'
        if not isinstance(doc, dict) or doc.get("format") not in FORMATS or \
                not isinstance(doc.get("representations"), dict):
            raise ValueError(f"{path}: not the results of a SciRepEval format ({', '.join(FORMATS)}): no 'format' "
                             "and 'representations'")
    if ra["format"] != rb["format"]:
        raise ValueError(f"{a} is {ra['format']!r}, {b} is {rb['format']!r}: not one format")
    for key in ("sizes", "pool"):  # other splits: the same test papers, other train / dev papers or pools
        if key in ra and key in rb and ra[key] != rb[key]:
            raise ValueError(f"{a} and {b} come from different splits (split files {ra.get('split_file')} and "
                             f"{rb.get('split_file')}; {key} {ra[key]} and {rb[key]}): a paired comparison needs "
                             "one split")
    fns = {"macro-F1": macro_f1, "Kendall tau": kendall_tau, "RMSE (years)": rmse}
    out = {}
    only = sorted(set(ra["representations"]) ^ set(rb["representations"]))
    if only:
        raise ValueError(f"{a} and {b} do not hold the same representations: {only} only in one of them")
    for path, doc in ((a, ra), (b, rb)):
        _check_values(doc, path)
    for rep, xa in ra["representations"].items():
        xb = rb["representations"][rep]
        for m in METRICS[ra["format"]]:
            if ra["format"] == "same-author":
                only = sorted(set(xa["per_query"]) ^ set(xb["per_query"]))
                if only:  # once paired_test's "same units and groups", naming neither run nor query
                    raise ValueError(f"{a} and {b} score different same-author queries ({rep}): {len(only)} in one "
                                     f"only, e.g. {only[:3]}")
                ua = UnitScores.means({q: v[m] for q, v in xa["per_query"].items()})
                ub = UnitScores.means({q: v[m] for q, v in xb["per_query"].items()})
                out[f"{rep}/{m}"] = paired_test(ua, ub, n_perm=n_perm)
            else:
                yb, pred_b = _in_order_of(xa["test_ids"], xb, a, b, rep)
                if xa["y"] != yb:
                    diff = next(p for p, ya, y in zip(xa["test_ids"], xa["y"], yb) if ya != y)
                    raise ValueError(f"{a} and {b} label the test papers differently (label files "
                                     f"{ra.get('label_file')} and {rb.get('label_file')}; e.g. paper {diff}): "
                                     "a paired comparison needs one set of labels")
                out[f"{rep}/{m}"] = paired_papers_test(fns[m], np.array(xa["y"]), np.array(xa["pred"]),
                                                       np.array(pred_b), n_perm=n_perm)
    return out


def _in_order_of(ids: list, xb: dict, a, b, rep: str) -> tuple[list, list]:
    """(labels, predictions) of run `b`'s representation `xb` in the order of the test papers `ids` (run `a`'s);
    ValueError naming both runs unless `b` holds the same test papers, each once, with one label and prediction
    each (the same papers in another order were once refused as other papers)."""
    ids_b = xb["test_ids"]
    _one_of_each(xb, b, rep)
    if ids_b == ids:
        return xb["y"], xb["pred"]
    if sorted(ids_b) != sorted(ids) or len(set(ids_b)) != len(ids_b):
        raise ValueError(f"{a} and {b} hold different test papers ({rep}): a paired comparison needs the "
                         "same test papers in both results")
    at = {p: i for i, p in enumerate(ids_b)}
    return [xb["y"][at[p]] for p in ids], [xb["pred"][at[p]] for p in ids]


def _check_values(doc: dict, run) -> None:
    """ValueError naming `run`, the representation, the paper (or query) and the field unless each test paper of
    every representation of the results `doc` has one label and one prediction (`_one_of_each`), each a class
    (venue: a string or a number) or a finite number (year), or each same-author query a finite score per metric.
    Checked before any metric: a null year prediction was refused by the metric naming the paper's position alone,
    a null class was numpy's TypeError naming nothing, a null query score named the query but not the run."""
    fmt, recorded = doc["format"], doc.get("non_finite")
    for rep, x in doc["representations"].items():
        if fmt == "same-author":
            for q, scores in x["per_query"].items():
                for m in METRICS[fmt]:
                    value = scores.get(m) if isinstance(scores, dict) else None
                    if not finite_number(value):
                        said = "missing" if not isinstance(scores, dict) or m not in scores else f"{value!r:.40}"
                        raise ValueError(f"{run} ({rep}): the {m} of same-author query {q} is {said}, not a finite "
                                         "number")
            continue
        _one_of_each(x, run, rep)  # run a's own misaligned lists were a bare StopIteration
        for field in ("y", "pred"):
            for i, (pid, value) in enumerate(zip(x["test_ids"], x[field])):
                if not (finite_number(value) if fmt == "year" else isinstance(value, (str, int, float))):
                    why = recorded.get(f"representations.{rep}.{field}.{i}") if isinstance(recorded, dict) else None
                    raise ValueError(f"{run} ({rep}): the {field!r} of test paper {pid} is {value!r:.40}, not "
                                     f"{'a finite number' if fmt == 'year' else 'a class (a string or a number)'}"
                                     + (f" (a {why} the run wrote as null, under non_finite)" if why else ""))


def _one_of_each(x: dict, run, rep: str) -> None:
    """ValueError naming `run` unless its representation `x` holds one label and one prediction per test paper."""
    if not len(x["test_ids"]) == len(x["y"]) == len(x["pred"]):
        raise ValueError(f"{run} holds {len(x['test_ids'])} test papers, {len(x['y'])} labels and {len(x['pred'])} "
                         f"predictions ({rep}): one of each per paper")


def _suite_rows(bench, res: dict, note: str = "") -> list[dict]:
    """One suite row per representation and metric of a `run_format` result."""
    rows = []
    for rep, r in res["representations"].items():
        n = res.get("n_queries") or res.get("sizes", {}).get("test")
        chosen = {"venue": f"C {r.get('chosen', {}).get('C')}", "year": f"alpha {r.get('chosen', {}).get('alpha')}",
                  "same-author": f"pool {res.get('pool')}"}[bench.name]
        for m in bench.metrics:
            rows.append(table_row(f"{bench.title} ({rep})", m, r["metrics"][m], r["ci95"][m], n,
                                  "; ".join(x for x in (chosen, note) if x)))
    return rows


def probe_rows(bench, data: Path, model: str, scorer, out: Path, settings: dict, options=None) -> tuple[list[dict], str]:
    """The suite's runner for the three formats (`aspire.evaluate.suite.RUNNERS`): one row per representation
    and metric; the scorer and the options' encoding and scorer options do not apply (module docstring), their
    cache, batch size, device and encoder options do. The ACL index, and the encoder while the model, device and
    encoder options stay the same, are kept in `settings["_probe_state"]` between the formats of one suite run."""
    from aspire.evaluate.options import EvalOptions

    options = options or EvalOptions()
    cache_dir, batch_size, device, encoder_options = (options.cache_dir, options.batch_size, options.device,
                                                      options.encoder_options)
    state = settings.setdefault("_probe_state", {})
    # the encoder depends on its options and device too: features kept for the model alone were reused after them
    key = (model, device, json.dumps(encoder_options or {}, sort_keys=True, default=str))
    if state.get("key") != key:
        features = Features(model, {}, cache_dir, batch_size, device, encoder_options)  # a bad model fails first
        papers_records = state["context"] if "context" in state else acl_index(data)
        features.papers = papers_records[0]
        state.update(key=key, context=papers_records, features=features)
    res = run_format(bench.name, data, model, out, features=state["features"], context=state["context"],
                     encoder_options=encoder_options)
    return _suite_rows(bench, res), res["encoder_fingerprint"]


class ConcatFeatures:
    """Several models' features side by side: each model's vectors L2-normalised, then concatenated, so a probe
    sees them all and the cosine of two papers is the mean of the models' cosines."""

    def __init__(self, parts: list):
        self.parts = parts

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts)

    def of(self, ids: list[str]) -> dict[str, np.ndarray]:
        each = [p.of(ids) for p in self.parts]
        unit = [{rep: x[rep] / np.maximum(np.linalg.norm(x[rep], axis=1, keepdims=True), 1e-12) for rep in x}
                for x in each]
        return {rep: np.concatenate([u[rep] for u in unit], axis=1) / np.sqrt(len(unit)) for rep in REPRESENTATIONS}

    def fingerprint(self) -> str:
        return "+".join(p.fingerprint() for p in self.parts)


def ensemble_probe_rows(bench, data: Path, members, out: Path, settings: dict, fuse=None) -> list[dict]:
    """The ensemble suite's runner for the formats (`aspire.evaluate.suite.RUNNERS`): the distinct models of the
    members (`aspire.evaluate.options.Member`), their features concatenated (`ConcatFeatures`); scorers, weights
    and the fusion (`fuse`) do not apply to a probe's features. The cache, batch size and device are the first
    member's (the ensemble suite gives every member the same)."""
    first = members[0].options
    models = list(dict.fromkeys(m.model for m in members))
    state = settings.setdefault("_probe_state", {})
    if state.get("models") != models:
        papers, records = acl_index(data)
        state.update(models=models, context=(papers, records), features=ConcatFeatures(
            [Features(m, papers, first.cache_dir, first.batch_size, first.device) for m in models]))
    res = run_format(bench.name, data, "+".join(models), out / bench.name, features=state["features"],
                     context=state["context"])
    return _suite_rows(bench, res, "features of " + ", ".join(models))
