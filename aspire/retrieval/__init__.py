"""Retrieval stages shared by search and the benchmarks (see docs/architecture.md)."""
