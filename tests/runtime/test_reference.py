"""The sparse-MLA reference against a dense masked softmax, and the fp8 layouts."""
import math

import pytest

torch = pytest.importorskip("torch")

from nsa_policy.runtime import (  # noqa: E402
    dequantize_fp8_656,
    dequantize_fp8_per_tensor,
    quantize_fp8_656,
    quantize_fp8_per_tensor,
    softmax_scale_for,
    sparse_mla_reference,
)
from nsa_policy.runtime.reference import dense_masked_reference  # noqa: E402


def random_problem(seed, t=6, h=3, n=40, k=9, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, h, 576, generator=g).to(dtype)
    kv = torch.randn(n, 576, generator=g).to(dtype)
    idx = torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(t)])
    idx[torch.rand(t, k, generator=g) < 0.2] = -1
    idx[0] = -1                      # a token with no valid index
    idx[1, : k // 2] = -1            # holes
    return q, kv, idx


@pytest.mark.parametrize("seed", range(5))
def test_reference_matches_dense_masked_softmax(seed):
    q, kv, idx = random_problem(seed)
    scale = softmax_scale_for(128, 64, 40.0, 1.0)
    out = sparse_mla_reference(q.double(), kv.double(), idx, scale)  # fp64 math for fp64 inputs
    dense = dense_masked_reference(q, kv, idx, scale)
    torch.testing.assert_close(out, dense, rtol=1e-10, atol=1e-12)


def test_empty_row_is_zero_with_minus_inf_lse_and_lse_is_natural_log():
    q, kv, idx = random_problem(7)
    scale = 0.1
    out, lse = sparse_mla_reference(q, kv, idx, scale, return_lse=True, out_dtype=torch.float64)
    assert torch.count_nonzero(out[0]) == 0 and torch.isinf(lse[0]).all() and (lse[0] < 0).all()
    t, h = 2, 1
    valid = idx[t][idx[t] >= 0]
    logits = (kv[valid].double() @ q[t, h].double()) * scale
    assert math.isclose(float(lse[t, h]), float(torch.logsumexp(logits, 0)), rel_tol=1e-5)


def test_bf16_inputs_compute_in_fp32_and_return_bf16():
    q, kv, idx = random_problem(3, dtype=torch.bfloat16)
    out = sparse_mla_reference(q, kv, idx, 0.1)
    assert out.dtype == torch.bfloat16
    ref = sparse_mla_reference(q.float(), kv.float(), idx, 0.1)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=8e-3)


def test_large_token_counts_are_chunked_consistently(monkeypatch):
    import nsa_policy.runtime.reference as reference
    q, kv, idx = random_problem(4, t=20)
    whole = sparse_mla_reference(q, kv, idx, 0.2)
    monkeypatch.setattr(reference, "_GATHER_BUDGET", 3 * 9 * 576)  # 3 tokens per chunk
    torch.testing.assert_close(sparse_mla_reference(q, kv, idx, 0.2), whole, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw, match", [
    (dict(q=torch.zeros(2, 1, 512)), "q must be"),
    (dict(kv=torch.zeros(4, 656)), "kv must be"),
    (dict(indices=torch.zeros(3, 2, dtype=torch.int64)), "indices must be"),
    (dict(indices=torch.full((2, 2), 4)), "indices must be < N"),
])
def test_reference_rejects_bad_inputs(kw, match):
    args = dict(q=torch.zeros(2, 1, 576), kv=torch.zeros(4, 576), indices=torch.zeros(2, 2, dtype=torch.int64))
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        sparse_mla_reference(args["q"], args["kv"], args["indices"], 0.1)


def test_softmax_scale_is_192_based_with_yarn_mscale_squared():
    assert math.isclose(softmax_scale_for(128, 64, 40.0, 1.0), 0.135234, rel_tol=1e-5)
    assert math.isclose(softmax_scale_for(), 192 ** -0.5)


def test_fp8_656_layout_round_trip():
    g = torch.Generator().manual_seed(1)
    kv = (torch.randn(7, 576, generator=g) * torch.logspace(-3, 2, 7)[:, None]).to(torch.bfloat16)
    packed = quantize_fp8_656(kv)
    assert packed.shape == (7, 656) and packed.dtype == torch.uint8
    scales = packed[:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(scales, torch.exp2(torch.log2(scales).round()))  # powers of two
    back = dequantize_fp8_656(packed, torch.float32)
    assert torch.equal(back[:, 512:], kv[:, 512:].float())          # rope is kept in bf16
    rel = (back[:, :512] - kv[:, :512].float()).norm(dim=1) / kv[:, :512].float().norm(dim=1)
    assert float(rel.max()) < 0.07                                   # e4m3: 3 mantissa bits
    # every scale covers its tile: no value clipped at ±448
    tiles = kv[:, :512].float().reshape(7, 4, 128).abs().amax(-1)
    assert bool((tiles <= scales * 448).all())


def test_fp8_per_tensor_round_trip():
    x = torch.randn(5, 576) * 3
    q, scale = quantize_fp8_per_tensor(x)
    assert q.dtype == torch.float8_e4m3fn and math.isclose(scale, float(x.abs().max()) / 448, rel_tol=1e-6)
    back = dequantize_fp8_per_tensor(q, scale, torch.float32)
    assert float((back - x).norm() / x.norm()) < 0.07
    with pytest.raises(ValueError, match="scale must be > 0"):
        quantize_fp8_per_tensor(x, scale=0.0)
