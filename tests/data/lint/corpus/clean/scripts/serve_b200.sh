#!/bin/bash
# Blackwell launcher.  nsa-policy: device=b200
set -e
KV_DTYPE=${KV_DTYPE:-fp8_e4m3}
PREFILL=${PREFILL_BACKEND:-trtllm}

sglang serve \
    --model-path deepseek-ai/DeepSeek-V3.2 \
    --tp-size 8 --dp-size 8 --enable-dp-attention \
    --kv-cache-dtype "$KV_DTYPE" \
    --dsa-prefill-backend "$PREFILL" \
    --dsa-decode-backend trtllm \
    --host 0.0.0.0 --port 30000

# canary replica for GLM-5
python -m sglang.launch_server --model-path zai-org/GLM-5 --tp 8 \
    --kv-cache-dtype fp8_e4m3 --dsa-decode-backend trtllm --decode-log-interval $LOG_INTERVAL
