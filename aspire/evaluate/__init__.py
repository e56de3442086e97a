"""Evaluation: pool re-ranking metrics (ranx + NDCG at a pool fraction), the CSFCube benchmark under its
published two-fold protocol, and a general evaluator for ASPIRE-style pool sets.

`aspire evaluate csfcube --model minilm --scorer minl2 --out DIR` — the command is `aspire.cli.evaluate`.
"""

from aspire.lazy import lazy_exports

lazy_exports(__name__, {
    **dict.fromkeys(("check_rankings", "evaluate_rankings", "mean_metrics", "ndcg_at_k", "pool_cutoff"), "aspire.benchmarks.metrics"),
    **dict.fromkeys(("PoolSet", "load_pool_set", "read_ranked", "summarize", "write_ranked"), "aspire.benchmarks.pools"),
})

__all__ = [
    "PoolSet",
    "check_rankings",
    "evaluate_rankings",
    "load_pool_set",
    "mean_metrics",
    "ndcg_at_k",
    "pool_cutoff",
    "read_ranked",
    "summarize",
    "write_ranked",
]
