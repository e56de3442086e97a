"""Data in: papers from JSONL (`papers`), sentence splitting (`sentences`), co-citation training data
(`cocite`, `s2orc`, `align`).

`Paper` is re-exported lazily, so `python -m aspire.data.papers` does not find its own module already
imported when it starts (runpy warns of that).
"""

__all__ = ["Paper"]


def __getattr__(name: str):
    if name == "Paper":
        from aspire.data.papers import Paper

        return Paper
    raise AttributeError(f"module 'aspire.data' has no attribute {name!r}")
