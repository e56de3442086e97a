"""aspire: fine-grained scientific document similarity by matching contextual sentence vectors.

A paper's title and abstract become a set of contextual sentence vectors (`DocBatch`); papers are
compared by a single match (minimum L2 over sentence pairs) or a multi match (entropy-regularised
optimal transport between the two sentence sets).
"""

from aspire._version import __version__

__all__ = ["DocBatch", "__version__"]


def __getattr__(name: str):
    """`aspire.DocBatch`, imported on first use: `import aspire` (and so `aspire --help`) loads no torch."""
    if name == "DocBatch":
        from aspire.batch import DocBatch

        return DocBatch
    raise AttributeError(f"module 'aspire' has no attribute {name!r}")
