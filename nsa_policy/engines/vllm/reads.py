"""The rule facts vLLM's selector reads (catalog/vllm.py selector_facts), apart from that module so the
rule compiler can name them without importing the vLLM catalog: an sglang resolve never loads it."""
from __future__ import annotations

# What a rule or value that runs vLLM's validation declares it reads.
SELECTOR_READS = ("device.major", "out.requested_kv_cache_dtype", "config.page_size", "config.dcp_size",
                  "config.prefill_context_parallel_size", "derived.heads_per_rank", "model.index_topk", "model.family",
                  "model.qk_rope_head_dim")
