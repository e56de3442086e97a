"""Package exports imported on first use, so that importing a package (and so `aspire COMMAND --help`)
loads no torch, transformers or faiss until a command needs them (PEP 562).

A package's `__init__.py` names what it exports and the module defining each name:

    lazy_exports(__name__, {"SentenceIndex": "aspire.index.store", ...})

`from aspire.index import SentenceIndex` then imports `aspire.index.store` at that moment. Where an export
and a submodule share a name (`aspire.scoring.sinkhorn`: the kernel function, and the module defining it),
the package name means the export, as it did with eager imports: the import system's binding of the
submodule on its package is ignored for that name.

A name the package does not export is an AttributeError, as for any module. An export whose defining module
fails to import, or does not define it, is an error of the package, not a missing name: the defining module's
error (an ImportError, or an AttributeError raised while it imports, as an ImportError chained to it) or an
ImportError naming the package, the export and the module.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


class LazyPackage(ModuleType):
    """A package module whose exports (`_lazy_exports`: name -> defining module) are imported on first use."""

    _lazy_exports: dict[str, str] = {}

    def __getattr__(self, name: str):
        source = self._lazy_exports.get(name)
        if source is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        # An AttributeError out of here reads as "no such export": `from package import name` then said only
        # "cannot import name" (the defining module's own error and traceback lost) and `hasattr` was False.
        # The defining module failing to import, or not defining the name, is an ImportError naming both.
        try:
            module = importlib.import_module(source)
        except AttributeError as err:
            raise ImportError(f"{self.__name__}.{name}: importing {source} (which defines it) failed: "
                              f"AttributeError: {err}", name=source) from err
        try:
            value = getattr(module, name)
        except AttributeError:
            raise ImportError(f"{self.__name__} exports {name!r} from {source}, which does not define it",
                              name=source) from None
        ModuleType.__setattr__(self, name, value)  # later look-ups are plain attribute reads
        return value

    def __setattr__(self, name: str, value) -> None:
        # the import system binds every imported submodule on its package; an export of the same name wins
        if (isinstance(value, ModuleType) and name in self._lazy_exports
                and value.__name__ == f"{self.__name__}.{name}"):
            return  # `__getattr__` resolves the export when it is first read
        ModuleType.__setattr__(self, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._lazy_exports))


def lazy_exports(package: str, exports: dict[str, str]) -> None:
    """Make package `package` (its `__name__`) export each name of `exports` (name -> the module that defines
    it), imported on first use. Its `__all__` should list the same names."""
    module = sys.modules[package]
    module.__class__ = LazyPackage
    ModuleType.__setattr__(module, "_lazy_exports", dict(exports))
