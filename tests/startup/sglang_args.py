"""A small argparse parser with sglang's flag names and defaults for the arguments nsa-policy reads.

Mirrors `sglang.srt.server_args.ServerArgs.add_cli_args` (v0.5.10) for these flags: the same
option strings, dests, types and defaults (kv_cache_dtype "auto", backends/page size None, tp/dp 1,
switches False; tp/dp land in tensor_parallel_size / data_parallel_size, as in sglang's
parser). `dsa=True` adds the later --dsa-* spellings.
"""
from __future__ import annotations

import argparse

KV_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
NSA_BACKENDS = ["flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm"]


def sglang_parser(*, dsa: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", "--model", type=str, required=True)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--kv-cache-dtype", type=str, default="auto", choices=KV_DTYPES)
    p.add_argument("--quantization", type=str, default=None)
    p.add_argument("--page-size", type=int, default=None)
    # dest tensor_parallel_size / data_parallel_size: ServerArgs.from_cli_args copies them to tp_size / dp_size
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    p.add_argument("--data-parallel-size", "--dp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--attention-backend", type=str, default=None)
    prefix = "dsa" if dsa else "nsa"
    p.add_argument(f"--{prefix}-prefill-backend", type=str, default=None, choices=NSA_BACKENDS)
    p.add_argument(f"--{prefix}-decode-backend", type=str, default=None, choices=NSA_BACKENDS)
    p.add_argument("--enable-hisparse", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--speculative-algorithm", type=str, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    return p


DSA_BACKENDS_0_5_23 = ["flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla",
                       "triton_sparse_mla", "fa3", "tilelang", "triton", "aiter", "trtllm", "intel_xpu"]


def sglang_0_5_23_parser() -> argparse.ArgumentParser:
    """sglang 0.5.23's spellings of the same arguments, written by hand from its wheel
    (arg_groups/fields/{parallel,exec_}.py, server_args.py): dests are the field names, no --nsa-*,
    --attn-dp-size, and --enable-dp-attention only as a deprecated switch."""
    p = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=True)
    p.add_argument("--model-path", "--model", type=str, required=True)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--kv-cache-dtype", type=str, default="auto",
                   choices=KV_DTYPES[:-1] + ["mxfp8", "nvfp4", "fp4_mx_block16"])
    p.add_argument("--quantization", type=str, default=None)
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--attention-backend", type=str, default=None)
    p.add_argument("--dsa-prefill-backend", type=str, default=None, choices=DSA_BACKENDS_0_5_23)
    p.add_argument("--dsa-decode-backend", type=str, default=None,
                   choices=[b for b in DSA_BACKENDS_0_5_23 if b != "triton_sparse_mla"])
    p.add_argument("--enable-hisparse", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--speculative-algorithm", type=str, default=None)
    return p
