"""Training losses and the in-batch negative bookkeeping.

`triplet` holds the triplet margin loss over distances (lower = closer) and the helpers every loss
shares; the in-batch ranking losses, which take a similarity matrix, are one module each:
`ranking` (multiple-negatives ranking / InfoNCE, optionally symmetric), `multi_similarity`,
`bce` (binary cross-entropy on labelled pairs). `MATRIX_LOSSES` (`registry`) names them for the trainer.
Every name below is imported on first use, so this package loads no torch until a loss is asked for.

Sign convention: scorers return similarities (higher is better, `sim = -dist`); the matrix losses take
similarities, and every function that takes or returns *distances* says `dist` in its name. The triplet margin loss is
`max(0, d(a, p) - d(a, n) + margin)`: it is zero once the negative is `margin` farther than
the positive, and it pushes the positive closer otherwise.
"""

from aspire.lazy import lazy_exports

# loss.kind -> the keys of the `loss` config section it reads: the triplet margin loss over distances, or a matrix
# loss of `MATRIX_LOSSES` (aspire.losses.registry; its class's SETTINGS name the same keys). The names alone live
# here, so the training config (and `aspire train --help`) loads no torch.
LOSS_KEYS: dict[str, tuple[str, ...]] = {
    "triplet": ("margin", "negatives"),
    "mnrl": ("scale", "symmetric", "teacher_scale", "term_scale"),
    "multi_similarity": ("ms_alpha", "ms_beta", "ms_base"),
    "bce": ("scale", "bce_threshold"),
}
LOSS_KINDS = tuple(LOSS_KEYS)

lazy_exports(__name__, {
    **dict.fromkeys(("triplet_margin_dist_per_anchor", "masked_anchor_mean", "triplet_margin_dist_loss",
                     "in_batch_negative_mask", "pick_one_negative", "aligned_sentence_dist", "mean_pool_doc",
                     "vector_l2_dist", "pairwise_vector_l2_dist"), "aspire.losses.triplet"),
    **dict.fromkeys(("MATRIX_LOSSES", "matrix_loss"), "aspire.losses.registry"),
})

__all__ = ["LOSS_KEYS", "LOSS_KINDS", "MATRIX_LOSSES", "matrix_loss", "triplet_margin_dist_per_anchor", "masked_anchor_mean",
           "triplet_margin_dist_loss", "in_batch_negative_mask", "pick_one_negative", "aligned_sentence_dist",
           "mean_pool_doc", "vector_l2_dist", "pairwise_vector_l2_dist"]
