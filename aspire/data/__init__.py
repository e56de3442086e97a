"""Data in: papers from JSONL (`papers`), sentence splitting (`sentences`), co-citation training data."""

from aspire.data.papers import Paper

__all__ = ["Paper"]
