"""aspire: fine-grained scientific document similarity by matching contextual sentence vectors.

A paper's title and abstract become a set of contextual sentence vectors (`DocBatch`); papers are
compared by a single match (minimum L2 over sentence pairs) or a multi match (entropy-regularised
optimal transport between the two sentence sets).
"""

from aspire._version import __version__
from aspire.batch import DocBatch

__all__ = ["DocBatch", "__version__"]
