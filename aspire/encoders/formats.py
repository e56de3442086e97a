"""Task formats of the contextual sentence encoder (SPECTER2): control codes and adapters.

`TaskFormats` is mixed into `ContextualSentenceEncoder`; it expects `self.model` (the transformer),
`self.tokenizer`, `self.codes` and `self.code`, and `settings()`. The tokens and adapters themselves
are built in `aspire.encoders.codes` and `aspire.encoders.adapters`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from aspire.encoders import adapters
from aspire.encoders.codes import add_control_codes


class TaskFormats:
    """Control codes (`add_codes`, `using_code`) and peft adapters (`add_adapters`, `merged`) of an encoder."""

    codes: list[str]
    code: str | None

    def set_code(self, code: str | None) -> None:
        """Every paper gets `code` from now on (one of `codes`, or None: no code)."""
        self.code = self._checked_code(code)

    def _checked_code(self, code: str | None) -> str | None:
        if code is not None and code not in self.codes:
            raise ValueError(f"control code {code!r} is not one of this encoder's codes {self.codes or '(none)'}")
        return code

    def add_codes(self, codes: Sequence[str], code: str | None) -> None:
        """Add control `codes` to the tokenizer and the embeddings (see `add_control_codes`); every paper
        then gets `code`."""
        add_control_codes(self.model, self.tokenizer, codes)
        self.codes = list(dict.fromkeys([*self.codes, *codes]))
        self.code = self._checked_code(code)

    @contextmanager
    def using_code(self, code: str | None) -> Iterator["TaskFormats"]:
        """Encode with `code` (one of `codes`, or None for no code) inside the block, e.g. a facet's query."""
        saved, self.code = self.code, self._checked_code(code)
        try:
            yield self
        finally:
            self.code = saved

    def add_adapters(self, kind: str, names: Sequence[str], **options) -> None:
        """Wrap the transformer in peft adapters named `names` (base frozen; see `attach_adapters`)."""
        if adapters.is_adapted(self.model):
            raise ValueError("this encoder already has adapters")
        self.model = adapters.attach_adapters(self.model, kind, names, **options)

    def merged(self) -> "TaskFormats":
        """A copy whose transformer has its active adapter folded in: plain `transformers` opens it once saved."""
        if not adapters.is_adapted(self.model):
            raise ValueError("merged(): this encoder has no adapters")
        return type(self)(adapters.merged(self.model), self.tokenizer, name=self.name, **self.settings())
