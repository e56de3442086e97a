"""Serve the aspect-selection page over an index: pick a paper, select its sentences, see what matches.

`aspire serve --index DIR [--corpus papers.jsonl] [--cross-encoder DIR] [--host 127.0.0.1] [--port 8000]
[section.key=value ...]`; with `--cross-encoder`, the page offers that model as a last stage (off by default).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from aspire import cliutil

EXAMPLES = """\
  aspire serve --index runs/index                                  # http://127.0.0.1:8000
  aspire serve --index runs/index --corpus papers.jsonl search.rerank=ot search.shortlist=200
  aspire serve --index runs/index --host 0.0.0.0 --port 8080 --no-auto-reload --quiet
  aspire serve --index runs/index --cross-encoder runs/crossencoder/model search.cross_top=20
"""


def main(argv: list[str] | None = None, prog: str = "python -m aspire.serve") -> int:
    parser = cliutil.command_parser(prog, __doc__, EXAMPLES)
    parser.add_argument("--index", required=True, help="index directory (made by `aspire index build`)")
    parser.add_argument("--corpus", help="papers JSONL with pred_labels: facet labels shown beside the sentences")
    parser.add_argument("--cross-encoder", metavar="DIR",
                        help="a trained cross-encoder the page can add as a last stage over the top "
                             "search.cross_top hits, mixed by search.cross_weight (off unless a request asks)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument("--check-every", type=float, metavar="SECONDS",
                        help="how often a request checks whether the index was rebuilt (default 0: every request)")
    parser.add_argument("--no-auto-reload", action="store_true",
                        help="serve one generation until POST /api/reload asks for the live one")
    cliutil.add_common_options(parser)
    parser.add_argument("overrides", nargs="*", metavar="section.key=value",
                        help=cliutil.OVERRIDES_HELP + ": the index's search section, e.g. search.rerank=ot")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0..65535, got {args.port}")
    if args.check_every is not None and args.no_auto_reload:  # once ignored without a word
        parser.error("--check-every and --no-auto-reload contradict each other: give one of them")
    args.check_every = 0.0 if args.check_every is None else args.check_every
    if not 0 <= args.check_every < math.inf:  # inf once passed: one check on the first request, then none
        parser.error(f"--check-every must be a finite number >= 0 of seconds, got {args.check_every}")
    cliutil.setup_logging(args)
    return cliutil.run_command(lambda: _serve(args), args)


def _serve(args) -> int:
    from aspire.index.config import check_search_overrides
    from aspire.index.disk import require_live_generation

    cliutil.check_paths(cross_encoder=args.cross_encoder)
    if args.corpus is not None:  # a folder was refused only once the index and the cross-encoder had loaded, unnamed
        cliutil.input_file(args.corpus, "--corpus")
    overrides = cliutil.normalize_overrides(args.overrides, section="search")
    check_search_overrides(args.index, require_live_generation(Path(args.index)), overrides)  # before torch, faiss
    from aspire.serve.requests import check_overrides

    check_overrides(overrides)  # search.k / search.shortlist within what the page serves
    unread = [o for o in overrides if o.split("=", 1)[0].strip() in ("cross_top", "cross_weight")]
    if unread and args.cross_encoder is None:  # once taken, and read by nothing (as `aspire search` refuses them)
        raise ValueError(f"search.{unread[0]}: the cross-encoder stage's settings go with --cross-encoder DIR, "
                         "and no cross-encoder is given")
    from aspire.serve.reload import ServiceHolder
    from aspire.serve.server import bind, make_server

    # bound before any model is loaded: an address in use or a host that does not resolve once failed only after
    # the encoder (and the cross-encoder) had been loaded
    sock = bind(args.host, args.port)
    try:
        cross = None
        if args.cross_encoder is not None:  # loaded once (its directory checked) and kept across index generations
            from aspire.retrieval.crossencoder import load_cross_stage

            cross = load_cross_stage(args.cross_encoder)
        holder = ServiceHolder(args.index, overrides, args.corpus,
                               check_every=None if args.no_auto_reload else args.check_every, cross_encoder=cross)
        server = make_server(holder, sock=sock)
    except BaseException:
        sock.close()
        raise
    service = holder.service
    print(f"serving {server.url} ({service.index.n_papers} papers, {len(service.labels)} with facet labels, "
          f"index {service.generation}" + (f", cross-encoder {args.cross_encoder}" if cross else "") + ")", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
