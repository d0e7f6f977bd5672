"""The runtime consumes decisions resolved by the real policy (nsa_policy.resolve)."""
import pytest

nsa_policy = pytest.importorskip("nsa_policy")
if not hasattr(nsa_policy, "resolve"):
    pytest.skip("nsa_policy.resolve is not available", allow_module_level=True)

from nsa_policy.runtime.planner import BatchPlanner  # noqa: E402

MODEL = "deepseek-ai/DeepSeek-V3.2"


def resolved(device, **config):
    return nsa_policy.resolve(config, device=device, model=MODEL)


def test_planner_reads_a_resolved_h200_and_b200_decision():
    h200 = BatchPlanner.from_decision(resolved("h200"))
    assert h200.plan(1000, 1000, 1000).dense_mha is True
    k = resolved("h200").index_topk
    assert h200.plan(k + 1, k + 1, k + 1).backend == resolved("h200").prefill_backend
    b200 = resolved("b200")
    p = BatchPlanner.from_decision(b200)
    assert p.plan(100, 100, 1, "decode").backend == b200.decode_backend


def test_adapter_builds_from_a_resolved_b200_decision():
    pytest.importorskip("torch")
    import types

    from nsa_policy.runtime import SparseMLAAdapter

    from .test_adapter import RecordingTrtllm, real_signatures
    sigs = real_signatures()
    trt = RecordingTrtllm(sigs["flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla"])
    import flashinfer
    fi = types.SimpleNamespace(__version__=flashinfer.__version__,
                               decode=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=trt))
    d = resolved("b200")
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class=d.device_class, flashinfer=fi,
                                       softmax_scale=0.135234, workspace_bytes=1024)
    assert set(a.backends.values()) <= {"trtllm"}
    assert a.kv_cache_layout == d.kv_cache_layout and a.page_size == d.page_size


@pytest.mark.parametrize("config", [{}, {"kv_cache_dtype": "fp8_e4m3"}])
def test_adapter_builds_the_h200_default_decisions_with_flashmla(config):
    """H200: bf16 → flashmla_sparse prefill + fa3 decode; fp8 → flashmla_kv both sides."""
    pytest.importorskip("torch")
    import types

    import flashinfer

    from nsa_policy.runtime import SparseMLAAdapter

    from .test_adapter import FakeMLAWrapper, real_signatures
    from .test_flashmla import FakeFlashMLA
    FakeMLAWrapper.signatures, FakeMLAWrapper.instances = real_signatures(), []
    fi = types.SimpleNamespace(__version__=flashinfer.__version__,
                               mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=FakeMLAWrapper))
    d = resolved("h200", **config)
    a = SparseMLAAdapter.from_decision(d, device="cpu", device_class=d.device_class, flashinfer=fi,
                                       flash_mla=FakeFlashMLA(), workspace_bytes=1024)
    assert a.backends == {"prefill": d.prefill_backend, "decode": d.decode_backend}
    assert a.kv_cache_layout == d.kv_cache_layout
