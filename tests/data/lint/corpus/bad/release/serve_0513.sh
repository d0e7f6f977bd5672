#!/bin/bash
# nsa-policy: device=rtx-pro-6000
set -euo pipefail
pip install "sglang[all]==0.5.13"
python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention \
  --kv-cache-dtype fp8_e4m3 \
  --nsa-decode-backend flashinfer_sparse_mla \
  --dsa-prefill-backend flashinfer_sparse_mla \
  --dense-attn-kv-len-threshold 2048
