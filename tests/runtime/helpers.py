"""Shared test helpers: naive references written as plain loops, and decision stand-ins."""
from __future__ import annotations

import types


def naive_transform(page_table, topk, row_request, page_size):
    """Per-token, per-entry loop: the obvious reading of RUNTIME.md §1.

    row_request[t] is the request of query row t (None: the row belongs to no request)."""
    pt = page_table.tolist()
    out = []
    for t, row in enumerate(topk.tolist()):
        b = row_request[t]
        width = len(pt[b]) * page_size if b is not None else 0
        res = []
        for i in row:
            if b is not None and 0 <= i < width and pt[b][i // page_size] >= 0:
                res.append(pt[b][i // page_size] * page_size + i % page_size)
            else:
                res.append(-1)
        out.append(res)
    return out


def rows_of(extend_lens):
    rows = []
    for b, n in enumerate(extend_lens):
        rows += [b] * n
    return rows


def decision(**overrides):
    """A duck-typed decision with the attributes SparseMLAAdapter / BatchPlanner read."""
    base = dict(
        applies=True, device_class="sm90", kv_cache_dtype="bfloat16", kv_cache_layout="bf16-576",
        prefill_backend="flashmla_sparse", decode_backend="fa3", page_size=64, index_topk=2048,
        dense_attn_kv_len_threshold=2048, heads_per_rank=None,
        runtime=types.SimpleNamespace(mha_chunk_capacity=131072, flashmla_auto_ratio=512,
                                      mha_one_shot=True),
        errors=[],
    )
    base.update(overrides)
    return types.SimpleNamespace(**base)
