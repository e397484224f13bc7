#!/usr/bin/env bash
# On the H200: build and run the standalone sm_90a attention mainloop check, then the anchors.
set -u
cd "$(dirname "$0")"
INC=../../src/backends/cuda/device
FLAGS="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I$INC"
nvcc $FLAGS attention_sm90_check.cu -lcuda -o attn_check || exit 1
for b in attn_check; do
  echo "== $b SASS:"; cuobjdump --dump-sass $b | grep -oE "HGMMA\.[A-Z0-9x.]*|UTMALDG[A-Z0-9.]*" | sort | uniq -c
done
timeout 120 ./attn_check
if [ "${1:-}" = "anchors" ]; then
  PYTHONUNBUFFERED=1 timeout 300 python3 ../anchors.py
fi
