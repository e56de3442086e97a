"""The layer order of the package, stated once (docs/architecture.md draws it; tests/test_layers.py enforces it).

Lowest first. A module may import modules of its own layer and of layers listed before it, never after:
so data never reaches into benchmarks, evaluation or the commands, and a benchmark number can come only
from the same retrieval code that search runs. Every import counts, those inside functions included.
`__main__` modules are entry points, not part of their package's layer: they hand over to the command
layer by module name (`runpy`), so they tie no low package to a high one.
"""

LAYERS: tuple[tuple[str, ...], ...] = (
    # base: files, paths, configs, the tensor type, command-line helpers (stdlib, numpy, torch only)
    ("aspire", "aspire._version", "aspire.jsonsafe", "aspire.checksum", "aspire.paths", "aspire.io",
     "aspire.storage", "aspire.cliutil", "aspire.config", "aspire.batch", "aspire.layers", "aspire.lazy",
     "aspire.text"),
    ("aspire.data",),        # papers, sentences, facets, ACL sample, co-citation mining, negatives
    ("aspire.benchmarks",),  # what a benchmark is: queries, pools, qrels, folds, official metrics, held-out papers
    ("aspire.encoders",),    # contextual encoder, CoSentBert, inference backends
    ("aspire.scoring",),     # min-L2, Sinkhorn OT, attention, BM25 index, fusion, cross-encoder scores
    ("aspire.losses",),      # one loss a file
    ("aspire.retrieval",),   # stages shared by search and the benchmarks
    ("aspire.index",),       # the faiss sentence store
    ("aspire.search",),      # the searcher over an index
    ("aspire.evaluate",),    # runners, suite, compare, ensembles
    ("aspire.train",),       # trainer, tasks, teacher, soups
    ("aspire.viz", "aspire.serve", "aspire.demo"),  # plots, the page, the demo
    ("aspire.cli",),         # one module a command; the `aspire` entry point
)


def layer_of(module: str) -> int:
    """The index in `LAYERS` of `module` (a dotted name under `aspire`); ValueError if no layer names it."""
    if module.endswith(".__main__"):
        return len(LAYERS) - 1  # entry points sit with the commands
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best and name != "aspire":
                best, found = len(name), i
    if found is None and module == "aspire":
        return 0
    if found is None:
        raise ValueError(f"module {module!r} is in no layer of aspire.layers.LAYERS; add it there")
    return found
