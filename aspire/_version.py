"""The package version, in a module of its own so that submodules can read it without importing `aspire`."""

__version__ = "0.1.0"
