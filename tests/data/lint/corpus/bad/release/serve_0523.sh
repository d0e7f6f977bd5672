#!/bin/bash
# nsa-policy: device=b200
set -euo pipefail
pip install "sglang[all]==0.5.23"
python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 \
  --kv-cache-dtype fp8_e4m3 \
  --dsa-decode-backend flashmla-sparse-q8
