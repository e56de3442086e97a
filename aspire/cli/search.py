"""Search a sentence index by a paper's selected sentences: one query, a file of queries, or interactively.

A query is an indexed paper (`--query-id`, its stored vectors: no model is loaded, and a `--model`, `--backend` or
`--quantize` given is said to be unused) or a paper to encode (`--query-file`, or a JSON object line in `--queries`
/ `--interactive`: the index's model is loaded once, on first need, with the backend and precision the index was
built with (`aspire index build --backend/--quantize`, recorded in the index's config; `--backend/--quantize` here
choose another), its fingerprint is checked). `--sentences` picks the sentences to match, by 0-based position or
by facet name from the papers' labels (the index keeps `pred_labels`). Each query returns k papers
(see `aspire.search`; with `--cross-encoder DIR` a cross-encoder re-scores the top `--cross-top`
last, its time reported apart), printed to stdout as text or `--json`; `--run-out` also writes a TREC run
file (`qid Q0 docid rank score tag`; each query id once, as a run holds one ranking an id). Progress (with a
batch of queries: rate and ETA) and warnings go to stderr; a batch's searches that found fewer than k papers, and
those answered with a note (a BM25 stage whose selection shares no word with any paper), are summed up in a line
each at its end (`aspire.cli.search_batch`).

A query that is an indexed paper (`--query-id` alone, or an `ID` line) leaves that paper out of its own
results (`search.exclude_query`, default true); a paper to encode (`--query-file`, a JSON line) never leaves
out anything, even when its `paper_id` is also an indexed paper's.

With a model trained with facet control codes (`aspire.encoders.codes`), a query selecting one facet's
sentences is encoded with that facet's code (`--facet-code`, default auto; an indexed paper is then
re-encoded from its stored text, as the index holds its vectors under the candidates' code).

Line format of `--queries FILE` and `--interactive` (blank lines and `#` comments are skipped; a bad line, a byte
that is not UTF-8 too, is named `FILE:LINE: ...` and stops `--queries` before any search, or `stdin line N: ...` and
is passed over by `--interactive`):

    2468783                 an indexed paper, sentences from --sentences (default: all)
    2468783 method          an indexed paper, its method sentences
    2468783 0,2             an indexed paper, its sentences 0 and 2 (0-based)
    {"paper_id": "new", "title": "...", "abstract": "..."}   a paper to encode (papers-file rules)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aspire.cli.search_batch import Progress, note_summary, shortfall_summary
from aspire.cliutil import (
    OVERRIDES_HELP,
    add_backend_options,
    add_common_options,
    backend_options,
    check_out_file,
    check_paths,
    command_parser,
    error_message,
    file_path,
    input_file,
    normalize_overrides,
    positive_int,
    print_json,
    run_command,
    setup_logging,
    silence_stdout,
    stdout_reader_gone,
)
from aspire.data.facets import FACET_CODE_CHOICES, parse_selection, selection_facet
from aspire.data.papers import Paper, paper_from_record, read_papers
from aspire.encoders.pretrained import check_model
from aspire.index.config import RERANKERS, STAGES
from aspire.io import decoded_line, loads_unique, stream_lines, write_text

if TYPE_CHECKING:
    from aspire.batch import DocBatch

log = logging.getLogger(__name__)

EXAMPLES = """\
  aspire search --index runs/index --query-id 2468783 --sentences method --k 10
  aspire search --index runs/index --query-file query.json --rerank ot search.shortlist=500 --json
  aspire search --index runs/index --query-id 2468783 --stages ann,bm25 --rerank maxpassage search.passage_window=2
  aspire search --index runs/index --queries queries.txt --k 100 --run-out runs/index.run --run-only
  aspire search --index runs/index --interactive          # then type lines such as: 2468783 method
  aspire search --index runs/index-int8 --query-file query.json   # encodes with the index's backend (onnx int8)
  aspire search --index runs/index --query-id 2468783 --stages ann,bm25 --cross-encoder runs/crossencoder/model \
      --cross-top 50 --cross-weight 1 --json
"""
RERANK_HELP = ("none: rank by the first stage; minl2: re-score the shortlist with exact min-L2; "
               "ot: re-rank the shortlist by optimal transport (solved only for papers that can enter the k best); "
               "maxpassage: the first stage's best search.passage_depth (100) by their best window of "
               "search.passage_window sentences, mixed with the first stage by search.passage_beta, the rest "
               "after them in first-stage order (cost: scoring passage_depth papers, about 30 ms a query for 100 "
               "on one shared core, 205 ms for 768: experiments/results/search_batch.md) (default: the index's "
               "search.rerank)")


def run_tag(text: str) -> str:
    """argparse type: a run file's tag, one word (a space would shift its columns, as an empty tag would drop one)."""
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"expected one word (the tag column of a TREC run), got {text!r}")
    return text


def build_parser(prog: str):
    parser = command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--index", required=True, help="index directory (made by `aspire index build`)")
    source = parser.add_argument_group("queries (give one kind)")
    source.add_argument("--query-id", help="an indexed paper as the query (left out of its own results: "
                                           "search.exclude_query), or the paper to take from --query-file")
    source.add_argument("--query-file", help="JSON or JSONL paper(s) to encode and search with, one search each; an "
                                             "encoded paper never leaves out anything, even an indexed paper "
                                             "sharing its paper_id")
    source.add_argument("--queries", metavar="FILE",
                        help="one query a line: ID [SENTENCES] for an indexed paper (left out of its own results), or "
                             "a JSON paper to encode (leaves out nothing) ('-': stdin)")
    source.add_argument("--interactive", action="store_true",
                        help="read query lines (as in --queries) from stdin until EOF and answer each; the index "
                             "and model load once (ended by Ctrl-C, --run-out holds the queries answered)")
    parser.add_argument("--sentences",
                        help="query sentences to match: comma-separated 0-based positions and/or facet names from "
                             "the papers' labels (background, method, result, or a stored label), e.g. 0,2 or "
                             "method (default: all sentences); where the index's model encodes the title as a "
                             "sentence, position 0 is the title (`aspire index info` shows include_title)")
    parser.add_argument("--k", type=positive_int, help="papers to return per query (default: the index's search.k)")
    parser.add_argument("--stages", choices=STAGES, metavar="{" + "|".join(STAGES) + "}",  # "ann,bm25" is one choice
                        help="first stage: the sentence index (ann), BM25 over titles and sentences, both fused, or the "
                             "whole-abstract vectors (whole) (default: the index's search.stages)")
    parser.add_argument("--fuse", help="with --stages ann,bm25: z:ALPHA or minmax:ALPHA (weight on ann) or rrf[:K] "
                                       "(default: the index's search.fuse, z:0.815)")
    parser.add_argument("--rerank", choices=RERANKERS, help=RERANK_HELP)
    parser.add_argument("--shortlist", type=positive_int,
                        help="papers the first stage passes to re-ranking, and with --stages ann,bm25 the depth of "
                             "each list it fuses, re-ranked or not (default: the index's search.shortlist); maxpassage "
                             "scores only the best search.passage_depth of them")
    cross = parser.add_argument_group("cross-encoder stage (after the first stage and any --rerank)")
    cross.add_argument("--cross-encoder", metavar="DIR",
                       help="a trained cross-encoder (python -m aspire.train.crossencoder) re-scores the top "
                            "--cross-top papers from the selected sentences' text and their titles and abstracts")
    cross.add_argument("--cross-top", type=int, help="papers it re-scores (default: the index's search.cross_top, 50)")
    cross.add_argument("--cross-weight", type=float,
                       help="weight in [0, 1] of its z-scored logits against the previous stage's (default: the "
                            "index's search.cross_weight, 1: its order alone)")
    parser.add_argument("--model", help="encoder for papers to encode (default: the model the index was built with)")
    parser.add_argument("--facet-code", choices=FACET_CODE_CHOICES, default="auto",
                        help="model with facet control codes: the code a query is encoded with; auto (default): "
                             "the facet's when --sentences names one facet, none: the candidates' code, or a facet")
    parser.add_argument("--query-side", action="store_true",
                        help="encode queries with the model's query adapter on (a model trained with "
                             "model.adapter.scope: query, e.g. for citing sentences: configs/query_adapter_context2doc"
                             ".yaml); an indexed paper given by id is re-encoded from its stored text. The papers stay "
                             "as indexed, without it. Refused for a model without a query adapter")
    add_backend_options(parser)
    parser.set_defaults(backend=None)  # not given: the backend the index was built with (`query_backend`)
    for action in parser._actions:
        if action.dest == "backend":
            action.help = ("encoder inference for papers to encode: torch (the exact model), onnx or openvino "
                           "(default: the backend and precision the index was built with)")
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true",
                        help="print hits as JSON: one indented object for one query, one line per query otherwise")
    output.add_argument("--run-out", metavar="FILE", type=file_path,
                        help="also write a TREC run file: qid Q0 docid rank score tag (one ranking a query id: a "
                             "repeated id is an error); never one of the query files")
    output.add_argument("--run-tag", type=run_tag, default="aspire", help="the tag column of --run-out (one word)")
    output.add_argument("--run-only", action="store_true",
                        help="write only the --run-out file: nothing on stdout (--quiet with --run-out does the "
                             "same unless --json is given; --quiet alone prints one line a hit, no alignments)")
    parser.add_argument("--threads", type=positive_int,
                        help="CPU threads of torch and faiss for the queries (default: OMP_NUM_THREADS when set, "
                             "else 1). A query is one small encode and a few lookups: on cores shared with other jobs, "
                             "2 threads spin-waiting for each other made a batch 8x slower (encodes 19x); with "
                             "OMP_WAIT_POLICY=PASSIVE set before the run they do not spin, and 2 threads are safe "
                             "(experiments/results/search_batch.md)")
    add_common_options(parser, device=True, device_help="torch device for encoding queries and re-ranking "
                                                        "(default: cpu, also where CUDA is available: a query costs "
                                                        "less than CUDA's start-up)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value",
                        help=OVERRIDES_HELP + ": the index's search section, e.g. search.sentence_k_min=500")
    return parser


@dataclass
class Query:
    """One query to run: its id (the run file's qid) and its DocBatch `(1, S, D)` with the selection as mask."""

    qid: str
    batch: DocBatch
    exclude: list[str] | None = None  # ids left out of its results; None: its own id when search.exclude_query


class QueryMaker:
    """Turns indexed ids and papers into query DocBatches, loading the encoder once, on first need."""

    def __init__(self, searcher, args) -> None:
        self.searcher, self.args = searcher, args

    def load_encoder(self) -> None:
        if self.searcher.encoder is None:
            from aspire.encoders import load_encoder
            from aspire.encoders.pretrained import pinned_model
            from aspire.index.fingerprint import (
                ModelMismatchError,
                describe_backend,
                model_fingerprints,
                restate_mismatch,
            )

            index = self.searcher.index
            backend, quantize = query_backend(index, self.args)
            name = pinned_model(self.args.model) if self.args.model else index.model_name  # as the index records it
            chosen = argparse.Namespace(backend=backend, quantize=quantize, device=self.args.device)
            given = self.args.backend is not None or self.args.quantize is not None
            log.debug("encoding queries with %s (%s)", describe_backend(backend, quantize),
                     "--backend/--quantize" if given else "the index's; --backend/--quantize choose another")
            options = backend_options(chosen, None if self.args.backend else f"the index {self.args.index}")
            encoder = load_encoder(name, device=self.args.device, **options)
            try:
                index.check_model(*model_fingerprints(encoder))
            except ModelMismatchError as err:
                recorded = index.config.encode
                raise restate_mismatch(err, (index.model_name, recorded.backend, recorded.quantize),
                                       (name, backend, quantize), "this search encodes papers") from None
            self.searcher.encoder = encoder

    def _placed(self, batch: DocBatch) -> DocBatch:
        return batch if self.args.device is None else batch.to(self.args.device)

    def code(self, sentences: str | None) -> str | None:
        """The control code of a query selecting `sentences` (`--facet-code`; `aspire.encoders.codes.query_code`)."""
        facet = selection_facet(sentences)
        if self.args.facet_code == "none" or (self.args.facet_code == "auto" and not facet):
            return None  # no code whatever the model holds: its settings need not be read
        if self.searcher.encoder is not None:
            codes = self.searcher.encoder.codes
        else:  # read from the model's saved settings: no model is loaded for an indexed query without a code
            from aspire.encoders.pretrained import saved_settings

            model = self.args.model or self.searcher.index.model_name
            try:
                codes = saved_settings(model).get("codes", [])
            except ValueError as err:  # the model is not here: an indexed query is answered from the index
                if self.args.facet_code != "auto":
                    raise
                log.warning("facet code not checked (%s); the query uses its indexed vectors", err)
                return None
        from aspire.encoders.codes import query_code

        return query_code(codes, self.args.facet_code, facet)

    def from_id(self, paper_id: str, sentences: str | None) -> Query:
        if self.code(sentences) is None and not self.args.query_side:
            return Query(paper_id, self._placed(self.searcher.query_from_index(paper_id, sentences)))
        from aspire.index.fingerprint import encoder_include_title

        self.load_encoder()
        index, i = self.searcher.index, self.searcher.index.position(paper_id)
        # the stored sentences start with the title where the encoder made it sentence 0 (a blank title is not): as
        # the index records it (`title_first`, the rule its BM25 reads), else (an index saved before the record)
        # as the loaded encoder, whose fingerprint the index's matches, does
        if getattr(index, "include_title", None) is not None:  # a SentenceIndex records it (None: not recorded)
            first = int(index.title_first(i))
        else:
            first = int(encoder_include_title(self.searcher.encoder) and bool(index.titles[i].strip()))
        labels = index.labels[i][first:] if index.labels[i] is not None else None
        query = self.from_paper(Paper(paper_id, index.titles[i], index.sentences[i][first:], labels), sentences)
        query.exclude = None  # re-encoded, but an indexed paper: left out of its own results as by id
        return query

    def from_paper(self, paper, sentences: str | None) -> Query:
        """A paper to encode: it is not an indexed paper, so nothing is left out of its results, whatever its id."""
        self.load_encoder()
        code, encoder = self.code(sentences), self.searcher.encoder
        with contextlib.ExitStack() as sides:
            if code:
                sides.enter_context(encoder.using_code(code))
            if self.args.query_side:
                sides.enter_context(encoder.query_side())
            return Query(paper.paper_id, self._placed(self.searcher.query_from_paper(paper, sentences)), exclude=[])

    def from_line(self, text: str) -> Query | None:
        """A query line (module docstring); None for a blank line or a comment."""
        text = text.strip()
        if not text or text.startswith("#"):
            return None
        if text.startswith("{"):
            try:  # a key twice is refused naming it (`RepeatedKey`, a ValueError), as in a papers file
                record = loads_unique(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"invalid JSON: {err.msg} (column {err.colno})") from None
            except RecursionError:  # not a ValueError: it would end --interactive rather than name the line
                raise ValueError("invalid JSON: nested too deeply") from None
            return self.from_paper(paper_from_record(record), self.args.sentences)
        paper_id, *selection = text.split(None, 1)  # the id, then the selection after spaces or a tab
        return self.from_id(paper_id, selection[0].strip() if selection else self.args.sentences)


def query_backend(index, args) -> tuple[str, str | None]:
    """The backend and precision papers are encoded with: `--backend/--quantize` when given (a `--quantize`
    alone keeps the index's backend), else those the index records (`encode.backend/quantize`), else torch."""
    recorded = index.config.encode
    if args.backend is None and args.quantize is None:
        return recorded.backend or "torch", recorded.quantize
    return args.backend or recorded.backend or "torch", args.quantize


def read_query_papers(path: str | Path) -> list:
    """Papers from a query file: JSONL (one paper a line) or one pretty-printed JSON object, read
    with the papers-file rules (`aspire.data.papers.read_papers`; a string abstract is split)."""
    path = input_file(path, "--query-file")
    try:  # one (possibly pretty-printed) JSON object; a byte-order mark is no part of it, as the line reader skips it
        whole = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError):  # the line reader names the bad line
        whole = None
    if isinstance(whole, list):  # the line reader would call a pretty-printed one's line 1 (`[`) invalid JSON
        raise ValueError(f"{path}: a JSON array of papers: give one paper a line (JSONL), or one JSON object")
    if not isinstance(whole, dict):
        papers = read_papers(path).papers
        if not papers:  # not a search that found nothing: there was nothing to search with
            raise ValueError(f"{path}: no papers in the query file")
        return papers
    return [paper_from_record(whole, where=str(path))]  # its errors name the file, as the line reader's do


def file_queries(maker: QueryMaker, args) -> list[Query]:
    """Every query the options name, built before any search (a bad one stops the run naming it)."""
    if args.queries is not None:
        lines = _lines(args.queries)
        queries, first_line = [], {}
        progress = Progress("read", "queries", len(lines), enabled=not args.quiet and len(lines) > 1)
        for line_no, raw in enumerate(lines, start=1):
            try:
                query = maker.from_line(decoded_line(raw))
                if query is not None and args.run_out:
                    check_new_qid(query.qid, first_line)
                    first_line[query.qid] = f"line {line_no}"
            except (KeyError, ValueError) as err:
                raise ValueError(f"{args.queries}:{line_no}: {error_message(err)}") from None
            if query is not None:
                queries.append(query)
            progress.step()
        if not queries:
            raise ValueError(f"{args.queries}: no queries in the file")
        return queries
    if args.query_file is None:
        return [maker.from_id(args.query_id, args.sentences)]
    papers = read_query_papers(args.query_file)
    if args.query_id is not None:
        papers = [p for p in papers if p.paper_id == args.query_id]
        if not papers:
            raise ValueError(f"{args.query_file}: no paper with paper_id {args.query_id!r}")
    return [maker.from_paper(paper, args.sentences) for paper in papers]


def check_new_qid(qid: str, first: dict[str, str]) -> None:
    """With --run-out, each query id once: a TREC run holds one ranking a query id, and two queries of one paper
    (two selections of its sentences, say) would merge into one. `first`: the ids run so far, each with where."""
    if qid in first:
        raise ValueError(f"query id {qid!r} again (first at {first[qid]}): the run file (--run-out) holds one "
                         "ranking a query id; write each selection of a paper's sentences to a run of its own")


def _lines(path: str) -> list[bytes]:
    """The lines of a `--queries` file ('-': stdin), undecoded, read and cut as `--interactive` reads stdin's
    (`aspire.io.stream_lines`: a BOM is no part of line 1); each is decoded by `aspire.io.decoded_line` as it is read,
    a bad byte named by file, line and 1-based column."""
    if path == "-":
        return list(stream_lines(sys.stdin))
    with input_file(path, "--queries").open("rb") as handle:
        return list(stream_lines(handle))


def run_query(searcher, query: Query, args) -> tuple[list, float | None]:
    """The query's hits and its cross-encoder milliseconds (None when that stage is off)."""
    from aspire.search import search_timed

    return search_timed(searcher, query.batch, k=args.k, rerank=args.rerank, shortlist=args.shortlist,
                        stages=args.stages, fuse=args.fuse, exclude=query.exclude)


def prints_hits(args) -> bool:
    """Whether hits go to stdout: not with --run-only, nor with --quiet and --run-out unless --json."""
    return not (args.run_only or (args.quiet and args.run_out and not args.json))


def show_hits(searcher, query: Query, found: tuple[list, float | None], args, one_of_many: bool) -> None:
    """`print_hits` where `prints_hits`. With --run-out, a reader of stdout that goes away (`... | head`) ends the
    printing, not the command: the queries go on and the run file is written (said on stderr)."""
    if not prints_hits(args) or getattr(args, "stdout_gone", False):
        return
    try:
        print_hits(searcher, query, found, args, one_of_many)
    except BrokenPipeError:
        if not args.run_out or not stdout_reader_gone():
            raise
        silence_stdout()
        args.stdout_gone = True
        log.warning("stdout was closed: hits are no longer printed; the queries go on for --run-out %s",
                    args.run_out)


def print_hits(searcher, query: Query, found: tuple[list, float | None], args, one_of_many: bool) -> None:
    hits, cross_ms = found
    selected = query.batch.mask[0].nonzero()[:, 0].tolist()
    cfg = searcher.config
    cross = {"top": cfg.cross_top, "weight": cfg.cross_weight, "ms": cross_ms} if cross_ms is not None else None
    if args.json:
        out = {"query_id": query.qid, "query_sentences": selected, "rerank": args.rerank or searcher.config.rerank,
               "cross_encoder": cross, "hits": [h.to_dict() for h in hits]}
        print_json(out, ensure_ascii=False, indent=None if one_of_many else 1)
        return
    print(f"query {query.qid} sentences {selected}"
          + (f"  cross-encoder top {cross['top']} weight {cross['weight']:g}: {cross_ms:.1f} ms" if cross else ""))
    for hit in hits:
        print(f"{hit.rank:3d}. {hit.score:+.4f}  {hit.paper_id}  {one_line(hit.title)}")
        for pair in hit.pairs[:0 if args.quiet else 3]:  # --quiet: one line a hit
            print(f"       q{pair.query_sentence} <-> s{pair.hit_sentence}  L2 {pair.dist:.3f}  weight {pair.weight:.2f}")
            print(f"         q: {one_line(pair.query_text)[:110]}")
            print(f"         s: {one_line(pair.hit_text)[:110]}")
    sys.stdout.flush()


def one_line(text: str) -> str:
    """`text` with each run of whitespace (a line break, a tab) one space: a title or sentence as one line of the text
    output (a papers file keeps a title's line break, which once split a hit's line in two)."""
    return " ".join(text.split())


def run_lines(qid: str, hits: Sequence, tag: str) -> list[str]:
    """TREC run lines for one query's hits: `qid Q0 docid rank score tag` (rank from 1)."""
    from aspire.benchmarks.runs import run_line

    return [run_line(qid, hit.paper_id, hit.rank, hit.score, tag) for hit in hits]


def write_run(path: str | Path, lines: Iterable[str]) -> None:
    """Write a run file atomically (`aspire.io.write_text`)."""
    write_text(path, "".join(line + "\n" for line in lines))


def interactive(searcher, maker: QueryMaker, args, stream=None) -> int:
    """Answer query lines from `stream` (stdin) until EOF; a bad line (a byte that is not UTF-8 too: its lines are
    read undecoded, `aspire.io.stream_lines`) gets an error naming it, `stdin line N: ...` (counting blank and comment
    lines, as a `--queries` file's are), and the loop goes on. Interrupted (Ctrl-C), its `--run-out` is written with
    the queries answered so far, and said (it once lost them all), then the interrupt goes on: the command ends with
    "interrupted" and status 130, without the end-of-session notes of EOF."""
    stream = sys.stdin if stream is None else stream
    if not args.quiet:
        print(f"ready: {searcher.index.n_papers} papers. Type a query id [sentences] or a JSON paper a line; "
              "end with EOF (Ctrl-D).", file=sys.stderr, flush=True)
    run: list[str] = []
    failed, first_query = 0, {}
    asked = asked_config(searcher, args)  # the options' pipeline: one for every line
    try:
        for line_no, raw in enumerate(stream_lines(stream), start=1):
            try:
                query = maker.from_line(decoded_line(raw))
                if query is None:
                    continue
                if args.run_out:
                    check_new_qid(query.qid, first_query)
                found = run_query(searcher, query, args)
            except (KeyError, ValueError) as err:
                failed += 1
                print(f"error: stdin line {line_no}: {error_message(err)}", file=sys.stderr, flush=True)
                continue
            for line in unread_selection([query], asked):
                log.warning("stdin line %d: %s", line_no, line)
            show_hits(searcher, query, found, args, one_of_many=True)
            if args.run_out:
                run += run_lines(query.qid, found[0], args.run_tag)
            first_query[query.qid] = f"stdin line {line_no}"  # where --queries names the line of a file
    except KeyboardInterrupt:  # Ctrl-C, a common way out of a prompt: the answered queries' run is kept
        if args.run_out:
            write_run(args.run_out, run)
            log.warning("interrupted: the run of the %d quer%s answered is written to %s", len(first_query),
                        "y" if len(first_query) == 1 else "ies", args.run_out)
        raise
    for line in unused_encoder_options(searcher, args):
        log.warning("%s", line)
    if args.run_out:
        write_run(args.run_out, run)
    return 0 if not failed else 1


def asked_config(searcher, args):
    """The search config the options ask for (`checked_search_config`: a bad value stops before any query)."""
    from aspire.search import checked_search_config

    return checked_search_config(searcher.config, k=args.k, rerank=args.rerank, shortlist=args.shortlist,
                                 stages=args.stages, fuse=args.fuse)


def unused_encoder_options(searcher, args) -> list[str]:
    """A warning when --model, --backend or --quantize was given and no query paper was encoded: a paper given by id
    is searched with its stored vectors (`--model mpnet` over a minilm index once answered with minilm's, unsaid)."""
    given = [f"--{key} {value}" for key, value in (("model", args.model), ("backend", args.backend),
                                                    ("quantize", args.quantize)) if value is not None]
    if not given or searcher.encoder is not None:
        return []
    return [f"{' '.join(given)} not used: no query paper was encoded (a paper given by id is searched with its stored "
            f"vectors, encoded by the index's model {searcher.index.model_name!r}); give it in --query-file to encode it"]


def unread_selection(queries: Sequence[Query], asked) -> list[str]:
    """A warning when some of `queries` select part of their sentences and the pipeline `asked` reads no selection:
    the first stage 'whole' ranks by whole-abstract vectors, and no re-ranker or cross-encoder follows (its answer
    once said `sentences [0]` and was the whole abstract's)."""
    narrowed = [q.qid for q in queries if int(q.batch.mask[0].sum()) < q.batch.emb.shape[1]]  # (1, S, D): S sentences
    if not narrowed or asked.stages != "whole" or asked.rerank != "none" or asked.cross_encoder:
        return []
    return [f"the sentence selection of {len(narrowed)} of {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} "
            f"(e.g. {narrowed[0]!r}) is not used: the first stage 'whole' ranks by the whole-abstract vectors and no "
            "re-ranker or cross-encoder follows it; give --rerank hybrid (or minl2, ot, maxpassage) to match the selection"]


def main(argv: Sequence[str] | None = None, prog: str = "aspire search") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.run_only and not args.run_out:
        parser.error("--run-only writes only the --run-out file: give --run-out FILE")
    if args.run_tag != parser.get_default("run_tag") and not args.run_out:  # once accepted and never written
        parser.error("--run-tag is the tag column of the --run-out file: give --run-out FILE")
    given = [name for name, value in (("--query-id", args.query_id and not args.query_file),
                                      ("--query-file", args.query_file), ("--queries", args.queries),
                                      ("--interactive", args.interactive)) if value]
    if len(given) != 1:
        parser.error("give one kind of query: --query-id ID, --query-file F (with --query-id to pick one), "
                     "--queries FILE or --interactive" + (f"; got {' and '.join(given)}" if given else ""))
    setup_logging(args)
    return run_command(lambda: _run(args), args)


def set_threads(threads: int | None) -> int:
    """Set torch's and faiss's CPU threads to `threads` (None: OMP_NUM_THREADS when set, else 1); returns it."""
    import faiss
    import torch

    if threads is None:
        given = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(given) if given.isdigit() and int(given) > 0 else 1
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    return threads


def check_inputs(args, overrides: list[str]) -> None:
    """The index and the query files exist, --sentences parses, --model names a model and the config overrides hold: a
    wrong path, selection, name or key is reported before torch and faiss load."""
    from aspire.index.config import check_search_overrides
    from aspire.index.disk import require_live_generation

    check_paths(query_file=args.query_file, queries=args.queries, cross_encoder=args.cross_encoder)
    if args.sentences is not None:  # named by its option, not only at the first query
        try:
            parse_selection(args.sentences)
        except ValueError as err:
            raise ValueError(f"--sentences: {err}") from None
    if args.run_out:  # before the queries run, not at the write after them
        check_out_file(args.run_out, "--run-out", query_file=args.query_file, queries=args.queries)
        check_not_in_folders(args.run_out, "--run-out", index=args.index, cross_encoder=args.cross_encoder)
    if args.model is not None:
        check_model(args.model)
    check_search_overrides(args.index, require_live_generation(Path(args.index)), overrides)


def check_not_in_folders(path: str, option: str, **folders: str | None) -> None:
    """FileExistsError naming `option` when `path` is a file already inside one of the input `folders` (named as
    `check_paths` names them): writing it would replace one of that folder's files (`--run-out IDX/CURRENT` once
    overwrote the index's pointer to its live generation after the search, without a word). A new file there, or a
    missing folder, passes."""
    if not os.path.isfile(path):
        return
    real = Path(os.path.realpath(path))
    for name, folder in folders.items():
        if folder is not None and os.path.isdir(folder) and real.is_relative_to(os.path.realpath(folder)):
            raise FileExistsError(f"{option} {path} is a file of the --{name.replace('_', '-')} folder {folder}, "
                                  "which writing it would replace; choose another file")


def check_query_adapter(model: str) -> None:
    """ValueError naming `model` when its saved settings hold no query adapter (`--query-side` would change
    nothing: queries and papers would be one encoding), read before the model loads."""
    from aspire.encoders.pretrained import saved_settings

    scope = (saved_settings(model).get("adapter") or {}).get("scope")
    if scope != "query":
        raise ValueError(f"--query-side: {model} has no query adapter (its adapter scope is {scope or 'none'}); "
                         "queries and papers are one encoding there: leave --query-side out")


def _run(args) -> int:
    overrides = normalize_overrides(args.overrides, section="search") + cross_overrides(args)
    check_inputs(args, overrides)
    clock = time.perf_counter()
    from aspire.index.config import unused_settings
    from aspire.search import Searcher, check_whole_vectors

    clock = _took("imported torch, faiss and the search code", clock)  # where the seconds go: --log-level DEBUG
    set_threads(args.threads)
    searcher = Searcher.open(args.index, overrides)
    clock = _took(f"opened the index ({searcher.index.n_papers} papers)", clock)
    asked = asked_config(searcher, args)  # out-of-range arguments stop before any query
    check_whole_vectors(searcher.index, asked)  # --stages whole / --rerank hybrid: once here, not at every query
    if args.shortlist is not None and unused_settings(asked, ["shortlist"]):  # once taken, and read by nothing
        raise ValueError(f"--shortlist {args.shortlist}: the papers the first stage passes to a re-ranker (or the depth "
                         f"of the lists --stages ann,bm25 fuses), and this search re-ranks by none after the first "
                         f"stage {asked.stages} (its k best are the answer): leave --shortlist out, or give --rerank")
    if args.fuse is not None and asked.stages != "ann,bm25":  # said, not silently unused
        log.warning("--fuse %s is not used: it fuses the lists of --stages ann,bm25, and the first stage is %s",
                    args.fuse, asked.stages)
        args.fuse = None  # said once here: passed on, the search would say it again for every query
    typed = [o.split("=", 1)[0].strip() for o in normalize_overrides(args.overrides, section="search")]
    for unused in unused_settings(asked, typed):  # search.passage_window=3 with --rerank ot, say: once silent
        log.warning("search.%s is not used", unused)
    if args.query_side:  # read from the model's saved settings: before any model (the cross-encoder) loads
        check_query_adapter(args.model or searcher.index.model_name)
    if args.cross_encoder is not None:  # loaded (and its directory checked) before any query
        from aspire.retrieval.crossencoder import load_cross_stage

        searcher.cross_encoder = load_cross_stage(args.cross_encoder, device=args.device)
    maker = QueryMaker(searcher, args)
    if args.query_file is not None or (args.model is not None and args.interactive):
        maker.load_encoder()  # load it now: a wrong model name is reported before any query
        clock = _took("loaded the model", clock)
    if args.interactive:
        return interactive(searcher, maker, args)
    queries = file_queries(maker, args)
    for line in unused_encoder_options(searcher, args) + unread_selection(queries, asked):  # once, not each query
        log.warning("%s", line)
    clock = _took(f"made {len(queries)} quer{'y' if len(queries) == 1 else 'ies'} (encoding any paper given as text)",
                  clock)
    run: list[str] = []
    many = len(queries) > 1
    searcher.shortfalls = [] if many else None  # a batch says its short searches in one line at its end
    noted: list[tuple[str, str]] = []  # and its answers' notes (`Searcher.say`): (query id, its note) a query
    progress = Progress("searched", "queries", len(queries), enabled=many and not args.quiet)
    for query in queries:
        searcher.notes = [] if many else None  # None: a single query's note is a warning at once
        found = run_query(searcher, query, args)
        if searcher.notes:
            noted.append((query.qid, "; ".join(searcher.notes)))  # joined as the page's answer joins them
            log.debug("%s", noted[-1][1])
        show_hits(searcher, query, found, args, one_of_many=many)
        if args.run_out:  # the run's lines (which an id with a space could not make) only where a run is written
            run += run_lines(query.qid, found[0], args.run_tag)
        progress.step()
    clock = _took("searched", clock)
    for line in shortfall_summary(searcher.shortfalls or [], len(queries)) + note_summary(noted, len(queries)):
        log.warning("%s", line)
    if args.run_out:
        write_run(args.run_out, run)
    return 0


def _took(what: str, since: float) -> float:
    """Log (DEBUG) how long `what` took since `since`; returns now."""
    now = time.perf_counter()
    log.debug("%s in %.2f s", what, now - since)
    return now


def cross_overrides(args) -> list[str]:
    """The search-config overrides of the cross-encoder flags: `--cross-encoder` turns the stage on;
    `--cross-top` / `--cross-weight` set `cross_top` / `cross_weight` (checked, by name, with the config)."""
    given = [(name, value) for name, value in (("cross_top", args.cross_top), ("cross_weight", args.cross_weight))
             if value is not None]
    if given and args.cross_encoder is None:
        raise ValueError("--cross-top / --cross-weight go with --cross-encoder DIR")
    return (["cross_encoder=true"] if args.cross_encoder is not None else []) + [f"{k}={v}" for k, v in given]


if __name__ == "__main__":
    sys.exit(main())
