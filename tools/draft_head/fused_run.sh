#!/usr/bin/env bash
# The fused draft head's long run on a shared 2-core machine (issue 34, item 3), resumable: rerun the same command
# after any interruption. Its fourth run (from 2026-12-07) continues the shipped head, which has read every training
# shard of 0-101 (its manifest's last stages), on the shards it has never read: 102-124 (2026-12-07,
# `generate --conversations-only`; 112 is held out by the corpus's rule and not evaluated, so not built).
#
# Each stage continues where it stopped (generate.py skips finished shards, train.py
# --resume continues from the run's checkpoint). One thread, lowest priority; a second copy exits at once (lock).
#
#   nohup nice -n 19 tools/draft_head/fused_run.sh /root/specchat-draft-data >> /root/specchat-draft-data/run.log 2>&1 &
#
# DATA (the argument) must hold model-int4/ (the target the corpus was made with, SHA-256 in its manifest) and
# shipped-head/ (the head the run starts from: a copy of inference/models/data/SmolLM2-135M-Instruct-head).
# 1. Rebuild DATA/data from the committed corpus with the outputs of decoder layers 1 and 14 (EAGLE-3's low and mid
#    features beside the final hidden state): held-out shards 0, 16, 32, then the 22 training shards among 102-124
#    and no others: ~3.5 MB of features per 1,000 tokens, ~6 GB for these 25 shards, 6-8 minutes a shard on one
#    thread of a quiet Zen 4 or Xeon.
# 2. Train the fused head from the shipped one (train.py: with --init-head it begins as the shipped head) on those
#    22 training shards, streamed a few shards at a time, with the training-time test over 3 draft steps. DATA/data
#    must hold no other training shards (train.py trains on every one its manifest lists).
set -euo pipefail
DATA=$(realpath "${1:?usage: fused_run.sh DATA_DIR}")
cd "$(dirname "$0")/../.."
exec 9>"$DATA/run.lock"
flock -n 9 || { echo "$(date -Is) another fused_run.sh holds $DATA/run.lock: exiting"; exit 0; }
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
PYTHON=${PYTHON:-.venv/bin/python}
echo "$(date -Is) fused_run.sh: commit $(git rev-parse --short HEAD), pid $$"
"$PYTHON" -m tools.draft_head.generate --out "$DATA/data" --model "$DATA/model-int4" --shards 125 --layers 1 14 \
    --threads 1 --only 0 16 32 $(seq 102 111) $(seq 113 124)
echo "$(date -Is) data folder complete; training"
"$PYTHON" -m tools.draft_head.train --data "$DATA/data" --out "$DATA/runs/fused" --init-head "$DATA/shipped-head" \
    --epochs 2 --lr 0.001 --draft-steps 3 --stream-shards 4 --threads 1 --held-out-shards 0 16 32 --resume
echo "$(date -Is) fused_run.sh: done"
