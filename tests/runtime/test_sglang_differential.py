"""The adapter's trtllm / sm12x calls against sglang's own (issue 12, item 5).

Tiers: the CPU tier (below; CI), the H200 tiers (the real flashinfer's Python on CUDA tensors on
both sides' calls, the launch one level below recorded: sglang 0.5.10 with flashinfer 0.6.7.post2,
trtllm-gen; sglang 0.5.23 with flashinfer 0.7.4, trtllm-gen and sm12x), the 0.5.23 tier's CPU
rehearsal (opt-in, side environment) and its negative controls through flashinfer 0.7.4 on CPU
tensors (CI, where flashinfer 0.7.4 is installed).

CPU tier:

sglang 0.5.23's `_forward_trtllm` and `_forward_flashinfer_sparse_mla` run from the installed
wheel in a side environment (`sglang_call_recorder.py` says exactly what is replaced there) and
their flashinfer calls are recorded; `fixtures/sglang_0.5.23_trtllm_calls.json` holds that record,
so this tier runs in CI without sglang. With the side environment present
(NSA_POLICY_SGLANG_ENVS=/work/sgenv, scripts/sglang_oracle/README.md) the recorder runs again and
must reproduce the fixture. The adapter runs on the same batches (sglang_diff_cases.py) with a
recorder bound to flashinfer 0.7.4's signature in place of the entry point.

What must agree, per case: block tables bit-identical (every row here is sglang-shaped: valid slots
first, then −1); seq_lens equivalent (below); query and pool view equal (dtype, shape, bytes; the
pool view a view of the cache the engine passed); bmm1/bmm2 scales, kv_scale_format, backend,
sparse_mla_top_k, head dims equal, omitted keywords counting as flashinfer's defaults.
"""
from __future__ import annotations

import inspect
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from nsa_policy.runtime import SparseMLAAdapter  # noqa: E402

from . import flashinfer_low_level as L  # noqa: E402
from . import sglang_diff_cases as C  # noqa: E402
from .helpers import decision  # noqa: E402

HERE = pathlib.Path(__file__).parent
FIXTURES = HERE / "fixtures"
# release → (its recorded calls, the flashinfer signature the adapter is bound to: the release's pin
# for 0.5.10, 0.7.4 for 0.5.23's sm12x path)
RELEASES = {
    "0.5.23": ("sglang_0.5.23_trtllm_calls.json", "flashinfer_0.7.4_trtllm_mla_signature.json"),
    "0.5.10": ("sglang_0.5.10_trtllm_calls.json", "flashinfer_0.6.7.post2_trtllm_mla_signature.json"),
}
# Scratch buffers: each side allocates its own; only their presence is compared.
SCRATCH = {"workspace_buffer", "multi_ctas_kv_counter_buffer"}


def signature_of(release: str) -> dict:
    return json.loads((FIXTURES / RELEASES[release][1]).read_text())


def records_of(release: str) -> dict:
    data = json.loads((FIXTURES / RELEASES[release][0]).read_text())
    assert data["sglang"] == release
    return {r["case"]: r for r in data["records"]}


class Recorder:
    """flashinfer's trtllm_batch_decode_with_kv_cache_mla (a given release's signature), recording
    its keywords."""

    def __init__(self, sig: dict):
        self.__signature__ = inspect.Signature([
            inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              default=p["default"] if p["has_default"] else inspect.Parameter.empty)
            for p in sig["signature"]])
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.__signature__.bind(*args, **kwargs)   # a keyword that release lacks fails here
        self.calls.append(kwargs)
        q = kwargs["query"]
        return torch.zeros(q.shape[0], 1, q.shape[2], 512, dtype=torch.bfloat16)


def adapter_call(case: C.Case, release: str = "0.5.23", real_flashinfer=None, device: str = "cuda",
                 **adapter_kw):
    """Run the adapter on the case's batch; return its one flashinfer call and the pool. With
    real_flashinfer (H200 tier): that module, on `device` (CUDA; the CPU for the rehearsal), its
    launch recorded one level below (flashinfer_low_level.install must be in effect)."""
    sig = signature_of(release)
    rec = Recorder(sig)
    fi = types.SimpleNamespace(__version__=sig["version"],
                               decode=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=rec),
                               mla=types.SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=rec))
    dev = "cpu"
    if real_flashinfer is not None:
        fi, dev = real_flashinfer, device
        L.CALLS.clear()
    else:
        adapter_kw.setdefault("workspace_bytes", C.POOL_TOKENS)
    if case.backend == "trtllm":
        d = decision(device_class="sm100", kv_cache_dtype="fp8_e4m3" if case.kv == "fp8" else "bfloat16",
                     kv_cache_layout="fp8-576-per-tensor" if case.kv == "fp8" else "bf16-576",
                     prefill_backend="trtllm", decode_backend="trtllm", page_size=case.page_size,
                     index_topk=C.TOP_K)
        device_class = "sm100"
    else:
        d = decision(device_class="sm120", kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
                     prefill_backend="flashinfer_sparse_mla", decode_backend="flashinfer_sparse_mla",
                     page_size=case.page_size, index_topk=C.TOP_K)
        device_class = "sm120"
    adapter = SparseMLAAdapter.from_decision(
        d, device=dev, device_class=device_class, num_heads=C.HEADS, softmax_scale=C.SCALE,
        table_page_size=case.table_page_size, flashinfer=fi, **adapter_kw)
    b = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in C.batch(case.phase).items()}
    x = {k: v.to(dev) for k, v in C.tensors(case, len(b["causal"])).items()}
    table = b["token_table"] if case.table_page_size == 1 else b["block_table"]
    q = torch.cat([x["q_nope"], x["q_rope"]], dim=-1)
    if case.phase == "decode":
        plan = adapter.plan_decode(b["seq_lens"])
        adapter.decode(q, x["pool"], b["topk"], table, plan)
    else:
        plan = adapter.plan_prefill(b["extend_lens"], b["seq_lens"])
        adapter.prefill(q, x["pool"], b["topk"], table, plan)
    calls = L.CALLS if real_flashinfer is not None else rec.calls
    assert len(calls) == 1
    return calls[0], x["pool"]


def sglang_record(records: dict, case: C.Case) -> dict:
    # sglang always reads the token table; the adapter's table-64 cases compare to the same call
    return records[C.Case(case.backend, case.phase, case.kv, case.page_size, 1).name]


def effective(kwargs: dict, name: str, sig: dict):
    """A keyword's value as flashinfer sees it: the recorded value, the signature's default, or
    absent where that flashinfer has no such parameter."""
    if name in kwargs:
        return kwargs[name]
    params = {p["name"]: p for p in sig["signature"]}
    if name not in params:
        return {"kind": "absent"}
    assert params[name]["has_default"], f"{name} omitted but required by flashinfer {sig['version']}"
    return {"kind": "scalar", "value": params[name]["default"]}


def compare(case: C.Case, ours: dict, pool: torch.Tensor, theirs: dict, release: str = "0.5.23") -> None:
    sg = theirs["kwargs"]
    sig = signature_of(release)
    mine = {k: C.describe(v) for k, v in ours.items()}
    # block tables: bit-identical
    assert mine["block_tables"] == sg["block_tables"], f"{case.name}: block tables differ"
    # seq_lens: sglang passes the request's full KV length for decode and the clipped causal length
    # for prefill into the same sparse kernel, which reads min(seq_len, sparse_mla_top_k) leading
    # entries of each row; the adapter passes the clipped length for both.
    k = sg["sparse_mla_top_k"]["value"]
    assert [min(s, k) for s in sg["seq_lens"]["values"]] == mine["seq_lens"]["values"], case.name
    if case.phase == "prefill" or case.backend != "trtllm":
        assert sg["seq_lens"]["values"] == mine["seq_lens"]["values"], case.name
    # query and pool view: dtype, shape and bytes
    for name in ("query", "kv_cache"):
        assert mine[name] == sg[name], f"{case.name}: {name} differs: {mine[name]} vs {sg[name]}"
    assert ours["kv_cache"].untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()
    assert theirs["kv_cache_is_view_of_pool"]
    # scales, backend, scale format, dims: equal, an omitted keyword counting as its default
    for name in ("bmm1_scale", "bmm2_scale", "backend", "kv_scale_format", "sparse_mla_top_k",
                 "qk_nope_head_dim", "kv_lora_rank", "qk_rope_head_dim",
                 "skip_softmax_threshold_scale_factor", "sparse_mla_top_k_lens"):
        a, b = effective(mine, name, sig), effective(sg, name, sig)
        if case.backend == "flashinfer_sparse_mla" and name == "backend":
            # sglang leaves flashinfer's 'auto'; the adapter names the sm12x kernel it must get
            assert (a["value"], b["value"]) == ("sparse", "auto"), (case.name, a, b)
            continue
        if isinstance(a.get("value"), float) or isinstance(b.get("value"), float):
            assert a["value"] == pytest.approx(b["value"], rel=1e-7), (case.name, name, a, b)
        else:
            assert a == b, (case.name, name, a, b)
    for name in SCRATCH:
        assert (name in mine) == (name in sg), f"{case.name}: {name} passed by one side only"
    # max_seq_len, a scheduling hint: trtllm as sglang (the batch's longest KV length); on sm12x
    # sglang passes top-k, the adapter the longest KV length
    want = sg["max_seq_len"]["value"] if case.backend == "trtllm" else max(C.batch(case.phase)["seq_lens"])
    assert mine["max_seq_len"]["value"] == want, case.name
    extra = set(mine) - set(sg) - {p["name"] for p in sig["signature"] if p["has_default"]}
    assert not extra, f"{case.name}: the adapter passes {extra}, sglang does not"


def _fixture_records() -> dict:
    return records_of("0.5.23")


def _cases(release: str) -> list:
    recorded = records_of(release)
    return [(release, c) for c in C.cases()
            if C.Case(c.backend, c.phase, c.kv, c.page_size, 1).name in recorded]


@pytest.mark.parametrize("release,case", _cases("0.5.23") + _cases("0.5.10"),
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_adapter_call_matches_recorded_sglang_call(release, case):
    ours, pool = adapter_call(case, release)
    compare(case, ours, pool, sglang_record(records_of(release), case), release)


def test_negative_controls_are_caught():
    """The comparison sees a wrong scale format (the bug this test was asked to catch), a moved
    slot, and a different query."""
    sm12x = C.Case("flashinfer_sparse_mla", "decode", "fp8", 64, 64)
    ours, pool = adapter_call(sm12x, kv_scale_format="pow2_fp32")
    with pytest.raises(AssertionError, match="kv_scale_format"):
        compare(sm12x, ours, pool, sglang_record(_fixture_records(), sm12x))
    case = C.Case("trtllm", "prefill", "bf16", 64, 64)
    ours, pool = adapter_call(case)
    record = json.loads(json.dumps(sglang_record(_fixture_records(), case)))
    record["kwargs"]["block_tables"]["values"][2][0][0] += 1
    with pytest.raises(AssertionError, match="block tables"):
        compare(case, ours, pool, record)
    ours["query"] = ours["query"].clone()
    ours["query"].view(-1)[0] += 1
    with pytest.raises(AssertionError, match="query"):
        compare(case, ours, pool, sglang_record(_fixture_records(), case))


def test_fixtures_cover_the_cases():
    assert set(records_of("0.5.23")) == {c.name for c in C.cases() if c.table_page_size == 1}
    # 0.5.10: trtllm bf16 only (no sm12x path; its fp8 path always runs flashinfer.rope's kernel)
    assert set(records_of("0.5.10")) == {c.name for c in C.cases() if c.table_page_size == 1
                                         and c.backend == "trtllm" and c.kv == "bf16"}
    assert len(_cases("0.5.23")) == 20 and len(_cases("0.5.10")) == 8


def _side_env(release: str):
    root = os.environ.get("NSA_POLICY_SGLANG_ENVS")
    if not root:
        pytest.skip("NSA_POLICY_SGLANG_ENVS is not set: no sglang side environment "
                    "(scripts/sglang_oracle/README.md); the recorded fixture tier ran instead")
    envs_file = pathlib.Path(root) / "envs.json"
    envs = json.loads(envs_file.read_text()) if envs_file.exists() else {}
    if release not in envs:
        pytest.skip(f"no sglang {release} side environment in {envs_file}")
    env = envs[release]
    # packages the serving code imports beyond the start-up code (openai, …): an optional
    # per-group folder (pip install --no-deps --target <root>/runtime-extras/<group> …)
    extras = pathlib.Path(root) / "runtime-extras" / env["group"]
    path = list(env["pythonpath"]) + ([str(extras)] if extras.is_dir() else [])
    return env["python"], os.pathsep.join(path)


@pytest.mark.parametrize("release", list(RELEASES))
def test_live_sglang_reproduces_the_fixture(release, tmp_path):
    python, pythonpath = _side_env(release)
    out = tmp_path / "calls.json"
    proc = subprocess.run([python, "-W", "ignore", str(HERE / "sglang_call_recorder.py"), release, str(out)],
                          env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    live = {r["case"]: r for r in json.loads(out.read_text())["records"]}
    assert live == records_of(release)
    for _, case in _cases(release):
        ours, pool = adapter_call(case, release)
        compare(case, ours, pool, sglang_record(live, case), release)


# ---------------------------------------------------------------- H200 tier (real flashinfer)
# The launch's arguments by role, per path (flashinfer_low_level.LAUNCHES says where each launch is)
ROLES = {
    "trtllm": dict(table="block_tables", lens="seq_lens", query="query", kv=("key_cache", "value_cache"),
                   out="out", scales=("bmm1_scale", "bmm2_scale")),
    "sm12x": dict(table="indices", lens="lengths", query="q", kv=("cache",), out="output", scales=("scale",)),
}


def compare_low_level(case: C.Case, ours: dict, pool: torch.Tensor, theirs: dict,
                      version: str = L.VERSION, path: str = "trtllm") -> None:
    """The launch below flashinfer's entry point, after its own Python ran on each call: the same
    rules as compare(), on the arguments the kernel (sm12x: its prepared-plan layer) would get."""
    launch, roles = L.launch_of(version, path), ROLES[path]
    mine, sg = L.describe_call(ours, C.describe, version, path), theirs["kwargs"]
    names = set(launch.args) if launch.args is not None else set(sg)
    assert set(mine) == set(sg) == names, (case.name, set(mine) ^ set(sg))
    assert mine[roles["table"]] == sg[roles["table"]], f"{case.name}: block tables differ"
    lens = roles["lens"]
    if path == "trtllm":
        # sglang passes the full KV length for decode, the kernel reads min(seq_len, top-k) slots
        k = sg["sparse_mla_top_k"]["value"]
        assert [min(s, k) for s in sg[lens]["values"]] == mine[lens]["values"], case.name
    if case.phase == "prefill" or path != "trtllm":
        assert sg[lens] == mine[lens], f"{case.name}: {lens} differ: {mine[lens]} vs {sg[lens]}"
    for name in (roles["query"],) + roles["kv"]:
        assert mine[name] == sg[name], f"{case.name}: {name} differs: {mine[name]} vs {sg[name]}"
    assert ours[launch.kv].untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()
    assert theirs["kv_cache_is_view_of_pool"]
    # the output flashinfer allocated: its shape and dtype (its contents are uninitialised)
    out = roles["out"]
    assert (mine[out]["dtype"], mine[out]["shape"]) == (sg[out]["dtype"], sg[out]["shape"]), case.name
    for name in roles["scales"]:
        assert mine[name]["value"] == pytest.approx(sg[name]["value"], rel=1e-7), (case.name, name)
    if "kv_scale_format" in names:  # sm12x: how the cache's fp32 scales are read (issue 12's bug)
        assert mine["kv_scale_format"] == sg["kv_scale_format"], \
            f"{case.name}: kv_scale_format differs: {mine['kv_scale_format']} vs {sg['kv_scale_format']}"
    done = {roles["table"], lens, roles["query"], out, *roles["kv"], *roles["scales"]}
    for name in sorted(names - done):  # max_seq_len, batch size, top-k, SM count, PDL, scratch presence, …
        assert mine[name] == sg[name], (case.name, name, mine[name], sg[name])


def _h200_env(var: str, version: str):
    path = os.environ.get(var)
    if not path:
        pytest.skip(f"{var} is not set (the H200 tier runs on a GPU machine)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fi = pytest.importorskip("flashinfer")
    if fi.__version__ != version:
        pytest.skip(f"this H200 tier is written for flashinfer {version}, found {fi.__version__}")
    return path, fi


def _record_live(release: str, path: str, tmp_path, mode: str = "real", python: str = sys.executable) -> dict:
    out = tmp_path / "calls.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([python, "-W", "ignore", str(HERE / "sglang_call_recorder.py"), release,
                           str(out), mode], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["case"]: r for r in json.loads(out.read_text())["records"]}


def test_h200_tier_real_flashinfer_low_level_launch(tmp_path):
    """sglang 0.5.10's _forward_trtllm and the adapter through the real flashinfer 0.6.7.post2 on a
    CUDA device (its Python checks run on both calls), the launch one level below recorded.
    NSA_POLICY_SGLANG_H200_PATH: a PYTHONPATH holding sglang 0.5.10's wheel contents and the
    packages its import needs (benchmarks/gpu_runtime_session.sh builds it on the H200)."""
    path, fi = _h200_env("NSA_POLICY_SGLANG_H200_PATH", L.VERSION)
    live = _record_live("0.5.10", path, tmp_path)
    assert set(live) == set(records_of("0.5.10"))
    restore = L.install(fi)
    try:
        compared = 0
        for _, case in _cases("0.5.10"):
            ours, pool = adapter_call(case, "0.5.10", real_flashinfer=fi)
            compare_low_level(case, ours, pool, sglang_record(live, case))
            compared += 1
    finally:
        restore()
    assert compared == 8


def _compare_through_real_074(fi, live: dict, device: str, **adapter_kw) -> dict:
    """The adapter's 20 calls through the real flashinfer 0.7.4 (each path's launch recorded),
    compared with sglang 0.5.23's 10; returns the count per path."""
    assert set(live) == set(records_of("0.5.23"))
    compared = {"trtllm": 0, "sm12x": 0}
    extra = L.cpu_rehearsal_patches() if device == "cpu" else None
    for _, case in _cases("0.5.23"):
        path = L.PATH_OF_BACKEND[case.backend]
        restore = L.install(fi, path, extra=extra)
        try:
            ours, pool = adapter_call(case, "0.5.23", real_flashinfer=fi, device=device, **adapter_kw)
        finally:
            restore()
        compare_low_level(case, ours, pool, sglang_record(live, case), fi.__version__, path)
        compared[path] += 1
    return compared


def test_h200_tier_sglang_0523_real_flashinfer_074(tmp_path):
    """sglang 0.5.23's _forward_trtllm (trtllm-gen, sm100) and _forward_flashinfer_sparse_mla (sm12x)
    and the adapter's calls through the real flashinfer 0.7.4 (0.5.23's pin is 0.7.2; 0.7.4 is the
    adapter's) on a CUDA device: its Python runs on both sides' calls and each path's launch one level
    below is recorded (flashinfer_low_level.LAUNCHES), the device told compute capability 10.0 for
    trtllm-gen and 12.0 for sm12x. NSA_POLICY_SGLANG23_H200_PATH: a PYTHONPATH holding sglang
    0.5.23's Python files and the packages its import needs (benchmarks/gpu_runtime_session.sh diff23)."""
    path, fi = _h200_env("NSA_POLICY_SGLANG23_H200_PATH", "0.7.4")
    live = _record_live("0.5.23", path, tmp_path)
    assert _compare_through_real_074(fi, live, "cuda") == {"trtllm": 16, "sm12x": 4}


def test_low_level_comparison_catches_a_moved_slot_and_another_query():
    """The H200 tier's comparison (negative controls, on the CPU): a launch recorded as sglang's,
    then the same launch with one slot moved, and with another query."""
    case = C.Case("trtllm", "decode", "bf16", 64, 1)
    b, x = C.batch("decode"), C.tensors(case, len(C.DECODE_SEQ_LENS))
    rows = len(C.DECODE_SEQ_LENS)
    pool4 = x["pool"].view(-1, 1, 64, 576)
    call = dict.fromkeys(L.ARGS)
    call.update(out=torch.zeros(rows, C.HEADS, 512, dtype=torch.bfloat16),
                query=torch.cat([x["q_nope"], x["q_rope"]], -1), key_cache=pool4, value_cache=pool4,
                workspace_buffer=torch.zeros(16, dtype=torch.uint8), workspace_bytes=16,
                block_tables=b["topk"].unsqueeze(1).clone(),
                seq_lens=torch.tensor([min(n, C.TOP_K) for n in b["seq_lens"]], dtype=torch.int32),
                max_q_len=1, max_seq_len=max(b["seq_lens"]), bmm1_scale=C.SCALE, bmm2_scale=1.0,
                batch_size=rows, sparse_mla_top_k=C.TOP_K, sm_count=132, enable_pdl=True)
    theirs = dict(kwargs=L.describe_call(call, C.describe), kv_cache_is_view_of_pool=True)
    compare_low_level(case, call, x["pool"], theirs)  # itself: equal
    moved = {**call, "block_tables": call["block_tables"].clone()}
    moved["block_tables"][0, 0, 0] += 1
    with pytest.raises(AssertionError, match="block tables"):
        compare_low_level(case, moved, x["pool"], theirs)
    other = {**call, "query": call["query"].clone()}
    other["query"].view(-1)[0] += 1
    with pytest.raises(AssertionError, match="query"):
        compare_low_level(case, other, x["pool"], theirs)


# ---------------------------------------------------------------- the 0.7.4 tier, rehearsed on the CPU
def _flashinfer_074():
    fi = pytest.importorskip("flashinfer")
    if fi.__version__ != "0.7.4":
        pytest.skip(f"written for flashinfer 0.7.4, found {fi.__version__}")
    return fi


def _flashinfer_site(tmp_path) -> str:
    """A folder holding (links to) this interpreter's flashinfer and the few modules its import needs
    beyond a sglang side environment, for the side environment's PYTHONPATH."""
    import importlib.util
    site = tmp_path / "fi_site"
    site.mkdir()
    for name in ("flashinfer", "pynvml", "tabulate"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            pytest.skip(f"{name} is not importable here")
        src = pathlib.Path(spec.origin)
        src = src.parent if src.name == "__init__.py" else src
        (site / src.name).symlink_to(src)
    return str(site)


def test_cpu_rehearsal_sglang_0523_real_flashinfer_074(tmp_path):
    """The 0.5.23 H200 tier on CPU tensors: sglang 0.5.23 (its side environment) and the adapter
    through the real flashinfer 0.7.4 Python, the device queries answered as on the H200 tier plus
    an SM count of 0 (the adapter's off CUDA). Opt-in, as the side-environment tests."""
    python, pythonpath = _side_env("0.5.23")
    fi = _flashinfer_074()
    live = _record_live("0.5.23", os.pathsep.join([pythonpath, _flashinfer_site(tmp_path)]), tmp_path,
                        mode="real-cpu", python=python)
    assert _compare_through_real_074(fi, live, "cpu", workspace_bytes=1 << 20) == {"trtllm": 16, "sm12x": 4}


def test_low_level_074_comparison_catches_the_scale_format_and_a_moved_slot():
    """The 0.7.4 comparison's negative controls, through the real flashinfer 0.7.4 Python on CPU
    tensors (CI installs it): the adapter's sm12x launch against itself with the other kv_scale_format
    (the bug issue 12 named), and its trtllm-gen launch against itself with one slot moved."""
    fi = _flashinfer_074()

    def launch(case, path, **kw):
        restore = L.install(fi, path, extra=L.cpu_rehearsal_patches())
        try:
            return adapter_call(case, "0.5.23", real_flashinfer=fi, device="cpu", workspace_bytes=1 << 20, **kw)
        finally:
            restore()

    sm12x = C.Case("flashinfer_sparse_mla", "decode", "fp8", 64, 64)
    ours, pool = launch(sm12x, "sm12x")
    theirs = dict(kwargs=L.describe_call(ours, C.describe, "0.7.4", "sm12x"), kv_cache_is_view_of_pool=True)
    assert theirs["kwargs"]["kv_scale_format"]["value"] == "arbitrary_fp32"
    compare_low_level(sm12x, ours, pool, theirs, "0.7.4", "sm12x")  # itself: equal
    wrong, pool = launch(sm12x, "sm12x", kv_scale_format="pow2_fp32")
    with pytest.raises(AssertionError, match="kv_scale_format"):
        compare_low_level(sm12x, wrong, pool, theirs, "0.7.4", "sm12x")
    trt = C.Case("trtllm", "prefill", "fp8", 32, 1)
    ours, pool = launch(trt, "trtllm")
    theirs = dict(kwargs=L.describe_call(ours, C.describe, "0.7.4", "trtllm"), kv_cache_is_view_of_pool=True)
    compare_low_level(trt, ours, pool, theirs, "0.7.4", "trtllm")
    theirs["kwargs"]["block_tables"]["values"][2][0][0] += 1
    with pytest.raises(AssertionError, match="block tables"):
        compare_low_level(trt, ours, pool, theirs, "0.7.4", "trtllm")
