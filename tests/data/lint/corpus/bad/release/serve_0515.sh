#!/bin/bash
# nsa-policy: device=h200
set -euo pipefail
pip install "sglang[all]==0.5.15"
python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention \
  --kv-cache-dtype bfloat16 \
  --dsa-decode-backend flashmla-sparse
