"""FlashMLA backends (flashmla_sparse, flashmla_kv, flashmla_auto) through sgl-flash-mla.

sgl-flash-mla needs a GPU (and is not in CI's install), so a recording stand-in takes its place:
every call is bound against the signatures read from the 1.0.0 wheel (fixtures/, parsed, not
imported), checked against the kernels' documented shape rules, then evaluated the way the
kernels document it (−1 = unused, topk_length, 64/128 heads, the 656-byte V3.2 layout with its
fp32 scales as stored), so a wrong table, scale or layout shows up against the reference.
The real kernels are checked on an H200 by benchmarks/gpu_flashmla_check.py."""
import inspect
import json
import pathlib
import types

import pytest

torch = pytest.importorskip("torch")

from nsa_policy.runtime import (  # noqa: E402
    AdapterConfigError,
    SparseMLAAdapter,
    dequantize_fp8_656,
    quantize_fp8_656,
    softmax_scale_for,
    sparse_mla_reference,
    transform_index_page_table_prefill,
)

from .helpers import decision  # noqa: E402
from .test_adapter import FakeMLAWrapper, close, expected, ragged_problem, real_signatures  # noqa: E402

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "sgl_flash_mla_1.0.0_signatures.json"
SIGS = json.loads(FIXTURE.read_text())["signatures"]
SCALE = softmax_scale_for(128, 64, 40.0, 1.0)


def signature(name):
    kinds = {k: getattr(inspect.Parameter, k) for k in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY",
                                                         "VAR_POSITIONAL", "VAR_KEYWORD")}
    return inspect.Signature([
        inspect.Parameter(p["name"], kinds[p["kind"]],
                          default=None if p["has_default"] else inspect.Parameter.empty)
        for p in SIGS[f"flash_mla.{name}"]])


class SchedMeta:
    """FlashMLASchedMeta's contract: the first call fixes the config, later ones must match."""

    def __init__(self):
        self.config = None


class FakeFlashMLA:
    """Stands in for the `flash_mla` module of sgl-flash-mla 1.0.0."""

    __version__ = "1.0.0"

    def __init__(self):
        self.sparse_calls, self.kv_calls, self.metas = [], [], []

    def get_mla_metadata(self, *args, **kwargs):
        signature("get_mla_metadata").bind(*args, **kwargs)
        meta = SchedMeta()
        self.metas.append(meta)
        return meta, None

    def flash_mla_sparse_fwd(self, *args, **kwargs):
        bound = signature("flash_mla_sparse_fwd").bind(*args, **kwargs)
        kw = bound.arguments
        self.sparse_calls.append(kw)
        q, kv, indices, topk_length = kw["q"], kw["kv"], kw["indices"], kw.get("topk_length")
        assert kw["use_legacy"] is True and kw["d_v"] == 512
        assert q.dtype == torch.bfloat16 and q.dim() == 3 and q.shape[1] in (64, 128) and q.shape[2] == 576
        assert kv.dtype == torch.bfloat16 and kv.dim() == 3 and kv.shape[1:] == (1, 576)
        assert indices.dtype == torch.int32 and indices.shape[:2] == (q.shape[0], 1)
        idx = indices[:, 0].long()
        idx = torch.where((idx >= 0) & (idx < kv.shape[0]), idx, -1)
        if topk_length is not None:
            assert topk_length.dtype == torch.int32 and topk_length.shape == (q.shape[0],)
            cols = torch.arange(idx.shape[1])[None, :]
            idx = torch.where(cols < topk_length[:, None].long(), idx, -1)
        out = sparse_mla_reference(q.float(), kv[:, 0].float(), idx, kw["sm_scale"]).to(torch.bfloat16)
        if kw.get("return_log2_lse") is False:
            return out, None, None
        return out, torch.zeros(q.shape[:2]), torch.zeros(q.shape[:2])

    def flash_mla_with_kvcache(self, *args, **kwargs):
        bound = signature("flash_mla_with_kvcache").bind(*args, **kwargs)
        kw = bound.arguments
        self.kv_calls.append(kw)
        q, cache, indices, meta = kw["q"], kw["k_cache"], kw["indices"], kw["tile_scheduler_metadata"]
        assert kw["use_legacy"] is True and kw["is_fp8_kvcache"] is True and kw["kv_format"] == "V32"
        assert kw["head_dim_v"] == 512 and kw.get("topk_length") is None
        b, s_q, h, d = q.shape
        assert q.dtype == torch.bfloat16 and s_q == 1 and h in (64, 128) and d == 576
        assert cache.dtype == torch.uint8 and cache.dim() == 4 and cache.shape[1:] == (64, 1, 656)
        assert indices.dtype == torch.int32 and indices.shape[:2] == (b, 1)
        config = (b, s_q, h, cache.shape[1], indices.shape[-1])
        if meta.config is None:
            meta.config = config
        assert meta.config == config, "sched_meta reused with other shapes"
        pool = dequantize_fp8_656(cache.reshape(-1, 656), torch.float32)
        out = sparse_mla_reference(q[:, 0].float(), pool, indices[:, 0].long(), kw["softmax_scale"])
        return out.to(torch.bfloat16)[:, None], torch.zeros(b, h, 1)


@pytest.fixture
def fake_flashinfer():
    FakeMLAWrapper.signatures, FakeMLAWrapper.instances = real_signatures(), []
    import flashinfer
    return types.SimpleNamespace(__version__=flashinfer.__version__,
                                 mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=FakeMLAWrapper))


def hopper(flash_mla, flashinfer=None, **overrides):
    kw = dict(device="cpu", device_class="sm90", softmax_scale=SCALE, flash_mla=flash_mla,
              flashinfer=flashinfer, workspace_bytes=1024)
    for key in ("num_heads", "phases", "prefill_backend", "decode_backend"):
        if key in overrides:
            kw[key] = overrides.pop(key)
    return SparseMLAAdapter.from_decision(decision(**overrides), **kw)


def with_holes(topk, seed):
    """Rows partly −1: a random eighth of the entries dropped (not only the tail)."""
    g = torch.Generator().manual_seed(seed)
    drop = torch.rand(topk.shape, generator=g) < 0.125
    return topk.masked_fill(drop, -1)


@pytest.mark.parametrize("heads", [16, 64, 100])
def test_bf16_default_prefill_flashmla_sparse_and_fa3_decode(fake_flashinfer, heads):
    """The default policy's H200 bf16 decision: flashmla_sparse prefill, fa3 decode."""
    fm = FakeFlashMLA()
    a = hopper(fm, fake_flashinfer, num_heads=heads, index_topk=16)
    assert a.backends == {"prefill": "flashmla_sparse", "decode": "fa3"}
    prob = ragged_problem(20, heads=heads, k=16, prefix=(0, 30, 5))
    prob["topk"] = with_holes(prob["topk"], 1)
    out = a.prefill(prob["q"], prob["kv"], prob["topk"], prob["page_table"],
                    a.plan_prefill(prob["extend"], prob["seq"]))
    call = fm.sparse_calls[-1]
    assert call["q"].shape[1] == (64 if heads <= 64 else 128) and out.shape == (len(prob["topk"]), heads, 512)
    # the slots in place (−1 kept, masked by the kernel), the last valid position + 1 as topk_length
    slots = call["indices"][:, 0]
    assert slots.tolist() == transform_index_page_table_prefill(
        prob["page_table"], prob["topk"], prob["extend"]).tolist()
    assert call["topk_length"].tolist() == [max([j + 1 for j, v in enumerate(r) if v >= 0], default=0)
                                            for r in slots.tolist()]
    close(out, expected(prob))
    dec = ragged_problem(21, extend=(1, 1, 1), prefix=(4, 40, 9), heads=heads, k=16)
    out = a.decode(dec["q"], dec["kv"], dec["topk"], dec["page_table"], a.plan_decode(dec["seq"]))
    close(out, expected(dec))


def test_fp8_flashmla_kv_both_phases_reuses_the_scheduler_metadata():
    """The default policy's H200 fp8 decision: flashmla_kv on both sides, 656-byte layout."""
    fm = FakeFlashMLA()
    a = hopper(fm, kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
               prefill_backend="flashmla_kv", decode_backend="flashmla_kv", index_topk=16, num_heads=32)
    prob = ragged_problem(22, heads=32, k=16, prefix=(0, 30, 5), pool=320)
    prob["topk"] = with_holes(prob["topk"], 2)
    packed = quantize_fp8_656(prob["kv"], pow2_scales=False)
    ref_kv = dequantize_fp8_656(packed, torch.float32)
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    for _ in range(3):  # three layers, one plan
        out = a.prefill(prob["q"], packed, prob["topk"], prob["page_table"], plan)
        close(out, expected(prob, kv=ref_kv))
    assert len(fm.metas) == 1 and all(c["tile_scheduler_metadata"] is fm.metas[0] for c in fm.kv_calls)
    assert fm.kv_calls[-1]["k_cache"].shape == (5, 64, 1, 656)
    dec = ragged_problem(23, extend=(1, 1), prefix=(7, 70), heads=32, k=16, pool=320)
    packed = quantize_fp8_656(dec["kv"], pow2_scales=False)
    out = a.decode(dec["q"], packed, dec["topk"], dec["page_table"], a.plan_decode(dec["seq"]))
    close(out, expected(dec, kv=dequantize_fp8_656(packed, torch.float32)))
    assert len(fm.metas) == 2  # a new plan, a new scheduler


@pytest.mark.parametrize("layout, dtype, kernel", [("bf16-576", "bfloat16", "flashmla_sparse"),
                                                   ("fp8-656-blockwise", "fp8_e4m3", "flashmla_kv")])
def test_flashmla_auto_resolves_per_batch_through_the_planner(fake_flashinfer, layout, dtype, kernel):
    fm = FakeFlashMLA()
    a = hopper(fm, kv_cache_dtype=dtype, kv_cache_layout=layout, prefill_backend="flashmla_auto",
               phases=("prefill",), index_topk=16, num_heads=64)
    prob = ragged_problem(24, heads=64, k=16, pool=320)
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    assert plan.kernel_backend == kernel
    kv = prob["kv"] if layout == "bf16-576" else quantize_fp8_656(prob["kv"], pow2_scales=False)
    out = a.prefill(prob["q"], kv, prob["topk"], prob["page_table"], plan)
    ref_kv = None if layout == "bf16-576" else dequantize_fp8_656(kv, torch.float32)
    close(out, expected(prob, kv=ref_kv))
    assert len(fm.sparse_calls if kernel == "flashmla_sparse" else fm.kv_calls) == 1


def test_flashmla_refusals():
    fm = FakeFlashMLA()
    fp8 = dict(kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
               prefill_backend="flashmla_kv", decode_backend="flashmla_kv")
    with pytest.raises(AdapterConfigError, match="pages of 64 tokens, got page_size 32"):
        hopper(fm, page_size=32, **fp8)
    with pytest.raises(AdapterConfigError, match="at most 128 query heads"):
        hopper(fm, num_heads=256, **fp8)
    with pytest.raises(AdapterConfigError, match="reads KV layout bf16-576"):
        hopper(fm, kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise", phases=("prefill",))
    with pytest.raises(AdapterConfigError, match="runs on sm90, not on sm100"):
        SparseMLAAdapter.from_decision(decision(**fp8), device="cpu", device_class="sm100", flash_mla=fm)
    old = types.SimpleNamespace(__version__="0.9.0")
    with pytest.raises(AdapterConfigError, match="sgl-flash-mla >= 1.0.0, found 0.9.0"):
        hopper(old, **fp8)
    with pytest.raises(AdapterConfigError, match="needs a CUDA device"):
        SparseMLAAdapter.from_decision(decision(**fp8), device="cpu", device_class="sm90")


def test_flashmla_kv_refuses_a_pool_of_partial_pages():
    fm = FakeFlashMLA()
    a = hopper(fm, kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
               prefill_backend="flashmla_kv", decode_backend="flashmla_kv", index_topk=16, num_heads=64)
    prob = ragged_problem(25, heads=64, k=16, pool=300)
    with pytest.raises(ValueError, match="whole pages of 64"):
        a.prefill(prob["q"], quantize_fp8_656(prob["kv"]), prob["topk"], prob["page_table"],
                  a.plan_prefill(prob["extend"], prob["seq"]))


def test_quantiser_matches_the_flashmla_v32_layout():
    """FlashMLA's V3.2 fp8 row: 512 e4m3 (tile t = values 128t…128t+127 / scale t), then 4 fp32
    scales (exact amax/448 in FlashMLA's tests/quant.py), then 64 bf16 rope values."""
    g = torch.Generator().manual_seed(26)
    kv = torch.randn(10, 576, generator=g) * torch.linspace(0.01, 5, 576)
    packed = quantize_fp8_656(kv, pow2_scales=False)
    assert packed.shape == (10, 656) and packed.dtype == torch.uint8
    scales = packed[:, 512:528].contiguous().view(torch.float32)
    amax = kv[:, :512].reshape(10, 4, 128).abs().amax(-1)
    assert torch.equal(scales, amax / 448.0)
    fp8 = packed[:, :512].contiguous().view(torch.float8_e4m3fn).float().reshape(10, 4, 128)
    assert torch.equal(fp8, (kv[:, :512].reshape(10, 4, 128) / scales[..., None]).to(torch.float8_e4m3fn).float())
    assert torch.equal(packed[:, 528:].contiguous().view(torch.bfloat16), kv[:, 512:].bfloat16())
    err = (dequantize_fp8_656(packed, torch.float32) - kv)[:, :512].abs() / amax.repeat_interleave(128, 1)
    assert float(err.max()) <= 2 ** -4  # e4m3: 3 mantissa bits, relative to the tile max


@pytest.mark.parametrize("heads", [16, 64])
def test_query_buffer_hands_q_to_flashmla_without_a_copy(fake_flashinfer, heads):
    """q written into query_buffer() reaches the kernel as the padded buffer itself (below 64
    heads: no per-layer padding copy); each layer's new q is what the kernel sees."""
    fm = FakeFlashMLA()
    a = hopper(fm, fake_flashinfer, num_heads=heads, index_topk=16, phases=("prefill",))
    prob = ragged_problem(27, heads=heads, k=16, prefix=(0, 30, 5))
    prob["topk"] = with_holes(prob["topk"], 3)
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    buf = a.query_buffer(plan)
    assert buf.shape == prob["q"].shape and buf.dtype == torch.bfloat16
    for layer in range(2):  # two layers, each writing its own q into the buffer
        q = prob["q"] * (1 + layer)
        buf.copy_(q)
        out = a.prefill(buf, prob["kv"], prob["topk"], prob["page_table"], plan)
        seen = fm.sparse_calls[-1]["q"]
        if heads == 16:
            assert seen.data_ptr() == buf.data_ptr() and seen.shape == (len(prob["topk"]), 64, 576)
            assert torch.count_nonzero(seen[:, heads:]) == 0  # the padding heads stay zero
        else:
            assert seen is buf
        close(out, expected({**prob, "q": q.bfloat16().float()}))
    # a q from elsewhere still works (copied into the same buffer below 64 heads)
    out = a.prefill(prob["q"], prob["kv"], prob["topk"], prob["page_table"], plan)
    close(out, expected(prob))
