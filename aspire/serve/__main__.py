"""`python -m aspire.serve --index DIR [--corpus papers.jsonl] [--host 127.0.0.1] [--port 8000] [key=value ...]`."""

from __future__ import annotations

import argparse
import logging
import sys

from aspire.serve.server import make_server
from aspire.serve.service import open_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aspire.serve", description="Serve the aspect-selection page.")
    parser.add_argument("--index", required=True, help="index directory (python -m aspire.index build)")
    parser.add_argument("--corpus", help="papers JSONL with pred_labels: facet labels shown beside the sentences")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("overrides", nargs="*", help="search config overrides, e.g. rerank=ot shortlist=200")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = open_service(args.index, args.overrides, args.corpus)
    server = make_server(service, args.host, args.port)
    print(f"serving {server.url} ({service.index.n_papers} papers, {len(service.labels)} with facet labels)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
