#!/bin/bash
# MI300X pool, copied from the H200 launcher.  nsa-policy: device=mi300x
set -euo pipefail
# tuned on H200; MI300X has no dense MHA one-shot prefill, so it does nothing here
export SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=1024
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 \
  --kv-cache-dtype fp8_e4m3 --host 0.0.0.0 --port 30000
