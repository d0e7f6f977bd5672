#!/usr/bin/env bash
# Start DeepSeek-V3.2 on the H200 pool.  nsa-policy: device=h200
set -euo pipefail
MODEL=${MODEL:-deepseek-ai/DeepSeek-V3.2}
python3 -m sglang.launch_server \
  --model-path "$MODEL" \
  --tp 8 --dp 8 --enable-dp-attention \
  --kv-cache-dtype bfloat16 \
  --nsa-prefill-backend flashmla_sparse \
  --mem-fraction-static 0.85 \
  --host 0.0.0.0 --port 30000 > /var/log/sglang.log 2>&1 &
