"""Contextual sentence encoder: one transformer pass over `title [SEP] s_1 … s_n`, word pieces mean-pooled
per sentence.

The title and the abstract go in as a text pair, so the tokenizer adds its own special tokens (`[CLS] title
[SEP] abstract [SEP]` for BERT, `<s> title </s></s> abstract </s>` for MPNet). Which word piece belongs to
which sentence comes from the tokenizer's character offsets, so any fast tokenizer works.

Long abstracts: the pair is cut at `max_length` tokens (default: the model's limit). With
`overflow="window"` (default) the rest of the abstract is encoded in further windows, each again preceded
by the title, so every sentence gets a vector (a sentence split by a window's end is pooled over its pieces
in every window it reaches, a title that is sentence 0 over its copies in every window; an approximation of
one long pass, whose context the windows lack); with `overflow="truncate"` sentences past the limit are left
out of the mask. Either way `truncation_report` lists, per paper, every sentence that did not fit in the
first window, and `encode` logs a warning naming those papers: no sentence is lost silently. The one-vector
encodings (`embed_texts`, `encode_abstract`, `encode_independent`) cut each text at `max_length` (no windows)
and log one warning a call naming the texts they cut.

Task formats (SPECTER2): an encoder may carry control codes (`codes`, special tokens of its tokenizer;
`code` is the one every paper gets, switched per query with `using_code`; see `aspire.encoders.codes`)
and peft adapters on its transformer (`aspire.encoders.adapters`); both are saved with the model.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np
import tokenizers
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from aspire.batch import DocBatch
from aspire.config import is_whole, position_limit
from aspire.data.papers import Paper, abstract_text, as_papers
from aspire.encoders import adapters
from aspire.encoders.codes import check_code_names, code_id, encoding_with_code, split_code_text, with_code
from aspire.encoders.identity import encoding_identity, versioned
from aspire.encoders.inputs import EncoderInputs, Overflow, TruncationRecord
from aspire.encoders.pieces import (
    budget_batches,
    hold_long_papers,
    raise_if_unseen,
    truncation_records,
    unseen_sentences,
    warn_long_papers,
)
from aspire.encoders.pieces import listed as _listed
from aspire.encoders.pooling import masked_mean
from aspire.encoders.pretrained import (
    SETTINGS_FILE,
    check_tokenizer_files,
    read_settings,
    resolve_checkpoint,
    resolve_model,
)
from aspire.encoders.task_formats import TaskFormats

log = logging.getLogger(__name__)
UNCUT = 1 << 30  # the `max_length` of a tokenisation that cuts nothing (None: transformers warns of the model's limit)


def title_is_sentence(paper: Paper, include_title: bool) -> bool:
    """Whether `paper`'s title is sentence 0 of its sentence set: with `include_title` where the paper has a title
    (a blank one, as an abstract given as a plain string has, holds no word piece to encode and nothing to match),
    and for a paper without abstract sentences, which its title stands for."""
    return (include_title and bool(paper.title.strip())) or not paper.sentences


@contextlib.contextmanager
def eval_mode(module: nn.Module):
    """`module` in eval mode for a `with` block, and in the mode it was in (training or not) after it, also when the
    block raises (a refused paper left a training encoder in eval mode: dropout off, unsaid)."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def paper_sentences(paper: Paper, include_title: bool) -> list[str]:
    """The sentence set of a paper: its abstract sentences, after its title where `title_is_sentence`.

    A paper with a title but no abstract sentences is represented by its title alone.
    """
    if title_is_sentence(paper, include_title):
        return [paper.title, *paper.sentences]
    return list(paper.sentences)


def piece_sentences(starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The sentence (P,) of each word piece of a text of sentences joined by one space, from the sentences' first
    characters `starts` (n,), their `lengths` (n,) and the pieces' character offsets `offsets` (P, 2): the one
    holding the piece's last character. A piece that ends at a joining space (a SentencePiece `▁` standing alone
    before a sentence's first word) opens the next sentence with a character, as it does when that sentence is
    tokenised alone (it went to the sentence before); a piece of no character, the sentence where it stands."""
    begin, end = offsets[:, 0], offsets[:, 1]
    sentence = np.searchsorted(starts, end - 1, side="right") - 1
    blank = end <= begin
    sentence[blank] = np.searchsorted(starts, begin[blank], side="right") - 1
    opener = ~blank & np.isin(end, starts[1:])  # WordPiece pieces never are: they hold no whitespace
    nonempty = np.flatnonzero(lengths > 0)
    if opener.any() and len(nonempty):
        later = np.searchsorted(starts[nonempty], end[opener])  # the first sentence with a character from `end` on
        sentence[opener] = np.where(later < len(nonempty), nonempty[np.minimum(later, len(nonempty) - 1)],
                                    sentence[opener])
    return sentence


def load_weights(auto_class, folder: Path):
    """`auto_class.from_pretrained(folder)` in float32; a weights file that does not parse (truncated, damaged) is a
    ValueError naming the folder, where safetensors says only that a header did not deserialize. A checkpoint saved
    in float16 or bfloat16 is widened to float32 (exactly): transformers 5 keeps a checkpoint's dtype, which made the
    "exact" torch path run in half precision on the CPU and the fast backends' export fail. Narrow it afterwards
    (`encoder.model.half()`) or use `quantize="bf16"` for half-precision inference."""
    from safetensors import SafetensorError

    try:
        model = auto_class.from_pretrained(folder)
    except SafetensorError as err:
        raise ValueError(f"{folder}: its weights file does not load ({err}): copy or export the model again") from err
    if any(t.is_floating_point() and t.dtype != torch.float32 for t in model.state_dict().values()):
        model = model.float()
    return model


def raise_if_not_finite(vectors: Tensor, names: Sequence[str]) -> None:
    """ValueError naming every item (one a row of `vectors`, (N, ...)) with a NaN or infinite value: a model that
    diverged in training or overflowed in half precision would otherwise put such papers first in every search
    (a NaN compares as no distance at all)."""
    bad = (~torch.isfinite(vectors)).flatten(1).any(1).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"the model gave non-finite vectors for {len(bad)} item(s): {_listed([names[i] for i in bad])}"
                         "; its weights may hold NaN or inf (a diverged training run) or overflow in its precision")


def check_batch_size(value, name: str = "batch_size") -> None:
    """ValueError naming `name` unless `value` is a whole number >= 1 (0 or less would stall or crash the batching)."""
    if not is_whole(value, 1):
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


class ContextualSentenceEncoder(TaskFormats, nn.Module):
    """Any Hugging Face encoder turned into a contextual sentence encoder returning `DocBatch`.

    Args:
        model: a transformers encoder (BERT, MPNet, MiniLM, …) returning `last_hidden_state`.
        tokenizer: its fast tokenizer (offsets are required); it is set to pad on the right (`padding_side`).
        max_length: word pieces per window; default (None or 0) and at most the model's limit; at least room for
            the special pieces, a control code, one title piece and one abstract piece.
        include_title: add the title as sentence 0 of the sentence set (default: context only); a paper with a
            blank title has none (`title_is_sentence`).
        overflow: "window" (encode the rest in further windows) or "truncate" (leave it out).
        max_title_tokens: the title is cut to this many pieces (fewer where a window is shorter) so it never
            crowds out the abstract.
        segment_ids: give the abstract the tokenizer's second-segment token type (BERT pairs); False
            keeps every piece in segment 0, as sentence-transformers models were trained (one text).
        codes: control codes the tokenizer holds (`add_codes` adds them); `code`: the one every paper
            gets after `[CLS]` (None: no code).
    """

    # what a result record writes beside the model (`aspire.encoders.pretrained.checkpoint_record`'s form): for a
    # training run's folder, the checkpoint `from_pretrained` / `load_encoder` loaded, from the one read of its pointer
    # that picked the weights (a second read may find `best` moved); {} for any other model. Never mutated.
    loaded_checkpoint: dict = {}

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        *,
        max_length: int | None = None,
        include_title: bool = False,
        overflow: Overflow = "window",
        max_title_tokens: int = 64,
        segment_ids: bool = True,
        codes: Sequence[str] = (),
        code: str | None = None,
        name: str = "",
    ) -> None:
        super().__init__()
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("ContextualSentenceEncoder needs a fast tokenizer (character offsets)")
        if overflow not in ("window", "truncate"):
            raise ValueError(f"overflow must be 'window' or 'truncate', got {overflow!r}")
        self.model = model
        self.tokenizer = tokenizer
        # pooling reads real pieces only, but a left-padding tokenizer shifted BERT's positions by the padding: a
        # paper's vectors depended on its batch (tiny BERT, batch size 1 vs 32: 0.83 apart); windows, control codes and
        # the fast backends assume right padding too. Set on the object, as `split_code_text` is (a save writes it)
        if getattr(tokenizer, "padding_side", "right") != "right":
            tokenizer.padding_side = "right"
        limit = position_limit(model.config)  # the RoBERTa family's 2 fewer than its position embeddings
        limit = 512 if limit is None else limit  # a config that does not say: BERT's
        limit = min(limit, tokenizer.model_max_length or limit)
        if max_length is not None and not is_whole(max_length, 0) or not is_whole(max_title_tokens, 1):
            raise ValueError(f"max_length must be >= 0 (0: the model's limit) and max_title_tokens >= 1, both whole "
                             f"numbers, got {max_length!r} and {max_title_tokens!r}")
        max_length, max_title_tokens = (None if max_length is None else int(max_length)), int(max_title_tokens)
        self.max_length = min(max_length or limit, limit)
        self._limit = limit  # the model's own: no window or text may pass it
        self._pair_specials = tokenizer.num_special_tokens_to_add(pair=True)
        if self.max_length < self._pair_specials + 3:
            raise ValueError(f"max_length {self.max_length} leaves no room: a window holds {self._pair_specials} "
                             f"special pieces, a control code, a title piece and an abstract piece (at least "
                             f"{self._pair_specials + 3})")
        for key, flag in (("include_title", include_title), ("segment_ids", segment_ids)):
            if not isinstance(flag, (bool, np.bool_)):  # "no" is truthy: it turned the title on, unsaid
                raise ValueError(f"{key} must be true or false, got {flag!r}")
        self.include_title, self.segment_ids = bool(include_title), bool(segment_ids)
        self.overflow = overflow
        self.max_title_tokens = max_title_tokens
        self.codes = check_code_names(codes, "the encoder's control codes")
        for c in self.codes:
            code_id(tokenizer, c)  # ValueError naming a code the tokenizer lacks
        if self.codes:
            split_code_text(tokenizer)  # a code's text in a paper is plain text (`with_code` places the code)
        self.code = self._checked_code(code)
        self.name = name
        self.train(model.training)  # the wrapper starts in the wrapped model's mode

    # ---- loading and saving -----------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, **settings) -> "ContextualSentenceEncoder":
        """Load `minilm`, `mpnet`, a model shipped as an adapter (`aspire-minilm`) or a local HF directory;
        settings saved beside a trained model apply unless overridden by keyword. A directory whose settings
        name a `base` holds adapters only: the base model (a name or a directory) gives the weights and the
        tokenizer. A training run's folder loads its best (else latest) checkpoint, named in `loaded_checkpoint`."""
        path, loaded = resolve_checkpoint(name_or_path)
        encoder = cls.from_folder(path, read_settings(path), str(name_or_path), settings)
        encoder.loaded_checkpoint = loaded
        return encoder

    @classmethod
    def from_folder(cls, path: Path, saved: dict, name: str, settings: dict,
                    given: str = "the settings given") -> "ContextualSentenceEncoder":
        """`from_pretrained` of the model folder `path` (`resolve_model`'s) whose settings file was read already
        (`saved`, `read_settings`), so that a load reads it once; `given` names `settings` in an error. A setting's
        bad value is a ValueError naming the settings file (or `given`) it came from."""
        from transformers import AutoModel, AutoTokenizer  # the modeling code: only where weights are loaded

        weights = cls.weights_folder(path, saved, settings, given)
        stored = {**saved, **settings}
        adapter = stored.pop("adapter", None)
        stored.pop("base", None)
        tokenizer = AutoTokenizer.from_pretrained(weights)
        check_tokenizer_files(tokenizer, weights)  # without them: special tokens alone, every word [UNK]
        if not getattr(tokenizer, "is_fast", False):  # named here: below it would read as a bad setting
            raise ValueError(f"{weights}: its tokenizer is no fast tokenizer (character offsets), which the encoder needs")
        model = load_weights(AutoModel, weights)
        if adapter:
            model = adapters.load_adapted(model, path, adapter)
        model.eval()
        try:
            encoder = cls(model, tokenizer, name=name, **stored)
        except ValueError as err:  # a setting's bad value: said with where it came from (the file named nothing)
            from_file = set(saved) - set(settings) - {"adapter", "base"}  # the file's settings in force
            sources = ([str(path / SETTINGS_FILE)] if from_file else []) + ([given] if settings else [])
            if not sources:
                raise
            raise ValueError(f"{' or '.join(sources)}: {err}") from None
        if adapter:
            encoder.use_scope(adapter.get("scope", "all"))
        return encoder

    @classmethod
    def weights_folder(cls, path: Path, saved: dict, settings: dict, given: str = "the settings given") -> Path:
        """The folder of the weights and the tokenizer of the model folder `path` with saved settings `saved`: the
        base model's for a folder of adapters (`base`), else `path`. ValueError naming the settings file or `given`
        for a setting the encoder does not take, and the file for a `base` that is no model."""
        cls.check_settings(set(saved) - {"adapter", "base"}, path / SETTINGS_FILE)
        cls.check_settings(set(settings), given)
        if "base" not in saved:
            return path
        try:
            return resolve_model(saved["base"])
        except ValueError as err:
            raise ValueError(f"{path / SETTINGS_FILE}: its base model {saved['base']!r} is not found: {err}") from None

    @classmethod
    def check_settings(cls, names: set[str], where) -> None:
        """ValueError naming `where` and the setting(s) among `names` that the encoder does not take (a TypeError
        from deep inside the load, naming neither, before)."""
        known = set(inspect.signature(cls.__init__).parameters) - {"self", "model", "tokenizer", "name"}
        if unknown := sorted(names - known):
            raise ValueError(f"{where}: unknown encoder setting(s) {unknown}; valid: {sorted(known)}")

    def settings(self) -> dict:
        return {
            "max_length": self.max_length,
            "include_title": self.include_title,
            "overflow": self.overflow,
            "max_title_tokens": self.max_title_tokens,
            "segment_ids": self.segment_ids,
            **({"codes": self.codes, "code": self.code} if self.codes else {}),  # none: old fingerprints hold
        }

    def save_pretrained(self, path: str | Path) -> None:
        """Save model + tokenizer in Hugging Face format (plain `AutoModel` opens it) and the settings; an
        adapted model saves its base weights so, and its adapters in peft format under `path/adapter`."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        settings = self.settings()
        if adapters.is_adapted(self.model):  # base weights here, adapters in path/adapter (peft format)
            adapters.save_adapted(self.model, path)
            settings["adapter"] = adapters.adapter_settings(self.model, self.adapter_scope)
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        (path / SETTINGS_FILE).write_text(json.dumps(settings, indent=2))

    def fingerprint(self) -> str:
        """A hash of what decides this encoder's vectors (it keys vector caches and indexes): the weights, encoding
        settings, backend, model type and vocabulary size, and since version 2 (`v2-` and 16 hex digits) the model
        config's encoding fields, the adapter's settings and the vocabulary itself (`aspire.encoders.identity`)."""
        return self.fingerprints()[0]

    def fingerprints(self) -> tuple[str, str]:
        """(`fingerprint`, the version-1 fingerprint: 16 hex digits, without the model config, adapter settings and
        vocabulary), from one pass over the weights; the second lets an index built before version 2 be searched
        (`aspire.index.store.SentenceIndex.check_model`)."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self.settings(), sort_keys=True).encode())
        digest.update(f"{self.model.config.model_type}/{len(self.tokenizer)}".encode())
        digest.update(getattr(self.model, "backend_tag", "").encode())  # fast backends only ("" adds nothing)
        if adapters.is_adapted(self.model):
            digest.update(f"adapter/{self.model.active_adapter}".encode())
            if self.adapter_scope == "query":  # papers (adapter off) and queries (on) are different encodings
                digest.update(b"/query-on" if self.query_on else b"/query-off")
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        legacy = digest.hexdigest()[:16]
        digest.update(encoding_identity(self.model, self.tokenizer))
        return versioned(digest.hexdigest()), legacy

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    # ---- tokenisation -----------------------------------------------------------------------------
    def _cut_titles(self, titles: list[str], window: int) -> list[str]:
        """Titles cut to `max_title_tokens` word pieces (at a piece boundary), and shorter where a `window` of that
        many pieces would otherwise hold no piece of the abstract after the title and the special pieces."""
        cap = min(self.max_title_tokens, window - self._pair_specials - 1)
        enc = self.tokenizer(titles, add_special_tokens=False, return_offsets_mapping=True)
        return [t if len(offsets) <= cap else t[: offsets[cap - 1][1]] for t, offsets in zip(titles, enc["offset_mapping"])]

    def tokenize(self, papers: Sequence[Paper], codes: Sequence[str] | None = None) -> EncoderInputs:
        """Tokenise `title [SEP] abstract` pairs and map every word piece to its sentence; a paper with a
        sentence that gets no word piece is refused (ValueError naming it, see `unseen_sentences`), and so is
        no paper at all, as `encode` refuses it (a batch has no shape without one; the per-paper reports,
        `unseen_sentences` and `truncation_report`, answer [] for none).
        `codes`: one control code a paper (a multi-task run's task codes) instead of the encoder's `code`."""
        if codes is not None and len(codes) != len(papers):
            raise ValueError(f"{len(codes)} control codes for {len(papers)} papers")
        if not len(papers):  # transformers' own error was an IndexError from inside _encode_plus
            raise ValueError("tokenize: no papers given")
        inputs, unseen = self._tokenize(papers, codes)
        raise_if_unseen(inputs.paper_ids, inputs.sentences, unseen, [title_is_sentence(p, self.include_title) for p in papers])
        return inputs

    def _check_windows_cover(self, paper_ids: Sequence[str], texts: Sequence[str], offsets: np.ndarray,
                             from_abstract: np.ndarray, row_paper: np.ndarray) -> None:
        """Refuse a paper whose windows (all of them, kept or not) stop before the end of its abstract where the
        text after the last window has word pieces: tokenizers 0.23.1 and 0.23.2 return overflow windows that stop
        short of a long text's end (huggingface/tokenizers#2091; seen on a GPU machine's image), which would have
        lost the paper's last sentences, or been refused as sentences with no word piece."""
        ends = np.zeros(len(texts), dtype=np.int64)
        np.maximum.at(ends, np.broadcast_to(row_paper[:, None], from_abstract.shape)[from_abstract],
                      offsets[..., 1][from_abstract])
        for b, (text, end) in enumerate(zip(texts, ends.tolist())):
            if text[end:].strip() and self.tokenizer([text[end:]], add_special_tokens=False)["input_ids"][0]:
                raise RuntimeError(
                    f"paper {paper_ids[b]}: the tokenizer's windows stop at character {end} of its {len(text)}-"
                    f"character abstract, and the text after it has word pieces (tokenizers "
                    f"{tokenizers.__version__}; 0.23.1 and 0.23.2 drop the end of a long text, "
                    "huggingface/tokenizers#2091): install another tokenizers release")

    def unseen_sentences(self, papers: Sequence[Paper | dict | str], batch_size: int = 64) -> list[list[int]]:
        """Per paper, the positions of its sentences that get no word piece, judged by this tokenizer
        exactly as `tokenize` does (empty lists for papers that can be encoded). `papers` as `encode` takes them."""
        papers = as_papers(papers)
        check_batch_size(batch_size)
        return [u for i in range(0, len(papers), batch_size) for u in self._tokenize(papers[i : i + batch_size])[1]]

    def _tokenize(self, papers: Sequence[Paper], codes: Sequence[str] | None = None) -> tuple[EncoderInputs, list[list[int]]]:
        sents = [paper_sentences(p, self.include_title) for p in papers]
        shift = [int(title_is_sentence(p, self.include_title)) for p in papers]  # title is sentence 0
        texts, starts, lengths = [], [], []
        for paper_sents, k in zip(sents, shift):
            body = paper_sents[k:]
            begins = np.cumsum([0] + [len(s) + 1 for s in body[:-1]]) if body else np.zeros(0, dtype=int)
            texts.append(" ".join(body))
            starts.append(begins)
            lengths.append(np.array([len(s) for s in body], dtype=np.int64))
        window = self.max_length - (self.code is not None or codes is not None)  # room for the control code
        enc = self.tokenizer(
            self._cut_titles([p.title for p in papers], window),
            texts,
            truncation="only_second",
            max_length=window,
            stride=0,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
        )  # plain lists: converting them with numpy is much faster than return_tensors="pt"
        row_paper = torch.tensor(enc["overflow_to_sample_mapping"], dtype=torch.long)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64)  # (R, T, 2)
        input_ids = torch.from_numpy(np.asarray(enc["input_ids"], dtype=np.int64))
        sent_index = np.full(input_ids.shape, -1, dtype=np.int64)
        # (R, T) abstract pieces: what a truncation record is judged by (the title, sentence 0 with include_title,
        # opens every window and is never past the first one)
        from_abstract = np.zeros(input_ids.shape, dtype=bool)
        first_row = np.ones(len(row_paper), dtype=bool)
        first_row[1:] = row_paper[1:].numpy() != row_paper[:-1].numpy()
        for r, b in enumerate(row_paper.tolist()):
            seq = np.array([-1 if s is None else s for s in enc.sequence_ids(r)])
            in_abstract = from_abstract[r] = seq == 1
            sent_index[r, in_abstract] = piece_sentences(starts[b], lengths[b], offsets[r, in_abstract]) + shift[b]
            if shift[b]:
                sent_index[r, (seq == 0) & (offsets[r, :, 1] > offsets[r, :, 0])] = 0  # title pieces
        keep = np.ones(len(row_paper), dtype=bool) if self.overflow == "window" else first_row
        ids = [p.paper_id for p in papers]
        truncation = truncation_records(ids, np.where(from_abstract, sent_index, -1), row_paper.numpy(), first_row,
                                        self.overflow)
        unseen = unseen_sentences([len(s) for s in sents], sent_index, row_paper.numpy(), keep)
        self._check_windows_cover(ids, texts, offsets, from_abstract, row_paper.numpy())
        keep_t = torch.from_numpy(keep)
        as_tensor = lambda key: torch.from_numpy(np.asarray(enc[key], dtype=np.int64))[keep_t]  # noqa: E731
        inputs = EncoderInputs(
            input_ids=input_ids[keep_t],
            attention_mask=as_tensor("attention_mask"),
            sent_index=torch.from_numpy(sent_index[keep]),
            row_paper=row_paper[keep_t],
            n_sentences=[len(s) for s in sents],
            paper_ids=[p.paper_id for p in papers],
            sentences=sents,
            titled=[bool(k) for k in shift],
            truncation=truncation,
            token_type_ids=as_tensor("token_type_ids") if self.segment_ids and "token_type_ids" in enc else None,
        )
        code = self.code if codes is None else list(codes)
        return (inputs if code is None else with_code(inputs, self.tokenizer, code)), unseen

    # ---- the forward pass -------------------------------------------------------------------------
    def forward(self, inputs: EncoderInputs, max_rows: int | None = None) -> DocBatch:
        """Contextual sentence vectors (differentiable): DocBatch with emb (B, S, D) and, from the same pass,
        the whole-abstract vector `whole` (B, D): the mean of every word piece under the attention mask
        (special tokens, a control code and the title included, as sentence-transformers pools one text), over
        all of a paper's windows (its first alone with `overflow="truncate"`, which keeps no other).

        `max_rows` windows pass through the model at a time (default all): bounds activation memory
        however many continuation windows a long paper has. Vectors come out in the model's dtype, pooled in
        float32 at least (float16 / bfloat16 hidden states are summed and counted in float32)."""
        if max_rows is not None:
            check_batch_size(max_rows, "max_rows")
        if not inputs.n_sentences:  # max() of no sentence counts raised "max() arg is an empty sequence"
            raise ValueError("forward: the inputs hold no paper")
        R, B, S, D = len(inputs.input_ids), len(inputs.n_sentences), max(inputs.n_sentences), self.dim
        sums, counts, whole_sums, whole_counts, out_dtype = None, None, None, None, None
        for lo in range(0, R, max_rows or R):
            rows = slice(lo, lo + (max_rows or R))
            extra = {} if inputs.token_type_ids is None else {"token_type_ids": inputs.token_type_ids[rows]}
            hidden = self.model(
                input_ids=inputs.input_ids[rows], attention_mask=inputs.attention_mask[rows], **extra
            ).last_hidden_state  # (r, T, D)
            # sums and counts in float32 at least: a bfloat16 count stops at 256 (257 + 1 rounds back) and its
            # running sums lose a bit a step, so a long sentence's mean came out far off (0.78 on values of 1.4)
            out_dtype = hidden.dtype
            hidden = hidden.to(torch.promote_types(hidden.dtype, torch.float32))
            valid = inputs.sent_index[rows] >= 0  # (r, T)
            slot = (inputs.row_paper[rows, None] * S + inputs.sent_index[rows])[valid]  # (P,) flat (paper, sentence) slot
            sums = (hidden.new_zeros(B * S, D) if sums is None else sums).index_add(0, slot, hidden[valid])
            counts = (hidden.new_zeros(B * S) if counts is None else counts).index_add(0, slot, hidden.new_ones(len(slot)))
            attended = inputs.attention_mask[rows].to(hidden.dtype)  # (r, T)
            row_sums = (hidden * attended[..., None]).sum(dim=1)  # (r, D)
            papers = inputs.row_paper[rows]
            whole_sums = (hidden.new_zeros(B, D) if whole_sums is None else whole_sums).index_add(0, papers, row_sums)
            whole_counts = (hidden.new_zeros(B) if whole_counts is None else whole_counts).index_add(0, papers, attended.sum(dim=1))
        emb = (sums / counts.clamp_min(1.0)[:, None]).view(B, S, D).to(out_dtype)
        mask = (counts > 0).view(B, S)
        whole = (whole_sums / whole_counts.clamp_min(1.0)[:, None]).to(out_dtype)
        return DocBatch(emb, mask, list(inputs.paper_ids), inputs.sentences, whole)

    # ---- batched inference ------------------------------------------------------------------------
    def truncation_report(self, papers: Sequence[Paper | dict | str], batch_size: int = 64) -> list[TruncationRecord]:
        """Every paper with sentences past the first window, and what happened to them."""
        papers, out = as_papers(papers), []
        check_batch_size(batch_size)
        for i in range(0, len(papers), batch_size):
            out.extend(self.tokenize(papers[i : i + batch_size]).truncation)
        return out

    def _tokenized_ahead(self, papers: Sequence[Paper], chunks: list[list[int]]) -> Iterator[EncoderInputs]:
        """`tokenize` of each chunk of `papers`, in order, the next chunk tokenised on a worker thread while the
        caller runs the model on this one: on a GPU the tokenizer (CPU) was the encoder's bottleneck, 4,205 CSFCube
        abstracts at 1.40x sentence-transformers' time on an H200. One thread only ever holds the tokenizer."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="aspire-tokenize") as pool:
            ahead = pool.submit(self.tokenize, [papers[i] for i in chunks[0]]) if chunks else None
            for k in range(len(chunks)):
                inputs = ahead.result()
                if k + 1 < len(chunks):
                    ahead = pool.submit(self.tokenize, [papers[i] for i in chunks[k + 1]])
                yield inputs

    @torch.inference_mode()
    def encode(self, papers: Sequence[Paper | dict | str], batch_size: int = 32, progress: bool = False,
               max_batch_chars: int = 1 << 20) -> DocBatch:
        """Contextual sentence vectors of `papers`, in input order, on the CPU, with each paper's
        whole-abstract vector from the same pass (`DocBatch.whole`, see `forward`).

        `papers` may mix `Paper`s, records (dicts as in a papers file) and plain abstract strings
        (`aspire.data.papers.as_papers`). Papers are bucketed by length (longest first) so padding
        stays small; the device is the model's. Memory is bounded per batch: a batch holds at most
        `batch_size` papers and `max_batch_chars` characters (a longer paper goes alone), and at most
        `batch_size` windows go through the model at a time.
        """
        papers = as_papers(papers)
        if not papers:
            raise ValueError("encode: no papers given")
        check_batch_size(batch_size)
        check_batch_size(max_batch_chars, "encode: max_batch_chars")
        with eval_mode(self), tqdm(total=len(papers), desc="encoding papers", unit="paper", disable=not progress) as bar:
            chars = [len(p.title) + sum(len(s) for s in p.sentences) for p in papers]
            order = np.argsort([-c for c in chars], kind="stable").tolist()
            vectors: list[Tensor | None] = [None] * len(papers)
            masks: list[Tensor | None] = [None] * len(papers)
            whole = torch.empty(len(papers), self.dim)
            truncated: list[TruncationRecord] = []
            chunks = budget_batches(order, chars, batch_size, max_batch_chars)
            for chunk, inputs in zip(chunks, self._tokenized_ahead(papers, chunks)):
                truncated.extend(inputs.truncation)
                batch = self.forward(inputs.to(self.device), max_rows=batch_size)
                emb, mask = batch.emb.float().cpu(), batch.mask.cpu()
                whole[chunk] = batch.whole.float().cpu()
                raise_if_not_finite(torch.cat([emb.masked_fill(~mask[..., None], 0.0).flatten(1), whole[chunk]], 1),
                                    [f"paper {papers[i].paper_id}" for i in chunk])
                for row, i in enumerate(chunk):
                    vectors[i] = emb[row, : inputs.n_sentences[row]]
                    masks[i] = mask[row, : inputs.n_sentences[row]]
                bar.update(len(chunk))
        if truncated and not hold_long_papers(self, truncated):  # said once for a whole corpus (`long_papers_held`)
            warn_long_papers(truncated, self.max_length, self.overflow)
        out = DocBatch.from_list(vectors, [p.paper_id for p in papers], [paper_sentences(p, self.include_title) for p in papers],
                                 whole)
        mask = torch.nn.utils.rnn.pad_sequence(masks, batch_first=True)  # (B, S): False where cut (truncate)
        return out.with_mask(mask)

    @torch.inference_mode()
    def embed_texts(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        *,
        pooling: Literal["mean", "cls"] = "mean",
        normalize: bool = False,
        max_length: int | None = None,
        batch_size: int = 64,
        progress: bool = False,
        names: Sequence[str] | None = None,
    ) -> Tensor:
        """One vector per text (or text pair) -> (N, D) on the CPU, sentence-transformers style pooling
        ("mean" over all pieces under the attention mask, special tokens included, or "cls"); each text cut at
        `max_length` pieces (default the encoder's), never past the model's limit. A pair's second text has the
        second segment's token type unless the encoder keeps every piece in segment 0 (`segment_ids=False`), as
        `encode` does. A text (pair) that is cut is not cut silently: one warning a call gives how many were, and
        names the first `LONG_IDS_SHOWN` by position (`text 3`), or by `names` (N,) where given, with their length
        uncut."""
        if names is not None and len(names) != len(texts):
            raise ValueError(f"embed_texts: {len(names)} names for {len(texts)} texts (one name a text)")
        return self._embed_texts(texts, pairs, pooling=pooling, normalize=normalize, max_length=max_length,
                                 batch_size=batch_size, progress=progress, names=names)[0]

    @torch.no_grad()  # encode_independent calls it directly: no autograd graph kept across batches
    def _embed_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *,
                     pooling: Literal["mean", "cls"] = "mean", normalize: bool = False, max_length: int | None = None,
                     batch_size: int = 64, progress: bool = False,
                     names: Sequence[str] | None = None) -> tuple[Tensor, Tensor]:
        """`embed_texts`, and (N,) bool: the texts (pairs) that got no word piece of their own, read from the same
        tokenisation (their vector is that of the special pieces alone). `names` (N,): how the warning on cut texts
        names each (default `text i`)."""
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        if max_length is not None and not is_whole(max_length, 0):
            raise ValueError(f"max_length must be >= 0 (0: the encoder's), a whole number, got {max_length!r}")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"embed_texts: {len(pairs)} pairs for {len(texts)} texts (one second text a text)")
        check_batch_size(batch_size)
        with eval_mode(self), tqdm(total=len(texts), desc="encoding texts", unit="text", disable=not progress) as bar:
            order = np.argsort([-len(t) - (len(pairs[i]) if pairs else 0) for i, t in enumerate(texts)], kind="stable")
            out = torch.empty(len(texts), self.dim)
            empty = torch.zeros(len(texts), dtype=torch.bool)
            specials = self.tokenizer.num_special_tokens_to_add(pair=pairs is not None)
            room = min(max_length or self.max_length, self._limit) - (self.code is not None)
            if room < specials + (2 if pairs is not None else 1):  # the tokenizer would not cut at all, or cut all
                raise ValueError(f"max_length {max_length} leaves no room: a text holds {specials} special piece(s)"
                                 f"{', a control code' if self.code is not None else ''} and a piece of each text")
            cut: list[tuple[int, int]] = []  # (position, word pieces uncut) of every text cut at `room`
            for start in range(0, len(texts), batch_size):
                idx = order[start : start + batch_size].tolist()
                enc = dict(self.tokenizer(
                    [texts[i] for i in idx],
                    [pairs[i] for i in idx] if pairs else None,
                    truncation="longest_first" if pairs else True,
                    max_length=room,
                    padding=True,
                    return_tensors="pt",
                ))
                kept = enc["attention_mask"].sum(1)  # (n,) word pieces, special ones included
                empty[idx] = kept <= specials  # special pieces alone
                cut += self._uncut_lengths(texts, pairs, [i for i, k in zip(idx, kept.tolist()) if k >= room], room)
                if not self.segment_ids and "token_type_ids" in enc:  # one segment, as `tokenize` gives the abstract
                    enc["token_type_ids"] = torch.zeros_like(enc["token_type_ids"])
                enc = (enc if self.code is None else encoding_with_code(enc, self.tokenizer, self.code))
                enc = {k: v.to(self.device) for k, v in enc.items()}
                hidden = self.model(**enc).last_hidden_state  # (N, T, D)
                vec = hidden[:, 0] if pooling == "cls" else masked_mean(hidden, enc["attention_mask"])
                if normalize:
                    vec = nn.functional.normalize(vec, dim=-1)
                out[idx] = vec.float().cpu()
                raise_if_not_finite(out[idx], [names[i] if names is not None else f"text {i}" for i in idx])
                bar.update(len(idx))
        if cut:
            code = self.code is not None  # its piece counts against the limit
            log.warning("%d text(s)%s longer than %d word pieces (%s): each was cut at the limit, its pieces past it "
                        "left out of its vector", len(cut), " (pairs)" if pairs is not None else "", room + code,
                        _listed([f"{names[i] if names is not None else f'text {i}'} ({n + code} pieces)"
                                 for i, n in sorted(cut)]))
        return out, empty

    def _uncut_lengths(self, texts: Sequence[str], pairs: Sequence[str] | None, at_limit: list[int],
                       room: int) -> list[tuple[int, int]]:
        """(position, word pieces, special ones included) of each text (pair) among `at_limit` (positions of texts
        whose tokenisation cut at `room` pieces reached it) that holds more than `room` pieces: the ones that were
        cut. Only these are tokenised again, uncut."""
        if not at_limit:
            return []
        whole = self.tokenizer([texts[i] for i in at_limit], [pairs[i] for i in at_limit] if pairs is not None else None,
                               truncation=True, max_length=UNCUT)["input_ids"]
        return [(i, len(ids)) for i, ids in zip(at_limit, whole) if len(ids) > room]

    def encode_independent(self, papers: Sequence[Paper | dict | str], *, normalize: bool = False, **kwargs) -> DocBatch:
        """Each sentence encoded alone, without its abstract as context (the "sentence model" baseline). A paper
        with a sentence that gets no word piece is refused, as `encode` refuses it (its vector would be that of
        the special tokens alone). A sentence longer than `max_length` is cut as `embed_texts` cuts, its warning
        naming it (`paper ID sentence k`, k its position in `paper_sentences`)."""
        papers = as_papers(papers)
        sents = [paper_sentences(p, self.include_title) for p in papers]
        flat = [s for paper_sents in sents for s in paper_sents]
        names = [f"paper {p.paper_id} sentence {k}" for p, paper_sents in zip(papers, sents) for k in range(len(paper_sents))]
        vecs, empty = self._embed_texts(flat, normalize=normalize, names=names, **kwargs)  # (N, D), (N,): one tokenisation
        bounds = np.cumsum([0, *map(len, sents)]).tolist()
        unseen = [empty[lo:hi].nonzero().flatten().tolist() for lo, hi in zip(bounds[:-1], bounds[1:])]
        raise_if_unseen([p.paper_id for p in papers], sents, unseen, [title_is_sentence(p, self.include_title) for p in papers])
        parts = list(torch.split(vecs, [len(s) for s in sents]))
        return DocBatch.from_list(parts, [p.paper_id for p in papers], sents)

    def encode_abstract(
        self,
        papers: Sequence[Paper | dict | str],
        *,
        pooling: Literal["mean", "cls"] = "mean",
        joiner: str | None = None,
        normalize: bool = False,
        **kwargs,
    ) -> Tensor:
        """One vector per paper -> (B, D). `joiner=None` encodes (title, abstract) as a text pair
        (`[CLS] title [SEP] abstract [SEP]`); a string joins them into one text instead. Cut at `max_length` as
        `embed_texts` cuts, its warning naming the papers cut (`paper ID`)."""
        papers = as_papers(papers)
        names = [f"paper {p.paper_id}" for p in papers]  # how the warning on cut texts names them
        if joiner is None:
            abstracts = [" ".join(p.sentences) for p in papers]
            return self.embed_texts([p.title for p in papers], abstracts, pooling=pooling, normalize=normalize,
                                    names=names, **kwargs)
        texts = [abstract_text(p.title, p.sentences, joiner) for p in papers]
        return self.embed_texts(texts, pooling=pooling, normalize=normalize, names=names, **kwargs)
