#!/bin/bash
# MI300X pool.  nsa-policy: device=mi300x
set -euo pipefail
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 \
  --kv-cache-dtype fp8_e4m3 --host 0.0.0.0 --port 30000
