"""Command line of the papers reader (`aspire.data.papers`), run as `python -m aspire.data.papers`.

    python -m aspire.data.papers check FILE [--skip-bad] [--splitter NAME]
    python -m aspire.data.papers split FILE --out OUT [--splitter NAME]

`check` prints the counts and every rejected record; it exits 1 when a record was rejected. `split`
writes the papers with their abstracts split into sentences once (`split_file`; a sharded encoding's
ranks and the training tasks then skip splitting), naming every rejected record it leaves out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aspire.data.papers import BadRecordError, read_papers, split_file
from aspire.data.sentences import DEFAULT_SPLITTER


def main(argv: list[str] | None = None) -> int:
    """`check FILE [--skip-bad] [--splitter NAME]`: print counts and rejected records; 1 if any.
    `split FILE --out OUT [--splitter NAME]`: `split_file`; prints the count and every rejected record."""
    parser = argparse.ArgumentParser(prog="python -m aspire.data.papers", description="Check a JSONL papers file.")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="read FILE and report papers, rejected records and blank lines")
    check.add_argument("file", type=Path)
    check.add_argument("--skip-bad", action="store_true", help="list every bad record instead of stopping at the first")
    check.add_argument("--splitter", default=DEFAULT_SPLITTER, help="sentence splitter for string abstracts")
    split = sub.add_parser("split", help="write FILE's papers to OUT with abstracts split into sentences once")
    split.add_argument("file", type=Path)
    split.add_argument("--out", type=Path, required=True, help="the JSONL file to write (atomically)")
    split.add_argument("--splitter", default=DEFAULT_SPLITTER, help="sentence splitter for string abstracts")
    args = parser.parse_args(argv)
    if args.command == "split":
        written, rejected = split_file(args.file, args.out, args.splitter)
        print(f"{written} papers written to {args.out}, {len(rejected)} rejected record(s) not written")
        for record in rejected:
            print(f"rejected: {record}")
        return 0
    try:
        result = read_papers(args.file, splitter=args.splitter, skip_bad=args.skip_bad)
    except BadRecordError as e:
        print(f"bad record: {e}", file=sys.stderr)
        return 1
    print(result.summary())
    for rejected in result.rejected:
        print(f"rejected: {rejected}")
    return 1 if result.rejected else 0


if __name__ == "__main__":
    sys.exit(main())
