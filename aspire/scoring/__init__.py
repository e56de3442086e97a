"""Scoring two papers' sentence sets: single match (min L2), multi match (Sinkhorn OT), attention,
max over passages (`aspire.scoring.passage`).

Scorers return similarities (higher is better, = -distance); functions returning distances say
`dist`. `SCORERS` maps names to scorer classes; `get_scorer(name, **kwargs)` builds one.
`sinkhorn(cost, a, b, eps)` is the batched entropic OT kernel behind the `"ot"` scorer; `l2_cost` /
`cross_l2_cost` (`aspire.scoring.distance`) are the one distance routine every caller uses.
"""

from aspire.lazy import lazy_exports

# the names of `SCORERS` alone, for command options that load no torch (tests/test_light_commands.py checks them)
SCORER_NAMES = ("minl2", "ot", "attention", "maxpassage", "hybrid")

lazy_exports(__name__, {
    **dict.fromkeys(("cross_l2_cost", "gathered_l2_cost", "l2_cost"), "aspire.scoring.distance"),
    **dict.fromkeys(("MaxPassageScorer", "PassageMatch", "maxpassage_match"), "aspire.scoring.passage"),
    **dict.fromkeys(("SCORERS", "AttentionMatch", "AttentionScorer", "MinL2Match", "MinL2Scorer", "OTMatch", "OTScorer",
        "attention_dist", "attention_match", "gathered_ot_match", "get_scorer", "minl2_dist", "minl2_match", "ot_dist", "ot_match",
        "ot_weights", "pairwise_attention_dist", "pairwise_attention_match", "pairwise_minl2_dist",
        "pairwise_minl2_match", "pairwise_ot_dist", "pairwise_ot_match"), "aspire.scoring.scorers"),
    **dict.fromkeys(("GRAD_MODES", "SinkhornConvergenceWarning", "SinkhornResult", "sinkhorn", "sinkhorn_dist"), "aspire.scoring.sinkhorn"),
})

__all__ = [
    "SCORER_NAMES", "SCORERS", "get_scorer", "MinL2Scorer", "OTScorer", "AttentionScorer", "MaxPassageScorer", "PassageMatch",
    "maxpassage_match",
    "MinL2Match", "OTMatch", "AttentionMatch",
    "l2_cost", "cross_l2_cost", "gathered_l2_cost", "ot_weights",
    "minl2_match", "pairwise_minl2_match", "minl2_dist", "pairwise_minl2_dist",
    "ot_match", "pairwise_ot_match", "gathered_ot_match", "ot_dist", "pairwise_ot_dist",
    "attention_match", "pairwise_attention_match", "attention_dist", "pairwise_attention_dist",
    "sinkhorn", "sinkhorn_dist", "SinkhornResult", "SinkhornConvergenceWarning", "GRAD_MODES",
]
