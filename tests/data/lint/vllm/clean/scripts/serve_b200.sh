#!/bin/bash
# nsa-policy: device=b200
# What nsa-policy recommends for DeepSeek-V3.2 on B200 (vllm-default): fp8 KV on FLASHINFER_MLA_SPARSE.
vllm serve deepseek-ai/DeepSeek-V3.2 \
  --tensor-parallel-size 8 \
  --attention-backend FLASHINFER_MLA_SPARSE \
  --kv-cache-dtype fp8_e4m3 \
  --block-size 64
