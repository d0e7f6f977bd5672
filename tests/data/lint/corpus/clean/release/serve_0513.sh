#!/bin/bash
# nsa-policy: device=rtx-pro-6000
set -euo pipefail
pip install "sglang[all]==0.5.17"
export SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=2048
python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention \
  --kv-cache-dtype fp8_e4m3 \
  --dsa-decode-backend flashinfer_sparse_mla \
  --dsa-prefill-backend flashinfer_sparse_mla
