#!/bin/sh
# Serves DeepSeek-V3.2 on one 8 × H200 node.
# nsa-policy: device=h200
exec python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp-size 8 \
    --kv-cache-dtype fp8_e4m3 --dsa-decode-backend fa3 --port 30000
