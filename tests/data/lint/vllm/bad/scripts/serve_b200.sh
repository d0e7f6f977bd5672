#!/bin/bash
# nsa-policy: device=b200
export VLLM_ATTENTION_BACKEND=FLASHMLA_SPARSE
vllm serve deepseek-ai/DeepSeek-V3.2 \
  --tensor-parallel-size 8 \
  --attention-backend ROCM_AITER_MLA_SPARSE \
  --kv-cache-dtype fp8

# The same server with a typo in the backend name.
vllm serve deepseek-ai/DeepSeek-V3.2 --tensor-parallel-size 8 --attention-backend=FLASHMLA_SPARS
