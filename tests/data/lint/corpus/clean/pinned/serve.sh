#!/bin/bash
# nsa-policy: device=h200
# --attn-dp-size replaces --dp-size + --enable-dp-attention, but only from 0.5.22.
exec python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 \
  --tp-size 8 \
  --attn-dp-size 8 \
  --kv-cache-dtype fp8_e4m3
