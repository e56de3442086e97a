"""Task formats of the contextual sentence encoder (SPECTER2): control codes and adapters.

`TaskFormats` is mixed into `ContextualSentenceEncoder`; it expects `self.model` (the transformer),
`self.tokenizer`, `self.codes` and `self.code`, and `settings()`. The tokens and adapters themselves
are built in `aspire.encoders.codes` and `aspire.encoders.adapters`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from aspire.encoders import adapters
from aspire.encoders.codes import add_control_codes, check_code_names


class TaskFormats:
    """Control codes (`add_codes`, `using_code`) and peft adapters (`add_adapters`, `merged`, `query_side`)
    of an encoder."""

    codes: list[str]
    code: str | None
    adapter_scope: str = "all"  # a query adapter (`adapters.ADAPTER_SCOPES`) is on only inside `query_side`
    query_on: bool = False

    def set_code(self, code: str | None) -> None:
        """Every paper gets `code` from now on (one of `codes`, or None: no code)."""
        self.code = self._checked_code(code)

    def _checked_code(self, code: str | None, codes: Sequence[str] | None = None) -> str | None:
        codes = self.codes if codes is None else codes
        if code is not None and code not in codes:
            raise ValueError(f"control code {code!r} is not one of this encoder's codes {list(codes) or '(none)'}")
        return code

    def add_codes(self, codes: Sequence[str], code: str | None) -> None:
        """Add control `codes` to the tokenizer and the embeddings (see `add_control_codes`); every paper
        then gets `code`. A `code` that is none of the codes, or `codes` that are not a list of non-empty strings
        (a bare string would be read as its letters, each added as a special token), is refused before anything is
        added."""
        codes = check_code_names(codes, "add_codes")
        merged = list(dict.fromkeys([*self.codes, *codes]))
        self._checked_code(code, merged)  # checked first: a refused call leaves tokenizer and embeddings as they were
        add_control_codes(self.model, self.tokenizer, codes)
        self.codes, self.code = merged, code

    @contextmanager
    def using_code(self, code: str | None) -> Iterator["TaskFormats"]:
        """Encode with `code` (one of `codes`, or None for no code) inside the block, e.g. a facet's query."""
        saved, self.code = self.code, self._checked_code(code)
        try:
            yield self
        finally:
            self.code = saved

    def add_adapters(self, kind: str, names: Sequence[str], scope: str = "all", **options) -> None:
        """Wrap the transformer in peft adapters named `names` (base frozen; see `attach_adapters`); scope
        `query`: the one adapter `query`, off for papers and on inside `query_side`."""
        if adapters.is_adapted(self.model):
            raise ValueError("this encoder already has adapters")
        if scope not in adapters.ADAPTER_SCOPES:
            raise ValueError(f"unknown adapter scope {scope!r}; valid: {list(adapters.ADAPTER_SCOPES)}")
        if scope == "query" and list(names) != [adapters.QUERY_ADAPTER]:
            raise ValueError(f"a query-scope adapter is one adapter named {adapters.QUERY_ADAPTER!r}, got {list(names)}")
        self.model = adapters.attach_adapters(self.model, kind, names, **options)
        self.use_scope(scope)

    def use_scope(self, scope: str) -> None:
        """Record the adapters' scope; a query adapter starts switched off (papers are encoded without it)."""
        self.adapter_scope, self.query_on = scope, False
        if scope == "query":
            adapters.set_enabled(self.model, False)

    @contextmanager
    def query_side(self) -> Iterator["TaskFormats"]:
        """Encode queries inside the block: a query-scope adapter is switched on there (no other encoder
        changes: its queries and papers share one encoding). Blocks nest: an inner block's end leaves the adapter
        on for the rest of the outer one."""
        if self.adapter_scope != "query" or self.query_on:  # nested: the outermost block switches it off
            yield self
            return
        adapters.set_enabled(self.model, True)
        self.query_on = True
        try:
            yield self
        finally:
            adapters.set_enabled(self.model, False)
            self.query_on = False

    def merged(self) -> "TaskFormats":
        """A copy whose transformer has its active adapter folded in: plain `transformers` opens it once saved."""
        if not adapters.is_adapted(self.model):
            raise ValueError("merged(): this encoder has no adapters")
        if self.adapter_scope == "query":
            raise ValueError("merged(): a query-scope adapter applies to queries only; folded into the weights it "
                             "would change every paper vector (load the model with peft instead)")
        return type(self)(adapters.merged(self.model), self.tokenizer, name=self.name, **self.settings())
