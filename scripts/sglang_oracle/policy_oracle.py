"""sglang's own DSA start-up decisions, device emulated (issue 11, deliverable 3); built for 0.5.23.

Runs INSIDE the 0.5.23 side environment (run.py: `SideEnvs.run_script("0.5.23", "policy_oracle.py", ...)`):

    PYTHONPATH=/work/sgenv/pkgs/0.5.23:/work/sgenv/stubs /work/sgenv/venv-t5.19/bin/python \
        scripts/sglang_oracle/policy_oracle.py < grid.jsonl > answers.jsonl

Per input, the real pipeline the server runs: the server parser (as `prepare_server_args` builds it)
→ `ServerArgs.from_cli_args` → `resolve_once()` → `check_server_args()`, answers read back with
`overrides.resolution_result`; the threshold is what the model hook leaves in
SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD. The model is a written config.json that sglang's
own ModelConfig loads. Only platform probes are patched:

- `runtime_context.override_platform(...)` for every platform fact (is_cuda/is_hip/…, sm checks,
  device_sm, device_capability);
- `torch.cuda.{is_available, get_device_capability, device_count, get_device_name,
  get_device_properties, mem_get_info}` for the direct callers (not `torch.version.cuda/hip`: with
  those set, import-time kernel probes try to load sgl_kernel/aiter, which a CPU machine lacks);
- on ROCm, `layers.attention.dsa.utils.aiter_can_use_preshuffle_paged_mqa` (the input's
  "preshuffle"), which otherwise reads aiter/triton on this machine;
- the lru caches of sglang's probes are cleared whenever the emulated device changes.
Before 0.5.19 (no override_platform, policy inside `ServerArgs.__post_init__`): the probe names
imported into server_args/overrides/hisparse_hook/model_hook/model_config are re-pointed instead,
values are read as attributes (nsa_* before 0.5.13), the threshold from the variable the release
declares. Limit: `is_cuda()`/`is_hip()` called directly (they read torch.version), and module-level
constants computed at import (`_is_hip = is_hip()`), keep the CPU machine's answer (False); the DSA
passes read the platform through `get_platform()` (SGLANG-RELEASES §5.1).

Input line: {"id", "device": a class of DEVICES, "preshuffle": bool, optional "product" and "memory_gb" (a
named device of that class), "model": a base of BASES, "config": {overrides of the base config},
"argv": [server flags; --model-path is added], "env": {variables set for this input}}.
Output line: {"id", "ok", "stage", "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size",
"attention_backend", "threshold", "error", "ms"}.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
import types
from types import SimpleNamespace
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _inrelease import build_parser, captured_stderr, quiet_imports, release  # noqa: E402

GB = 1 << 30
# device class -> (capability, name, memory, HIP)
DEVICES = {
    "sm80": ((8, 0), "NVIDIA A100-SXM4-80GB", 80 * GB, False),
    "sm86": ((8, 6), "NVIDIA RTX A6000", 48 * GB, False),
    "sm89": ((8, 9), "NVIDIA L40S", 48 * GB, False),
    "sm90": ((9, 0), "NVIDIA H200", 141 * GB, False),
    "sm100": ((10, 0), "NVIDIA B200", 180 * GB, False),
    # Thor reports 11.0 (sglang 0.5.22+: is_sm110_supported); the catalog names no product of the class
    "sm110": ((11, 0), "NVIDIA Thor", 128 * GB, False),
    "sm103": ((10, 3), "NVIDIA B300 SXM6 AC", 288 * GB, False),
    "sm120": ((12, 0), "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96 * GB, False),
    "sm121": ((12, 1), "NVIDIA GB10", 128 * GB, False),
    "gfx942": ((9, 4), "AMD Instinct MI300X", 192 * GB, True),
    "gfx950": ((9, 5), "AMD Instinct MI355X", 288 * GB, True),
    # ROCm gfx1250 reports capability (12, 5) through torch.cuda; sglang tells it from sm12x by its
    # vendor and is_gfx1250_supported (utils/common.py); the catalog names no product of the class
    "gfx1250": ((12, 5), "AMD gfx1250", 288 * GB, True),
    # Intel Data Center GPU Max 1550 (XPU): no CUDA capability; sglang asks get_platform()/is_xpu()
    "xpu": ((0, 0), "Intel(R) Data Center GPU Max 1550", 128 * GB, False),
}
XPU = ("xpu",)
THRESHOLD_VAR = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
# Variables an input may set; all are cleared before each input so inputs do not leak into each other.
INPUT_ENV = (THRESHOLD_VAR, "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "SGLANG_USE_AITER",
             "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE", "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS")

_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
         "mscale": 1.0, "mscale_all_dim": 1.0}
BASES = {
    # DeepSeek-V3.2 as published (model_type deepseek_v32, fp8 block-quantized weights)
    "ds32": {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "vocab_size": 129280,
             "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
             "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128,
             "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
             "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
             "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
             "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": True,
             "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
             "rms_norm_eps": 1e-06, "rope_theta": 10000, "tie_word_embeddings": False, "rope_scaling": _YARN,
             "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64, "torch_dtype": "bfloat16",
             "bos_token_id": 0, "eos_token_id": 1,
             "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}},
    # GLM-5 (transformers' GlmMoeDsaConfig defaults are GLM-5's shapes)
    "glm5": {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "index_topk": 2048,
             "num_attention_heads": 64, "num_key_value_heads": 64, "torch_dtype": "bfloat16"},
    # GLM-5.3-Flash (Glm5Next, NoPE MLA): the published config.json is not at hand, so transformers 5.19's
    # Glm5NextTextConfig defaults (configuration_glm5_next.py), the ones sglang 0.5.23's configs/glm5_next.py reads,
    # but for the checkpoint's index_kpool 4 (sglang#36830; the default is 16)
    "glm5next": {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
                 "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32, "index_kpool": 4,
                 "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512, "qk_nope_head_dim": 256,
                 "qk_rope_head_dim": 0, "v_head_dim": 256, "torch_dtype": "bfloat16"},
    # DeepSeek-V3 (not DSA: no index_topk)
    "ds3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
            "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
            "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
            "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
            "first_k_dense_replace": 3, "max_position_embeddings": 163840, "rope_scaling": _YARN,
            "torch_dtype": "bfloat16", "topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    # Qwen3-235B-A22B (not DSA; transformers' Qwen3MoeConfig fills the rest)
    "qwen3moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
                 "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 94,
                 "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "vocab_size": 151936,
                 "max_position_embeddings": 40960, "torch_dtype": "bfloat16"},
    # a learnable-sink DSA model (sglang's own HYV4Config defaults)
    "hyv4": {"architectures": ["HYV4ForCausalLM"], "model_type": "hy_v4", "torch_dtype": "bfloat16"},
}
FIELDS = ("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend", "page_size", "attention_backend")


class ConfigDirs:
    """One directory with a config.json per distinct model config (written once)."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="sglang-oracle-")
        self.dirs: dict[str, str] = {}

    def get(self, base: str, overrides: dict) -> str:
        if base not in BASES:
            raise ValueError(f"model {base!r}: not one of {sorted(BASES)}")
        cfg = {**BASES[base], **overrides}
        text = json.dumps(cfg, sort_keys=True)
        key = hashlib.sha1(text.encode()).hexdigest()[:12]
        if key not in self.dirs:
            d = os.path.join(self.root, f"{base}-{key}")
            os.makedirs(d)
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write(text)
            self.dirs[key] = d
        return self.dirs[key]


def platform_facts(device: str) -> dict:
    (major, minor), _, _, hip = DEVICES[device]
    xpu = device in XPU
    cuda = not hip and not xpu
    return {"is_cuda": cuda, "is_hip": hip, "is_npu": False, "is_xpu": xpu, "is_musa": False, "is_mps": False,
            "is_sm90": cuda and major == 9, "is_sm100": cuda and major == 10,
            "is_sm100_or_sm110": cuda and major in (10, 11), "is_sm110": cuda and major == 11,
            "is_sm120": cuda and major == 12, "is_blackwell": cuda and major in (10, 11, 12),
            "is_hopper_with_cuda_12_3": cuda and major == 9, "has_amx": False, "has_flashinfer": cuda,
            "device_sm": major * 10 + minor, "device_capability": (major, minor)}


def clear_probe_caches() -> None:
    """sglang's probes are lru_cached; a new emulated device must not see the previous one's answers."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sglang.srt.utils") and name != "sglang.srt.runtime_context":
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


class _Unavailable(types.ModuleType):
    """A module of the aiter package this CPU machine lacks: importable, every name a kernel that raises if
    called. Start-up code only imports them (0.5.22's dsa/index_buf_accessor.py imports aiter's
    cp_gather_indexer_k_quant_cache at import time when the preshuffle probe says yes)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def kernel(*args, **kwargs):
            raise RuntimeError(f"{self.__name__}.{name}: aiter kernels do not run in the oracle")
        return kernel


@contextlib.contextmanager
def aiter_importable():
    """For an emulated ROCm device with aiter's preshuffle path usable (the input says aiter is installed):
    aiter's modules importable for the duration, removed after."""
    names = ("aiter", "aiter.ops", "aiter.ops.cache")
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        mod = _Unavailable(n)
        mod.__path__ = []  # a package, so submodules import
        sys.modules[n] = mod
    try:
        yield
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old


@contextlib.contextmanager
def emulated(device: str, preshuffle: bool, product: str | None = None, memory_gb: float | None = None):
    """The device class's probes; a named device (the sampled inputs) brings its own product string and memory."""
    cap, name, mem, hip = DEVICES[device]
    name = product or name
    mem = int(memory_gb * GB) if memory_gb else mem
    props = SimpleNamespace(total_memory=mem, name=name, major=cap[0], minor=cap[1], multi_processor_count=132,
                            gcnArchName=device if hip else "", L2_cache_size=50 << 20, warp_size=64 if hip else 32)
    patches = [
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.get_device_capability", return_value=cap),
        mock.patch("torch.cuda.device_count", return_value=8),
        mock.patch("torch.cuda.get_device_name", return_value=name),
        mock.patch("torch.cuda.get_device_properties", return_value=props),
        mock.patch("torch.cuda.mem_get_info", return_value=(mem, mem)),
    ]
    # is_gfx1250_supported reads torch.version.hip and gcnArchName itself (utils/common.py). Patching
    # torch.version.hip would also flip the import-time `_is_hip` of modules loaded later, onto ROCm-only
    # imports (aiter) this CPU machine lacks: re-point the probe, in every loaded module that holds it.
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("sglang.") and callable(getattr(mod, "is_gfx1250_supported", None)):
            patches.append(mock.patch.object(mod, "is_gfx1250_supported", lambda _d=device: _d == "gfx1250"))
    # An Intel XPU: torch.cuda.is_available() is patched True above for the direct callers, so get_device()
    # would answer "cuda" where a real XPU answers "xpu" (ServerArgs.device: NGRAM's device check, the platform
    # fallbacks); and the XMX probe reads torch.xpu, which this CPU build lacks: the catalog's XPUs (Max 1550:
    # PVC, Arc B580: BMG) have it. Re-point both, in every loaded module that holds them (0.5.19+ import them
    # into arg_groups; before 0.5.19, legacy_patches covers the modules it names).
    if device in XPU:
        import importlib

        for lazy in ("sglang.srt.arg_groups.serving_hook", "sglang.srt.arg_groups.memory_hook"):
            try:  # loaded lazily by the resolution; load them here so that their probes can be re-pointed
                importlib.import_module(lazy)
            except ImportError:
                pass
        for modname, mod in list(sys.modules.items()):
            if not modname.startswith("sglang."):
                continue
            # only where ServerArgs.device is defaulted (0.5.19+): the memory probes read get_device too
            if modname == "sglang.srt.arg_groups.serving_hook" and callable(getattr(mod, "get_device", None)):
                patches.append(mock.patch.object(mod, "get_device", lambda *a, **k: "xpu"))
            if callable(getattr(mod, "xpu_has_xmx_support", None)):
                patches.append(mock.patch.object(mod, "xpu_has_xmx_support", lambda: True))
            # with device "xpu" the memory probe asks torch.xpu: answer the device's memory (MiB), as on CUDA
            if callable(getattr(mod, "get_device_memory_capacity", None)):
                patches.append(mock.patch.object(mod, "get_device_memory_capacity",
                                                 lambda *a, _m=mem / (1 << 20), **k: _m))
    if hip:  # dsa.utils from 0.5.13, nsa.utils in 0.5.12; before 0.5.12 the release does not ask
        import importlib

        for modname in ("sglang.srt.layers.attention.dsa.utils", "sglang.srt.layers.attention.nsa.utils"):
            try:
                mod = importlib.import_module(modname)
            except ImportError:
                continue
            if hasattr(mod, "aiter_can_use_preshuffle_paged_mqa"):
                patches.append(mock.patch.object(mod, "aiter_can_use_preshuffle_paged_mqa",
                                                 return_value=bool(preshuffle)))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        if hip and preshuffle:
            stack.enter_context(aiter_importable())
        try:
            from sglang.srt import runtime_context as rc
            from sglang.srt.runtime_context import override_platform
        except ImportError:  # before 0.5.19
            for p in legacy_patches(device, name, mem):  # a named device's product and memory, as above
                stack.enter_context(p)
        else:
            known = set(rc._PLATFORM_PROBES) | set(rc._PLATFORM_VALUES)  # the facts this release has
            stack.enter_context(override_platform(**{k: v for k, v in platform_facts(device).items()
                                                     if k in known}))
        yield


# Before 0.5.19 there is no override_platform: the start-up code calls probes it imported by name
# (SGLANG-RELEASES §5.2/§5.3). Re-point those names in the modules that hold the DSA policy.
_LEGACY_MODULES = ("sglang.srt.server_args", "sglang.srt.arg_groups.overrides", "sglang.srt.arg_groups.hisparse_hook",
                   "sglang.srt.arg_groups.model_hook", "sglang.srt.configs.model_config")


def _legacy_probes(device: str, name: str, mem: int) -> dict:
    """The probes by name, for the emulated device: its class's capability and vendor, and the product string and
    memory emulated() answers (a named device's own, else the class's)."""
    (major, minor), _, _, hip = DEVICES[device]
    xpu = device in XPU
    cuda = not hip and not xpu
    return {"is_hip": hip, "is_cuda": cuda, "is_npu": False, "is_xpu": xpu, "is_cpu": False, "is_mps": False,
            "is_blackwell_supported": cuda and major in (10, 11, 12), "is_blackwell": cuda and major in (10, 11, 12),
            "is_sm90_supported": cuda and major == 9, "is_sm100_supported": cuda and major == 10,
            "is_sm120_supported": cuda and major == 12, "is_hopper_with_cuda_12_3": cuda and major == 9,
            "is_flashinfer_available": cuda, "get_device": "xpu" if xpu else "cuda", "get_device_sm": major * 10 + minor,
            "get_device_name": name, "get_device_memory_capacity": mem / (1 << 20),
            "get_nvidia_driver_version": (580, 0),
            "xpu_has_xmx_support": xpu}  # the catalog's XPUs have XMX (emulated(): every release)


def legacy_patches(device: str, name: str, mem: int) -> list:
    import importlib

    out = []
    for modname in _LEGACY_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        for probe, value in _legacy_probes(device, name, mem).items():
            if callable(getattr(mod, probe, None)):
                out.append(mock.patch.object(mod, probe, lambda *a, _v=value, **k: _v))
    return out


def _error(exc: BaseException) -> dict:
    msg = " ".join(str(exc).split())
    return {"type": type(exc).__name__, "message": msg[:600]}


def _reader():
    """How to read the decided values back: resolution_result from 0.5.19, plain attributes before."""
    try:
        from sglang.srt.arg_groups.overrides import resolution_result
        return lambda sa, f: resolution_result(sa, f)
    except ImportError:
        return lambda sa, f: getattr(sa, f, getattr(sa, f.replace("dsa_", "nsa_"), None))


def threshold_var() -> str:
    import sglang.srt.environ as environ

    return THRESHOLD_VAR if hasattr(environ.Envs, THRESHOLD_VAR) else THRESHOLD_VAR.replace("_DSA_", "_NSA_")


def run_one(parser, configs: ConfigDirs, item: dict) -> dict:
    from sglang.srt.server_args import ServerArgs

    read = _reader()

    out: dict = {"id": item.get("id")}
    # Every input starts from the process's environment as it was before the first one: sglang writes
    # variables while resolving (the threshold, SGLANG_USE_CUDA_IPC_TRANSPORT in 0.5.16-0.5.18, …), and
    # one input's writes must not become the next one's inputs.
    os.environ.clear()
    os.environ.update(BASE_ENV)
    os.environ.update({k: str(v) for k, v in (item.get("env") or {}).items()})
    t0 = time.perf_counter()
    stage = "parse"
    try:
        path = configs.get(item.get("model", "ds32"), item.get("config") or {})
        argv = ["--model-path", path, *item.get("argv", [])]
        with captured_stderr() as err:
            try:
                ns = parser.parse_args(argv)
            except SystemExit:
                lines = [ln for ln in err.getvalue().splitlines() if ": error: " in ln]
                raise ValueError("argparse: " + (lines[-1].split(": error: ", 1)[1] if lines else "exit")) from None
        stage = "from_cli_args"  # inside the emulated device (main() enters it once per device group)
        sa = ServerArgs.from_cli_args(ns)
        stage = "resolve_once"
        if hasattr(sa, "resolve_once"):  # 0.5.19+; before, __post_init__ (from_cli_args) ran the policy
            sa.resolve_once()
        stage = "check_server_args"
        sa.check_server_args()
        values = {f: read(sa, f) for f in FIELDS}
        thr = os.environ.get(threshold_var())
        out.update(ok=True, stage="done", kv_cache_dtype=values["kv_cache_dtype"],
                   prefill_backend=values["dsa_prefill_backend"], decode_backend=values["dsa_decode_backend"],
                   page_size=values["page_size"], attention_backend=values["attention_backend"],
                   threshold=int(thr) if thr not in (None, "None") else None, error=None)
    except Exception as exc:  # the release refused the configuration (or the harness failed: see stage)
        out.update(ok=False, stage=stage, kv_cache_dtype=None, prefill_backend=None, decode_backend=None,
                   page_size=None, attention_backend=None, threshold=None, error=_error(exc))
        if TRACE:  # reading a class of disagreement: where in the release the refusal came from
            import traceback
            out["traceback"] = traceback.format_exc().splitlines()[-12:]
    out["ms"] = round((time.perf_counter() - t0) * 1000, 2)
    return out


BASE_ENV: dict[str, str] = {}
TRACE = os.environ.pop("NSA_ORACLE_TRACE", "") == "1"


def memoize_struct_fields() -> None:
    """msgspec.structs.fields(cls) is a pure function of the class that sglang (0.5.20+) calls for every
    record on every resolution, re-reading the annotations each time (a quarter of the oracle's time);
    cached per class, as sglang's own multi_tokenizer_mixin caches it. Answers are unchanged."""
    try:
        import msgspec.structs
    except ImportError:
        return
    msgspec.structs.fields = functools.lru_cache(maxsize=None)(msgspec.structs.fields)


def main() -> None:
    quiet_imports()
    memoize_struct_fields()
    parser = build_parser()
    BASE_ENV.update({k: v for k, v in os.environ.items() if k not in INPUT_ENV})
    configs = ConfigDirs()
    rel = release()
    items = [json.loads(line) for line in sys.stdin if line.strip()]
    # One emulated device per group of inputs (same device and preshuffle): entering the emulation is
    # per device, not per input; the probes' caches are cleared between groups.
    groups: dict[tuple, list] = {}
    for item in items:
        groups.setdefault((item.get("device"), bool(item.get("preshuffle", False)), item.get("product"),
                           item.get("memory_gb")), []).append(item)
    for (device, preshuffle, product, memory_gb), group in groups.items():
        if device not in DEVICES:
            for item in group:
                res = {"id": item.get("id"), "ok": False, "stage": "input", "release": rel, "ms": 0.0,
                       "error": {"type": "InputError", "message": f"device {device!r}: not one of {sorted(DEVICES)}"}}
                sys.stdout.write(json.dumps(res, sort_keys=True) + "\n")
            continue
        clear_probe_caches()
        with emulated(device, preshuffle, product, memory_gb):
            for item in group:
                res = run_one(parser, configs, item)
                res["release"] = rel
                sys.stdout.write(json.dumps(res, sort_keys=True) + "\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
