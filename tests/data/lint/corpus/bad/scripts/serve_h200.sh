#!/usr/bin/env bash
# Start DeepSeek-V3.2 on the H200 pool.  nsa-policy: device=h200
set -euo pipefail
MODEL=${MODEL:-deepseek-ai/DeepSeek-V3.2}
export SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=131072
python3 -m sglang.launch_server \
  --model-path "$MODEL" \
  --tp 8 \
  --kv-cache-dtype bfloat16 \
  --nsa-prefill-backend trtllm \
  --mem-fraction-statc 0.85 \
  --tp-size 4 \
  --host 0.0.0.0 --port 30000 > /var/log/sglang.log 2>&1 &
