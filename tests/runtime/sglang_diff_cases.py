"""Batches for the differential test against sglang's own trtllm / sm12x calls (issue 12, item 5).

Imported by the test (project python) and by `sglang_call_recorder.py` (run inside a sglang side
environment), so it needs torch only. Every tensor is made from integer arithmetic, not a random
generator, so both processes build the same bytes whatever their torch build.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

HEADS = 16
TOP_K = 64            # a multiple of 64: sm12x's prefill rule, and of 4: trtllm-gen's
BLOCK = 64            # the engine's block-table page (table page size 64)
POOL_BLOCKS = 8
POOL_TOKENS = POOL_BLOCKS * BLOCK
BLOCK_ORDER = (7, 2, 5, 0, 6, 3, 1, 4)  # requests get pool blocks in this (non-identity) order
SCALE = 0.1352          # softmax scale stand-in (the layer's `scaling`)

# decode: one query row per request; prefill: extend_lens new tokens after a prefix
DECODE_SEQ_LENS = (5, 64, 150, 1)
PREFILL_EXTEND = (3, 4, 2)
PREFILL_SEQ = (43, 4, 102)     # prefix 40 / 0 / 100


@dataclass(frozen=True)
class Case:
    backend: str            # "trtllm" (sm100) or "flashinfer_sparse_mla" (sm12x)
    phase: str              # "decode" or "prefill"
    kv: str                 # "bf16" or "fp8"
    page_size: int          # the KV pool's page size (the kernel's block size)
    table_page_size: int    # the page table the adapter gets: 1 = token slots, 64 = block table

    @property
    def name(self) -> str:
        return f"{self.backend}-{self.phase}-{self.kv}-page{self.page_size}-table{self.table_page_size}"


def cases() -> list[Case]:
    out = []
    for phase in ("decode", "prefill"):
        for kv in ("bf16", "fp8"):
            for page in (32, 64):
                for table in (1, 64):
                    out.append(Case("trtllm", phase, kv, page, table))
        for table in (1, 64):  # sglang's sm12x path: fp8-656, page 64 only
            out.append(Case("flashinfer_sparse_mla", phase, "fp8", 64, table))
    return out


def _values(n: int, salt: int) -> torch.Tensor:
    """n deterministic floats in [-0.5, 0.5]."""
    i = torch.arange(n, dtype=torch.int64) + salt * 1_000_003
    return ((i * 2654435761) % 2001 - 1000).to(torch.float32) / 2000.0


def batch(phase: str) -> dict:
    """Request layout, per-token causal lengths, token and block tables, top-k rows."""
    if phase == "decode":
        seq = list(DECODE_SEQ_LENS)
        ext = [1] * len(seq)
    else:
        seq, ext = list(PREFILL_SEQ), list(PREFILL_EXTEND)
    blocks_per_req = [(s + BLOCK - 1) // BLOCK for s in seq]
    width_blocks = max(blocks_per_req)
    order = iter(BLOCK_ORDER)
    block_table = torch.zeros(len(seq), width_blocks, dtype=torch.int32)
    for b, n in enumerate(blocks_per_req):
        for j in range(n):
            block_table[b, j] = next(order)
    pos = torch.arange(width_blocks * BLOCK)
    token_table = (block_table[:, pos // BLOCK] * BLOCK + (pos % BLOCK)).to(torch.int32)
    causal = []
    for s, e in zip(seq, ext):
        causal += [s - e + i + 1 for i in range(e)]
    rows = []
    for t, length in enumerate(causal):
        if length <= TOP_K:   # sglang's indexer: 0..L-1 then -1
            rows.append(list(range(length)) + [-1] * (TOP_K - length))
        else:                 # K distinct positions in no particular order (7919 is prime, > L)
            rows.append([(j * 7919 + t) % length for j in range(TOP_K)])
    return dict(seq_lens=seq, extend_lens=ext, causal=causal, block_table=block_table,
                token_table=token_table, topk=torch.tensor(rows, dtype=torch.int32))


def tensors(case: Case, num_tokens: int) -> dict:
    """q_nope [T,H,512] / q_rope [T,H,64] (bf16) and the KV pool as the cache stores it."""
    q = _values(num_tokens * HEADS * 576, 1).view(num_tokens, HEADS, 576).to(torch.bfloat16)
    if case.backend == "flashinfer_sparse_mla":
        # fp8-656 rows: bytes as written by a cache writer (content only hashed and passed on)
        raw = ((torch.arange(POOL_TOKENS * 656, dtype=torch.int64) * 40503) % 251).to(torch.uint8)
        pool = raw.view(POOL_TOKENS, 656)
    else:
        pool = _values(POOL_TOKENS * 576, 2).view(POOL_TOKENS, 576).to(torch.bfloat16)
        if case.kv == "fp8":
            pool = pool.to(torch.float8_e4m3fn)
    return dict(q_nope=q[..., :512].contiguous(), q_rope=q[..., 512:].contiguous(), pool=pool)


def digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's elements in logical order (what a kernel reading the view sees)."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8).cpu()
    return hashlib.sha256(raw.numpy().tobytes()).hexdigest()


def describe(value):
    """A JSON-able record of one keyword argument of the flashinfer call."""
    if isinstance(value, torch.Tensor):
        rec = dict(kind="tensor", dtype=str(value.dtype).replace("torch.", ""), shape=list(value.shape))
        if value.dtype in (torch.int32, torch.int64) and value.numel() <= 4096:
            rec["values"] = value.cpu().tolist()
        else:
            rec["sha256"] = digest(value)
        return rec
    if value is None or isinstance(value, (bool, int, float, str)):
        return dict(kind="scalar", value=value)
    return dict(kind="other", type=type(value).__name__)
