"""`python -m aspire.serve --index DIR [--corpus papers.jsonl] [--host 127.0.0.1] [--port 8000] [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import sys

from aspire.serve.reload import ServiceHolder
from aspire.serve.server import make_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aspire.serve", description="Serve the aspect-selection page.")
    parser.add_argument("--index", required=True, help="index directory (python -m aspire.index build)")
    parser.add_argument("--corpus", help="papers JSONL with pred_labels: facet labels shown beside the sentences")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument("--check-every", type=float, default=0.0, metavar="SECONDS",
                        help="how often a request checks whether the index was rebuilt (default 0: every request)")
    parser.add_argument("--no-auto-reload", action="store_true",
                        help="serve one generation until POST /api/reload asks for the live one")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("overrides", nargs="*", help="search config overrides, e.g. rerank=ot shortlist=200")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        holder = ServiceHolder(args.index, args.overrides, args.corpus,
                               check_every=None if args.no_auto_reload else max(args.check_every, 0.0))
        server = make_server(holder, args.host, args.port)
    except (OSError, ValueError, KeyError) as exc:  # a missing or broken index, a bad override, a busy port
        print(f"error: {exc}", file=sys.stderr)
        return 2
    service = holder.service
    print(f"serving {server.url} ({service.index.n_papers} papers, {len(service.labels)} with facet labels, "
          f"index {service.generation})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
