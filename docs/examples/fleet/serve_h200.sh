#!/usr/bin/env bash
# DeepSeek-V3.2 on the H200 pool.  nsa-policy: device=h200
set -euo pipefail
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --tp 8 --dp 8 --enable-dp-attention \
  --kv-cache-dtype bfloat16 \
  --dsa-prefill-backend trtllm \
  --mem-fraction-statc 0.85 --host 0.0.0.0 --port 30000
