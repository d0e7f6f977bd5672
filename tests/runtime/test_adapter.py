"""SparseMLAAdapter: construction checks, and the exact flashinfer calls it makes.

The trtllm (sm100) and sm12x kernels cannot run here, so recording stand-ins take their place:
each call is bound against the real signature (the installed flashinfer, and flashinfer
0.6.7.post2's, read from its wheel into fixtures/), recorded, then evaluated the way the kernel
documents it, so a wrong table, length or scale shows up as a wrong output against the
reference."""
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
    quantize_fp8_per_tensor,
    softmax_scale_for,
    sparse_mla_reference,
    transform_index_page_table_prefill,
)

from .helpers import decision  # noqa: E402

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "flashinfer_0.6.7.post2_signatures.json"
SIG_067 = json.loads(FIXTURE.read_text())["signatures"]
SCALE = softmax_scale_for(128, 64, 40.0, 1.0)
TRTLLM = "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla"
WRAPPER = "flashinfer.mla.BatchMLAPagedAttentionWrapper"


def real_signatures():
    """Signatures of the installed flashinfer (imported lazily; skipped if absent)."""
    fi_decode = pytest.importorskip("flashinfer.decode")
    fi_mla = pytest.importorskip("flashinfer.mla")
    w = fi_mla.BatchMLAPagedAttentionWrapper
    return {
        TRTLLM: inspect.signature(fi_decode.trtllm_batch_decode_with_kv_cache_mla),
        WRAPPER + ".__init__": inspect.signature(w.__init__),
        WRAPPER + ".plan": inspect.signature(w.plan),
        WRAPPER + ".run": inspect.signature(w.run),
    }


# keywords the adapter passes only when the installed entry point declares them (0.7.x)
NEWER_KEYWORDS = {"multi_ctas_kv_counter_buffer", "kv_scale_format"}


def check_against_067(name, args, kwargs):
    """The call must also fit flashinfer 0.6.7.post2 (sglang 0.5.10's pin, the H200's)."""
    params = SIG_067[name]
    names = [p["name"] for p in params]
    extra = set(kwargs) - set(names) - NEWER_KEYWORDS
    assert not extra, f"{name}: {extra} not in 0.6.7.post2"
    supplied = set(names[:len(args)]) | set(kwargs)
    missing = [p["name"] for p in params if not p["has_default"] and p["name"] not in supplied]
    assert not missing, f"{name}: 0.6.7.post2 requires {missing}"


def attention_from_rows(q, kv, rows, lens, bmm1, bmm2):
    """What the sparse kernel computes: softmax(bmm1 · q·k) over the first lens[t] slots of row t,
    times V, times bmm2 (q, kv as stored: fp8 values as numbers)."""
    k = rows.shape[1]
    idx = torch.where(torch.arange(k)[None, :] < lens[:, None].long(), rows.long(), -1)
    return sparse_mla_reference(q.float(), kv.float(), idx, bmm1, out_dtype=torch.float32) * bmm2


def dequantize_as_kernel(packed, kv_scale_format):
    """How flashinfer's sm12x kernel reads the 656-byte rows: with "arbitrary_fp32" the stored
    fp32 scales as they are; with "auto" / "pow2_fp32" only each scale's exponent (2^floor(log2 s))."""
    raw = packed.contiguous().view(torch.uint8)
    if kv_scale_format not in ("arbitrary_fp32",):
        scales = raw[..., 512:528].contiguous().view(torch.float32)
        exponent_only = torch.exp2(torch.floor(torch.log2(scales)))
        raw = raw.clone()
        raw[..., 512:528] = exponent_only.contiguous().view(torch.uint8)
    return dequantize_fp8_656(raw, torch.float32)


class RecordingTrtllm:
    """Stands in for flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla."""

    def __init__(self, signature):
        self.signature, self.calls = signature, []
        self.__signature__ = signature  # what the adapter inspects to pick optional keywords

    def __call__(self, *args, **kwargs):
        self.signature.bind(*args, **kwargs)       # a wrong keyword fails here
        check_against_067(TRTLLM, args, kwargs)
        self.calls.append(kwargs)
        q, kv = kwargs["query"], kwargs["kv_cache"]
        t, one, h, d = q.shape
        assert one == 1 and d == 576
        pool = kv.reshape(-1, kv.shape[-1])
        if kwargs["backend"] == "sparse":
            assert kv.dtype == torch.uint8 and kv.shape[-1] == 656 and kwargs["bmm2_scale"] == 1.0
            pool = dequantize_as_kernel(pool, kwargs.get("kv_scale_format", "auto"))
        rows = kwargs["block_tables"][:, 0, :]
        # trtllm-gen: every row has at least one slot (an empty one gives NaN on the real kernel)
        if kwargs["backend"] == "trtllm-gen":
            assert bool((kwargs["seq_lens"] >= 1).all())
        out = attention_from_rows(q.reshape(t, h, d), pool, rows, kwargs["seq_lens"],
                                  kwargs["bmm1_scale"], kwargs["bmm2_scale"])
        return out.to(torch.bfloat16).reshape(t, 1, h, 512)


class FakeMLAWrapper:
    """Stands in for flashinfer.mla.BatchMLAPagedAttentionWrapper (fa3): records plan/run and
    reads kv_indices at run time, as flashinfer does (it keeps the planned buffer)."""

    signatures = None
    instances = []

    def __init__(self, *args, **kwargs):
        self.signatures[WRAPPER + ".__init__"].bind(None, *args, **kwargs)
        check_against_067(WRAPPER + ".__init__", args, kwargs)
        assert kwargs.get("backend") == "fa3"
        self.plans, self.runs = [], []
        FakeMLAWrapper.instances.append(self)

    def plan(self, *args, **kwargs):
        self.signatures[WRAPPER + ".plan"].bind(None, *args, **kwargs)
        check_against_067(WRAPPER + ".plan", args, kwargs)
        assert kwargs["page_size"] == 1 and kwargs["causal"] is False
        assert kwargs["head_dim_ckv"] == 512 and kwargs["head_dim_kpe"] == 64
        self.plans.append(kwargs)

    def run(self, *args, **kwargs):
        self.signatures[WRAPPER + ".run"].bind(None, *args, **kwargs)
        check_against_067(WRAPPER + ".run", args, kwargs)
        p = self.plans[-1]
        self.runs.append(kwargs)
        ckv, kpe = kwargs["ckv_cache"], kwargs["kpe_cache"]
        assert ckv.shape[1:] == (1, 512) and kpe.shape[1:] == (1, 64)
        pool = torch.cat([ckv[:, 0], kpe[:, 0]], dim=-1)
        indptr, lens, indices = p["kv_indptr"].long(), p["kv_len_arr"].long(), p["kv_indices"]
        assert torch.equal(indptr[1:] - indptr[:-1], lens)
        k = int(lens.max()) if lens.numel() else 0
        rows = torch.full((lens.numel(), max(k, 1)), -1, dtype=torch.int64)
        for t in range(lens.numel()):
            rows[t, : lens[t]] = indices[indptr[t]: indptr[t + 1]].long()
        q = torch.cat([kwargs["q_nope"], kwargs["q_pe"]], dim=-1)
        return attention_from_rows(q, pool, rows, lens, p["sm_scale"], 1.0).to(q.dtype)


@pytest.fixture
def fake_flashinfer():
    sigs = real_signatures()
    FakeMLAWrapper.signatures, FakeMLAWrapper.instances = sigs, []
    trt = RecordingTrtllm(sigs[TRTLLM])
    import flashinfer
    return types.SimpleNamespace(
        __version__=flashinfer.__version__,
        decode=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=trt),
        mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=FakeMLAWrapper),
        trtllm=trt,
    )


def ragged_problem(seed, extend=(5, 3, 4), prefix=(0, 6, 1), k=8, heads=4, pool=300):
    """A prefill batch with sglang-shaped top-k: for a token of causal length L, 0..L-1 then −1
    when L <= K, else K distinct positions < L."""
    g = torch.Generator().manual_seed(seed)
    seq = [p + e for p, e in zip(prefix, extend)]
    width = max(seq) + 3
    page_table = torch.stack([torch.randperm(pool, generator=g)[:width] for _ in seq]).int()
    rows, lengths = [], []
    for p, e in zip(prefix, extend):
        for i in range(e):
            length = p + i + 1
            if length <= k:
                row = list(range(length)) + [-1] * (k - length)
            else:
                row = torch.randperm(length, generator=g)[:k].tolist()
            rows.append(row)
            lengths.append(min(length, k))
    topk = torch.tensor(rows, dtype=torch.int64)
    q = torch.randn(len(rows), heads, 576, generator=g).to(torch.bfloat16)
    kv = torch.randn(pool, 576, generator=g).to(torch.bfloat16)
    return dict(q=q, kv=kv, topk=topk, page_table=page_table, extend=list(extend), seq=seq,
                lengths=lengths, k=k, heads=heads)


def expected(prob, kv=None):
    slots = transform_index_page_table_prefill(prob["page_table"], prob["topk"], prob["extend"], impl="torch")
    return sparse_mla_reference(prob["q"].float(), (prob["kv"] if kv is None else kv).float(), slots,
                                SCALE, out_dtype=torch.float32)


def close(out, ref, tol=2e-2):
    err = float((out.float() - ref).norm() / ref.norm())
    assert err < tol, err


# ---------------------------------------------------------------- kernel call contracts
def test_trtllm_bf16_prefill_call_contract(fake_flashinfer):
    prob = ragged_problem(0)
    d = decision(device_class="sm100", prefill_backend="trtllm", decode_backend="trtllm",
                 index_topk=prob["k"], page_size=64)
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm100", softmax_scale=SCALE,
                                       flashinfer=fake_flashinfer, workspace_bytes=1024)
    kv = torch.cat([prob["kv"], torch.zeros(320 - 300, 576, dtype=torch.bfloat16)])  # whole pages
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    out = a.prefill(prob["q"], kv, prob["topk"], prob["page_table"], plan)
    call = fake_flashinfer.trtllm.calls[-1]
    t, k, h = len(prob["lengths"]), prob["k"], prob["heads"]
    assert call["query"].shape == (t, 1, h, 576) and call["query"].dtype == torch.bfloat16
    assert call["kv_cache"].shape == (5, 1, 64, 576)
    assert call["block_tables"].shape == (t, 1, k) and call["block_tables"].dtype == torch.int32
    assert call["seq_lens"].dtype == torch.int32 and call["seq_lens"].tolist() == prob["lengths"]
    # max_seq_len: the batch's longest KV length (sglang's hint), not K
    assert (call["max_seq_len"], call["sparse_mla_top_k"]) == (max(prob["seq"]), k)
    assert call["backend"] == "trtllm-gen" and call["kv_lora_rank"] == 512 and call["qk_rope_head_dim"] == 64
    assert "kv_scale_format" not in call  # trtllm-gen ignores it; only the sm12x call says it
    if "multi_ctas_kv_counter_buffer" not in fake_flashinfer.trtllm.signature.parameters:
        assert "multi_ctas_kv_counter_buffer" not in call   # e.g. 0.6.7.post2 on the H200
        return
    # flashinfer 0.7.x: one zeroed counter buffer, reused by every call
    counter = call["multi_ctas_kv_counter_buffer"]
    assert counter.dtype == torch.uint8 and not bool(counter.any())
    a.prefill(prob["q"], kv, prob["topk"], prob["page_table"], plan)
    assert fake_flashinfer.trtllm.calls[-1]["multi_ctas_kv_counter_buffer"].data_ptr() == counter.data_ptr()
    assert call["bmm1_scale"] == pytest.approx(SCALE) and call["bmm2_scale"] == 1.0
    assert out.shape == (t, h, 512)
    close(out, expected(prob))


def test_trtllm_fp8_per_tensor_folds_scales_into_bmm1_bmm2(fake_flashinfer):
    prob = ragged_problem(1)
    d = decision(device_class="sm103", kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-576-per-tensor",
                 prefill_backend="trtllm", decode_backend="trtllm", index_topk=prob["k"], page_size=32)
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm103", softmax_scale=SCALE,
                                       flashinfer=fake_flashinfer, workspace_bytes=1024)
    kv8, k_scale = quantize_fp8_per_tensor(torch.cat([prob["kv"], prob["kv"][:20]]).float())
    q_scale = 0.05
    out = a.prefill(prob["q"], kv8, prob["topk"], prob["page_table"], extend_lens=prob["extend"],
                    seq_lens=prob["seq"], q_scale=q_scale, k_scale=k_scale)
    call = fake_flashinfer.trtllm.calls[-1]
    assert call["query"].dtype == torch.float8_e4m3fn and call["kv_cache"].dtype == torch.float8_e4m3fn
    assert call["kv_cache"].shape == (10, 1, 32, 576)
    assert call["bmm1_scale"] == pytest.approx(q_scale * k_scale * SCALE)
    assert call["bmm2_scale"] == pytest.approx(k_scale)
    close(out, expected(prob, kv=kv8.float()[:300] * k_scale), tol=8e-2)  # fp8 q adds error


def test_trtllm_decode_rows_are_their_own_requests(fake_flashinfer):
    g = torch.Generator().manual_seed(2)
    rows, k, h = 6, 8, 2
    seq = [1, 5, 8, 9, 20, 3]
    page_table = torch.stack([torch.randperm(128, generator=g)[:24] for _ in seq]).int()
    topk = torch.tensor([(list(range(s)) + [-1] * (k - s)) if s <= k else
                         torch.randperm(s, generator=g)[:k].tolist() for s in seq])
    q = torch.randn(rows, h, 576, generator=g).bfloat16()
    kv = torch.randn(128, 576, generator=g).bfloat16()
    d = decision(device_class="sm100", prefill_backend="trtllm", decode_backend="trtllm", index_topk=k)
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm100", softmax_scale=SCALE,
                                       flashinfer=fake_flashinfer, workspace_bytes=1024)
    out = a.decode(q, kv, topk, page_table, a.plan_decode(seq))
    call = fake_flashinfer.trtllm.calls[-1]
    assert call["seq_lens"].tolist() == [min(s, k) for s in seq]
    assert call["block_tables"].shape == (rows, 1, k)
    slots = torch.stack([page_table[r][topk[r].clamp(min=0)] * (topk[r] >= 0) - (topk[r] < 0).int()
                         for r in range(rows)])
    close(out, sparse_mla_reference(q.float(), kv.float(), slots, SCALE))


def sm12x_adapter(fake_flashinfer, k, **kw):
    if "kv_scale_format" not in fake_flashinfer.trtllm.signature.parameters:
        pytest.skip("the installed flashinfer has no kv_scale_format (the refusal is tested below)")
    d = decision(device_class="sm120", kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
                 prefill_backend="flashinfer_sparse_mla", decode_backend="flashinfer_sparse_mla",
                 index_topk=k, page_size=64)
    # the sm12x backend needs flashinfer >= 0.6.14: the stand-in plays that release (the call is
    # still bound against the installed signature)
    fi = types.SimpleNamespace(**{**vars(fake_flashinfer), "__version__": "0.7.4"})
    return SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm120", softmax_scale=SCALE,
                                          flashinfer=fi, workspace_bytes=1024, **kw)


def test_sm12x_sparse_call_passes_the_caches_exact_fp32_scale_format(fake_flashinfer):
    # sglang's cache writer: exact amax/448 fp32 scales (not powers of two)
    prob = ragged_problem(3, extend=(40, 3, 30), prefix=(0, 50, 20), k=64)
    packed = quantize_fp8_656(torch.cat([prob["kv"], prob["kv"][:20]]), pow2_scales=False)
    scales = packed[:, 512:528].contiguous().view(torch.float32)
    assert not bool((torch.log2(scales) == torch.floor(torch.log2(scales))).all())  # really not pow2
    a = sm12x_adapter(fake_flashinfer, prob["k"])
    out = a.prefill(prob["q"], packed, prob["topk"], prob["page_table"], extend_lens=prob["extend"],
                    seq_lens=prob["seq"])
    call = fake_flashinfer.trtllm.calls[-1]
    assert call["backend"] == "sparse" and call["query"].dtype == torch.bfloat16
    assert call["kv_scale_format"] == "arbitrary_fp32"
    assert "multi_ctas_kv_counter_buffer" not in call   # trtllm-gen only (0.7.4 raises otherwise)
    assert call["kv_cache"].shape == (5, 1, 64, 656) and call["kv_cache"].dtype == torch.uint8
    assert call["block_tables"].dtype == torch.int32 and call["bmm2_scale"] == 1.0
    ref = expected(prob, kv=dequantize_fp8_656(packed, torch.float32)[:300])
    close(out, ref, tol=1e-2)
    # the old call (no kv_scale_format: flashinfer reads powers of two) is visibly wrong
    wrong = sm12x_adapter(fake_flashinfer, prob["k"], kv_scale_format="pow2_fp32")
    out_wrong = wrong.prefill(prob["q"], packed, prob["topk"], prob["page_table"],
                              extend_lens=prob["extend"], seq_lens=prob["seq"])
    assert float((out_wrong.float() - ref).norm() / ref.norm()) > 5e-2


def test_sm12x_limits_are_checked_at_construction(fake_flashinfer):
    with pytest.raises(AdapterConfigError, match="multiple of 64"):
        sm12x_adapter(fake_flashinfer, 96)
    with pytest.raises(AdapterConfigError, match="1 to 128 query heads"):
        sm12x_adapter(fake_flashinfer, 128, num_heads=256)
    with pytest.raises(ValueError, match="kv_scale_format must be one of"):
        sm12x_adapter(fake_flashinfer, 128, kv_scale_format="auto")
    # decode alone may use any top-k
    assert sm12x_adapter(fake_flashinfer, 96, phases=("decode",)).backends == {"decode": "flashinfer_sparse_mla"}


def test_sm12x_refused_when_flashinfer_cannot_be_told_the_scale_format(fake_flashinfer):
    params = [inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None if p["has_default"] else inspect.Parameter.empty)
              for p in SIG_067[TRTLLM]]
    old = RecordingTrtllm(inspect.Signature(params))
    fi = types.SimpleNamespace(__version__="0.6.14",
                               decode=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=old))
    d = decision(device_class="sm120", kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
                 prefill_backend="flashinfer_sparse_mla", decode_backend="flashinfer_sparse_mla")
    with pytest.raises(AdapterConfigError, match="no kv_scale_format"):
        build(d, device_class="sm120", flashinfer=fi, workspace_bytes=1024)


def test_trtllm_without_counter_keyword_gets_none(fake_flashinfer):
    """flashinfer 0.6.7.post2 has no multi_ctas_kv_counter_buffer: the adapter leaves it out."""
    params = [inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None if p["has_default"] else inspect.Parameter.empty)
              for p in SIG_067[TRTLLM]]
    old = RecordingTrtllm(inspect.Signature(params))
    fi = types.SimpleNamespace(__version__="0.6.7.post2",
                               decode=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=old))
    prob = ragged_problem(8)
    d = decision(device_class="sm100", prefill_backend="trtllm", decode_backend="trtllm", index_topk=prob["k"])
    a = build(d, device_class="sm100", flashinfer=fi, workspace_bytes=1024, softmax_scale=SCALE)
    kv = torch.cat([prob["kv"], prob["kv"][:20]])
    out = a.prefill(prob["q"], kv, prob["topk"], prob["page_table"], extend_lens=prob["extend"],
                    seq_lens=prob["seq"])
    assert "multi_ctas_kv_counter_buffer" not in old.calls[-1]
    close(out, expected(prob))


def test_trtllm_empty_rows_attend_to_a_dummy_token(fake_flashinfer):
    """CUDA-graph padding rows (no valid index) get slot 0 and length 1, as sglang 0.5.23 does;
    real rows are untouched."""
    g = torch.Generator().manual_seed(9)
    k, h, rows = 8, 2, 5
    page_table = torch.stack([torch.randperm(128, generator=g)[:16] for _ in range(rows)]).int()
    topk = torch.tensor([[0, 1, -1, -1, -1, -1, -1, -1], [-1] * 8, [3, 0, 2, -1, -1, -1, -1, -1],
                         [-1] * 8, [5, 4, 3, 2, 1, 0, -1, -1]])
    q = torch.randn(rows, h, 576, generator=g).bfloat16()
    kv = torch.randn(128, 576, generator=g).bfloat16()
    d = decision(device_class="sm100", prefill_backend="trtllm", decode_backend="trtllm", index_topk=k)
    a = build(d, device_class="sm100", flashinfer=fake_flashinfer, workspace_bytes=1024, softmax_scale=SCALE)
    out = a.decode(q, kv, topk, page_table, a.plan_decode([2, 1, 3, 1, 6]))
    call = fake_flashinfer.trtllm.calls[-1]
    assert call["seq_lens"].tolist() == [2, 1, 3, 1, 6]
    assert call["block_tables"][1, 0, 0] == 0 and call["block_tables"][3, 0, 0] == 0
    assert bool((call["block_tables"][[1, 3], 0, 1:] == -1).all())
    real = [0, 2, 4]
    slots = torch.where(topk >= 0, page_table.gather(1, topk.clamp(min=0).long()), -1)
    ref = sparse_mla_reference(q.float(), kv.float(), slots, SCALE)
    close(out[real], ref[real])
    assert bool(torch.isfinite(out).all())


def test_trtllm_max_seq_len_without_a_plan_is_the_table_width(fake_flashinfer):
    prob = ragged_problem(10, extend=(1, 1, 1), prefix=(2, 11, 0))
    d = decision(device_class="sm100", prefill_backend="trtllm", decode_backend="trtllm", index_topk=prob["k"])
    a = build(d, device_class="sm100", flashinfer=fake_flashinfer, workspace_bytes=1024, softmax_scale=SCALE)
    a.decode(prob["q"], torch.cat([prob["kv"], prob["kv"][:20]]), prob["topk"], prob["page_table"])
    assert fake_flashinfer.trtllm.calls[-1]["max_seq_len"] == prob["page_table"].shape[1]


def test_fa3_plans_once_per_forward_and_rewrites_only_the_index_buffer(fake_flashinfer):
    prob = ragged_problem(4, extend=(7, 2, 5), prefix=(0, 9, 3))
    d = decision(device_class="sm90", prefill_backend="fa3", decode_backend="fa3",
                 index_topk=prob["k"], heads_per_rank=prob["heads"])
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm90", softmax_scale=SCALE,
                                       flashinfer=fake_flashinfer, workspace_bytes=1024)
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    wrapper = FakeMLAWrapper.instances[0]
    assert plan.kv_lens.tolist() == prob["lengths"]
    buffer_ptr = plan.kv_indices.data_ptr()
    g = torch.Generator().manual_seed(5)
    for _layer in range(3):
        # each layer's indexer picks differently; the counts stay min(L, K)
        topk = prob["topk"].clone()
        for t, row in enumerate(topk):
            n = int((row >= 0).sum())
            topk[t, :n] = row[:n][torch.randperm(n, generator=g)]
        out = a.prefill(prob["q"], prob["kv"], topk, prob["page_table"], plan)
        close(out, expected(dict(prob, topk=topk)))
    assert len(wrapper.plans) == 1 and len(wrapper.runs) == 3
    assert wrapper.plans[0]["kv_indices"].data_ptr() == buffer_ptr == plan.kv_indices.data_ptr()
    assert wrapper.plans[0]["num_heads"] == prob["heads"]
    # a newer plan on the same wrapper makes the old one stale: refused, not silently wrong
    a.plan_prefill(prob["extend"], prob["seq"])
    with pytest.raises(ValueError, match="stale"):
        a.prefill(prob["q"], prob["kv"], prob["topk"], prob["page_table"], plan)


def test_fa3_accepts_split_q_and_decode(fake_flashinfer):
    prob = ragged_problem(6, extend=(1, 1, 1), prefix=(2, 11, 0))
    d = decision(device_class="sm90", prefill_backend="fa3", decode_backend="fa3", index_topk=prob["k"])
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class="sm90", softmax_scale=SCALE,
                                       num_heads=prob["heads"], flashinfer=fake_flashinfer, workspace_bytes=1024)
    q = prob["q"]
    out = a.decode(q[..., :512], prob["kv"], prob["topk"], prob["page_table"],
                   a.plan_decode(prob["seq"]), q_rope=q[..., 512:])
    close(out, expected(prob))


@pytest.mark.parametrize("layout, dtype", [("bf16-576", None), ("fp8-576-per-tensor", "fp8"),
                                           ("fp8-656-blockwise", "656")])
def test_torch_backend_runs_every_layout(layout, dtype):
    prob = ragged_problem(7)
    d = decision(device_class="cpu", kv_cache_layout=layout, prefill_backend="torch",
                 decode_backend="torch", index_topk=prob["k"])
    a = SparseMLAAdapter.from_decision(d, device="cpu", softmax_scale=SCALE)
    kv, k_scale, ref_kv = prob["kv"], 1.0, prob["kv"].float()
    if dtype == "fp8":
        kv, k_scale = quantize_fp8_per_tensor(prob["kv"].float())
        ref_kv = kv.float() * k_scale
    elif dtype == "656":
        kv = quantize_fp8_656(prob["kv"])
        ref_kv = dequantize_fp8_656(kv, torch.float32)
    out = a.prefill(prob["q"], kv, prob["topk"], prob["page_table"], extend_lens=prob["extend"],
                    seq_lens=prob["seq"], k_scale=k_scale)
    close(out, expected(prob, kv=ref_kv))


# ---------------------------------------------------------------- refused at construction
def build(d, **kw):
    kw.setdefault("device", "cpu")
    return SparseMLAAdapter.from_decision(d, **kw)


def test_backend_from_another_package_is_refused_with_what_would_run(fake_flashinfer):
    d = decision(kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
                 prefill_backend="flashmla_sparse_q8", decode_backend="flashmla_kv")
    with pytest.raises(AdapterConfigError) as e:
        build(d, device_class="sm90", flashinfer=fake_flashinfer)
    msg = str(e.value)
    assert "'flashmla_sparse_q8'" in msg and "sm90" in msg and "FlashMLA" in msg and "'fa3'" in msg
    assert "'flashmla_kv'" in msg  # listed among what runs there


def test_backend_on_the_wrong_device_is_refused(fake_flashinfer):
    d = decision(prefill_backend="trtllm", decode_backend="trtllm", kv_cache_layout="bf16-576")
    on_sm90 = r"\['fa3', 'flashmla_sparse', 'flashmla_kv', 'flashmla_auto', 'torch'\]"
    with pytest.raises(AdapterConfigError, match=r"'trtllm' runs on sm100, sm103, not on sm90.*" + on_sm90):
        build(d, device_class="sm90", flashinfer=fake_flashinfer)
    with pytest.raises(AdapterConfigError, match="not on cpu"):
        build(d, flashinfer=fake_flashinfer)          # detected: the CPU
    with pytest.raises(AdapterConfigError, match="'flashinfer_sparse_mla' runs on sm120, sm121, not on sm100"):
        build(decision(prefill_backend="flashinfer_sparse_mla", decode_backend="flashinfer_sparse_mla",
                       kv_cache_layout="fp8-656-blockwise"), device_class="sm100", flashinfer=fake_flashinfer)


@pytest.mark.parametrize("backend, device_class, layout, old, needed", [
    ("trtllm", "sm100", "bf16-576", "0.6.5", "0.6.7"),
    ("fa3", "sm90", "bf16-576", "0.5.3", "0.6.7"),
    ("flashinfer_sparse_mla", "sm120", "fp8-656-blockwise", "0.6.7.post2", "0.6.14"),
    ("trtllm", "sm103", "bf16-576", "0.6.7", "0.6.7.post2"),  # the sm103 hang, sglang #21904
])
def test_too_old_flashinfer_is_refused(fake_flashinfer, backend, device_class, layout, old, needed):
    fi = types.SimpleNamespace(**{**vars(fake_flashinfer), "__version__": old})
    d = decision(prefill_backend=backend, decode_backend=backend, kv_cache_layout=layout)
    with pytest.raises(AdapterConfigError, match=f"{backend}.*>= {needed}, found {old}"):
        build(d, device_class=device_class, flashinfer=fi)


@pytest.mark.parametrize("overrides, match", [
    (dict(errors=[types.SimpleNamespace(code="E_FP8_MIXED_TRTLLM")]), "E_FP8_MIXED_TRTLLM"),
    (dict(applies=False), "does not apply"),
    (dict(decode_backend="fa3", prefill_backend="fa3", kv_cache_layout="fp8-656-blockwise"), "reads KV layout bf16-576"),
    (dict(decode_backend="trtllm", prefill_backend="trtllm", page_size=1), "page_size in"),
    (dict(decode_backend="trtllm", prefill_backend="trtllm", index_topk=2046), "multiple of 4"),
    (dict(kv_cache_layout="fp8"), "kv_cache_layout must be one of"),
    (dict(decode_backend="tilelang", prefill_backend="fa3"), "'tilelang'.*tilelang"),
])
def test_bad_decisions_are_refused(fake_flashinfer, overrides, match):
    dc = "sm100" if overrides.get("decode_backend") == "trtllm" else "sm90"
    with pytest.raises(AdapterConfigError, match=match):
        build(decision(**overrides), device_class=dc, flashinfer=fake_flashinfer)


def test_one_phase_adapter_and_explicit_override(fake_flashinfer):
    # sm90 bf16: decode alone (fa3) builds without sgl-flash-mla
    a = build(decision(), device_class="sm90", phases=("decode",), flashinfer=fake_flashinfer,
              workspace_bytes=1024)
    assert a.backends == {"decode": "fa3"}
    with pytest.raises(ValueError, match=r"built for \('decode',\) only"):
        a.plan_prefill([1])
    b = build(decision(), device_class="sm90", prefill_backend="fa3", flashinfer=fake_flashinfer,
              workspace_bytes=1024)
    assert b.backends == {"prefill": "fa3", "decode": "fa3"}


# flashinfer < 0.6.11 computes fa3's KV row offsets in 32 bits (mla_hopper.cuh, prefetch_offset):
# 2^32 // 576 rows of one layer's pool is the most it addresses correctly.
FA3_ROW_LIMIT = (1 << 32) // 576


@pytest.mark.parametrize("version, limit", [("0.6.7.post2", FA3_ROW_LIMIT), ("0.6.10.post1", FA3_ROW_LIMIT),
                                            ("0.6.11", None), ("0.7.4", None)])
def test_fa3_pool_limit_follows_the_flashinfer_release(fake_flashinfer, version, limit):
    fi = types.SimpleNamespace(**{**vars(fake_flashinfer), "__version__": version})
    d = decision(prefill_backend="fa3", decode_backend="fa3", heads_per_rank=4)
    build(d, device_class="sm90", flashinfer=fi, workspace_bytes=1024, kv_pool_tokens=FA3_ROW_LIMIT)
    if limit is None:  # the widened kernel: no limit from the adapter
        build(d, device_class="sm90", flashinfer=fi, workspace_bytes=1024, kv_pool_tokens=1 << 25)
        return
    with pytest.raises(AdapterConfigError) as exc:
        build(d, device_class="sm90", flashinfer=fi, workspace_bytes=1024, kv_pool_tokens=limit + 1)
    msg = str(exc.value)
    assert "\n" not in msg and f"flashinfer-python {version}" in msg and "7,456,540" in msg
    assert "7,456,541" in msg and ">= 0.6.11" in msg
    # the FlashMLA backends read the same pool with 64-bit offsets: not refused
    build(decision(decode_backend="flashmla_sparse", prefill_backend="flashmla_sparse"), device_class="sm90",
          flashinfer=fi, phases=("decode",), kv_pool_tokens=limit + 1, flash_mla=types.SimpleNamespace(__version__="1.0.0"))


def test_fa3_call_refuses_an_out_of_reach_pool_before_any_launch(fake_flashinfer):
    fi = types.SimpleNamespace(**{**vars(fake_flashinfer), "__version__": "0.6.7.post2"})
    prob = ragged_problem(8, extend=(1, 1, 1), prefix=(2, 11, 0))
    d = decision(prefill_backend="fa3", decode_backend="fa3", index_topk=prob["k"])
    a = build(d, device_class="sm90", phases=("decode",), flashinfer=fi, num_heads=prob["heads"], softmax_scale=SCALE,
              workspace_bytes=1024)
    plan = a.plan_decode(prob["seq"])
    close(a.decode(prob["q"], prob["kv"], prob["topk"], prob["page_table"], plan), expected(prob))
    wrapper = FakeMLAWrapper.instances[0]
    runs, indices = len(wrapper.runs), plan.kv_indices.clone()
    # a pool one row past the reach (meta: shape only, no memory); an engine's pool grows at start-up
    big = torch.empty(FA3_ROW_LIMIT + 1, 576, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match=r"fa3.*at most 7,456,540 KV rows.*got 7,456,541"):
        a.decode(prob["q"], big, prob["topk"], prob["page_table"], plan)
    assert len(wrapper.runs) == runs and torch.equal(plan.kv_indices, indices)  # nothing ran, nothing written


def test_version_order_handles_post_releases():
    from nsa_policy.runtime._flashinfer import parse_version
    ordered = ["0.5.3", "0.6.7", "0.6.7.post2", "0.6.8", "0.6.14", "0.7.4"]
    assert sorted(ordered, key=parse_version) == ordered
    with pytest.raises(ValueError, match="cannot parse"):
        parse_version("dev")
