#!/bin/bash
# Blackwell launcher.  nsa-policy: device=b200
set -e
KV_DTYPE=${KV_DTYPE:-fp8_e4m3}
PREFILL=${PREFILL_BACKEND:-trtllm}

sglang serve \
    --model-path deepseek-ai/DeepSeek-V3.2 \
    --tp-size 8 \
    --kv-cache-dtype "$KV_DTYPE" \
    --dsa-prefill-backend "$PREFILL" \
    --nsa-decode-backend flashmla_kv \
    --host 0.0.0.0 --port 30000

# canary replica for GLM-5
python -m sglang.launch_server --model-path zai-org/GLM-5 --tp 8 \
    --kv-cache-dtype fp8_e4m3 --dsa-decode-backend flashmla-kv --decode-log-interval $LOG_INTERVAL
