"""Control codes (SPECTER2's task formats): a special token naming a task or a facet, prepended to the input.

A code is one added special token (`[COCITE]`, `[METHOD]`, …) placed right after the tokenizer's first
special token: `[CLS] [CODE] title [SEP] abstract [SEP]`. It is inserted into the token ids after
tokenisation (`with_code`), so no word piece moves to another sentence: the code's position has sentence
index -1 and is never pooled into a sentence vector, and the tokenizer is asked for one piece fewer so
the window still fits the model.

Two kinds of codes (`codes_for`):
- task codes, `[TASK]` per training task (`[COCITE]` for the co-citation triples): every paper of a
  task is encoded with its code, and at inference every paper gets the first task's code;
- facet codes, `[BACKGROUND]` `[METHOD]` `[RESULT]` for queries asked about one facet, and `[DOC]` for
  everything else (training papers and search candidates): an aspect-conditional query is encoded
  with its facet's code (`query_code`), its candidates with `[DOC]`.

A new code's embedding starts as the mean embedding of the word pieces of its name (`[METHOD]` from
"method", `[COCITE]` from "cocite"), not at random, so an untrained code already points at its word.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Sequence

import torch
from torch import Tensor, nn

from aspire.data.facets import FACET_CODE_CHOICES, FACETS, facet_of  # noqa: F401  (FACET_CODE_CHOICES: read from here too)
from aspire.encoders.inputs import EncoderInputs

CODE_MODES = ("none", "task", "facet")
DOC_CODE = "[DOC]"


def code_token(name: str) -> str:
    """The code of a task or facet name: `method` -> `[METHOD]`."""
    return f"[{name.upper()}]"


def codes_for(mode: str, tasks: Sequence[str]) -> tuple[list[str], str | None]:
    """(the codes to add, the code every paper gets by default) for a `model.control_codes` mode."""
    if mode not in CODE_MODES:
        raise ValueError(f"unknown control-code mode {mode!r}; valid: {list(CODE_MODES)}")
    if mode == "none":
        return [], None
    if mode == "task":
        if not tasks:
            raise ValueError("task control codes need at least one task name")
        return [code_token(t) for t in tasks], code_token(tasks[0])
    return [*(code_token(f) for f in FACETS), DOC_CODE], DOC_CODE


def check_code_names(codes, where: str) -> list[str]:
    """`codes` as a list, or ValueError naming `where` unless they are a sequence (list, tuple) of non-empty strings:
    a bare string was read as its letters (each a code), and None (`"codes": null` in a settings file) was a
    TypeError naming nothing."""
    if isinstance(codes, str) or not isinstance(codes, Sequence) or not all(isinstance(c, str) and c for c in codes):
        raise ValueError(f"{where}: codes must be a list of non-empty strings, got {codes!r}")
    return list(codes)


def code_id(tokenizer, code: str) -> int:
    """The vocabulary id of `code`; ValueError when the tokenizer does not hold it as one token."""
    idx = tokenizer.convert_tokens_to_ids(code)
    if idx is None or idx == tokenizer.unk_token_id:
        raise ValueError(f"control code {code!r} is not in the tokenizer's vocabulary (add it with add_codes)")
    return idx


def split_code_text(tokenizer) -> None:
    """Make `tokenizer` read special-token text inside a paper's text as plain text (`split_special_tokens`): else
    a paper whose text holds "[METHOD]" got the code's id there, so plain text switched a code on (or put a second
    one in). Codes stay one token: `with_code` inserts their ids. Set on the object only, by `add_control_codes`
    and by every encoder holding codes (`ContextualSentenceEncoder`): the saved tokenizer files are unchanged, so
    plain transformers still reads a typed "[METHOD]" as the code, the way a user of an exported model asks for it."""
    tokenizer.split_special_tokens = True


@torch.no_grad()
def add_control_codes(model: nn.Module, tokenizer, codes: Sequence[str]) -> list[str]:
    """Add `codes` as special tokens, resize `model`'s embeddings, and start each new code's embedding at
    the mean embedding of its name's word pieces. Returns the codes that were new. The tokenizer then reads a
    code's text inside a paper as plain text (`split_code_text`). A code whose name has no word piece (`[]`,
    `[ ]`: no task or facet code, whose names are words) starts at the mean of the whole old embedding table
    instead, with a UserWarning naming it."""
    split_code_text(tokenizer)
    new = [c for c in dict.fromkeys(codes) if tokenizer.convert_tokens_to_ids(c) in (None, tokenizer.unk_token_id)]
    if not new:
        return []
    tokenizer.add_tokens(new, special_tokens=True)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    table = model.get_input_embeddings().weight  # (V, D)
    for code in new:
        pieces = tokenizer(code.strip("[]").lower(), add_special_tokens=False)["input_ids"]
        if not pieces:  # kept (a caller's test starts such a code here), but said: it points at no word
            warnings.warn(f"control code {code!r} has no word piece in its name: its embedding starts at the mean "
                          "of the whole old embedding table", UserWarning, stacklevel=3)
        table[code_id(tokenizer, code)] = table[pieces].mean(0) if pieces else table[: -len(new)].mean(0)
    return new


def insert_after_first(t: Tensor, value: int | Tensor) -> Tensor:
    """(R, T) -> (R, T + 1) with `value` (one for all rows, or (R,) one a row) in column 1, after each
    row's first token."""
    column = t.new_full((t.shape[0], 1), value) if isinstance(value, int) else value.to(t)[:, None]
    return torch.cat([t[:, :1], column, t[:, 1:]], dim=1)


def check_first_special(input_ids: Tensor, tokenizer) -> None:
    """Every row must start with the tokenizer's first special token (CLS / BOS): the code goes after it."""
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    if first is None or not bool((input_ids[:, 0] == first).all()):
        raise ValueError("control codes need inputs that start with the tokenizer's [CLS]/<s> token "
                         f"(padding side {tokenizer.padding_side!r})")


def _code_ids(tokenizer, code: str | Sequence[str], rows: Tensor | None, n_papers: int) -> int | Tensor:
    """One code's id, or (R,) the ids of per-paper codes, one for each of `n_papers` papers (ValueError for
    another count), for rows that belong to papers `rows` (None: row i is paper i), on `rows`' device."""
    if isinstance(code, str):
        return code_id(tokenizer, code)
    if len(code) != n_papers:  # else extra codes were dropped unsaid, and too few an IndexError
        raise ValueError(f"{len(code)} control codes for {n_papers} papers (one code a paper)")
    ids = torch.tensor([code_id(tokenizer, c) for c in code], dtype=torch.long,
                       device=None if rows is None else rows.device)  # (papers,)
    return ids if rows is None else ids[rows]


def with_code(inputs: EncoderInputs, tokenizer, code: str | Sequence[str]) -> EncoderInputs:
    """`inputs` with `code` (one for every paper, or one a paper) after the first token of every row:
    attention 1, segment 0, sentence -1 (not pooled)."""
    check_first_special(inputs.input_ids, tokenizer)
    types = None if inputs.token_type_ids is None else insert_after_first(inputs.token_type_ids, 0)
    return replace(
        inputs,
        input_ids=insert_after_first(inputs.input_ids, _code_ids(tokenizer, code, inputs.row_paper, len(inputs.n_sentences))),
        attention_mask=insert_after_first(inputs.attention_mask, 1),
        sent_index=insert_after_first(inputs.sent_index, -1),
        token_type_ids=types,
    )


def encoding_with_code(enc: dict, tokenizer, code: str | Sequence[str]) -> dict:
    """A tokenizer's tensor output (`input_ids`, `attention_mask`[, `token_type_ids`]), one row a text, with
    `code` (one for every row, or one a row) inserted."""
    check_first_special(enc["input_ids"], tokenizer)
    fill = {"input_ids": _code_ids(tokenizer, code, None, len(enc["input_ids"])), "attention_mask": 1, "token_type_ids": 0}
    return {k: insert_after_first(v, fill[k]) for k, v in enc.items()}


def query_code(codes: Sequence[str], choice: str, facet: str) -> str | None:
    """The code a query asked about `facet` gets, or None (the same code as every other paper).

    `choice`: `auto` (the facet's code when the model has facet codes, else None), `none`, or a facet
    name (that facet's code for every query; ValueError when the model lacks it). `facet` may be a stored label
    (`objective_label`, `method`: `facet_of`), read as its facet, as the selection read it."""
    if choice not in FACET_CODE_CHOICES:
        raise ValueError(f"unknown facet code {choice!r}; valid: {list(FACET_CODE_CHOICES)}")
    facet = facet_of(facet) or facet  # "objective" is CSFCube's background: once no code, unsaid
    if choice == "none" or (choice == "auto" and (not facet or code_token(facet) not in codes)):
        return None
    code = code_token(facet if choice == "auto" else choice)
    if code not in codes:
        raise ValueError(f"facet code {code} asked for, but the model's control codes are {list(codes) or 'none'}")
    return code
