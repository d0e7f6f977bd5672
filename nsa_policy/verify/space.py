"""The enumerated input space a bundle is checked over.

The space is a union of blocks; each block is a full product of dimensions, so "exhaustive" means
every combination inside each block. One big product (devices × models × KV dtypes × backend pairs
× shapes × HiSparse × thresholds × extras) is ~10^6 inputs; the blocks keep every interaction the
rules can have while staying ~7·10^4 inputs per bundle:

- ``backends``: device × model × KV dtype × prefill choice × decode choice × DP/TP shape — everything
  the kv_cache, backends, page_size, layout and validate stages read.
- ``hisparse``: the same with HiSparse on (radix cache on / off), at tp1.
- ``threshold``: device × model × KV dtype × prefill choice × threshold setting × shape — what the
  threshold stage reads (an explicit trtllm prefill drove sglang's 128k override).
- ``input``: malformed inputs (unknown KV dtype, unknown backend names, shapes that do not divide)
  crossed with the backend choices the input stage reads.
- ``extras``: device × model × KV dtype × prefill choice × {page sizes, modelopt_fp4 with DP,
  installed flashinfer versions}.
- ``uncatalogued``: DSA families with no checkpoint in the catalog (mistral_large3), given as an
  architecture with index_topk and no head count (as a config.json may), × KV dtype × backend pair.
- ``prefill_cp``: device × model × prefill context parallel layouts (strategy, DP, world size, PD role,
  dcp); ``not_dsa_prefill_cp`` the same for a model without DSA (sglang's general CP checks).
- ``not_dsa``: a model without DSA, with and without DSA flags.

A point's *complexity* — how many of its values set something (a flag, a variable, a package) —
picks the minimal example of a finding: fewest settings first, then the lowest index.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Optional, Sequence, Union

from nsa_policy.catalog.store import Catalog, load_catalog
from nsa_policy.core.conditions import leaves
from nsa_policy.core.facts import Facts, ServingConfig, derive
from nsa_policy.core.namespace import device_part, inputs_of
from nsa_policy.engines.sglang.env import threshold_env_vars
from nsa_policy.inputs import environment_from

INVALID_KV = "fp8_e5m2"
INVALID_BACKEND = "flashmla-kv"  # a typo of a real name, so the "did you mean" path runs too
NON_DSA_ARCH = "Qwen3MoeForCausalLM"


@dataclass(frozen=True)
class Value:
    """One value of a dimension and what it contributes to an input."""

    label: str
    config: tuple[tuple[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    packages: tuple[tuple[str, str], ...] = ()
    device: Optional[str] = None
    model: Optional[str] = None  # catalog id
    arch: Optional[tuple[str, Optional[int], Optional[int]]] = None  # (architecture, index_topk, heads)
    model_extra: tuple[tuple[str, Any], ...] = ()  # more config.json keys with `arch` (learnable_sink, index_kpool, …)
    covers: tuple[str, ...] = ()  # device classes this representative stands for (itself first)
    spellings: tuple[str, ...] = ()  # sglang flags the configuration was given with (release bundles judge them)


    def _replace_spellings(self, spellings: tuple[str, ...]) -> Value:
        return dataclasses.replace(self, spellings=spellings)


@dataclass(frozen=True)
class Dim:
    name: str
    values: tuple[Value, ...]
    counts_for_size: bool = True  # device/model are not "settings": they do not add to complexity

    def labels(self) -> list[str]:
        return [v.label for v in self.values]


@dataclass(frozen=True)
class Block:
    name: str
    dims: tuple[Dim, ...]
    engine: Optional[str] = None  # the engine whose argument names the config values use (None: the default one)

    @cached_property
    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= len(d.values)
        return n

    @cached_property
    def strides(self) -> tuple[int, ...]:
        out, s = [], 1
        for d in reversed(self.dims):
            out.append(s)
            s *= len(d.values)
        return tuple(reversed(out))

    def digits(self, local: int) -> tuple[int, ...]:
        return tuple((local // s) % len(d.values) for d, s in zip(self.dims, self.strides))

    def local(self, digits: Sequence[int]) -> int:
        return sum(i * s for i, s in zip(digits, self.strides))

    def dim_index(self, name: str) -> Optional[int]:
        return next((i for i, d in enumerate(self.dims) if d.name == name), None)


@dataclass(frozen=True)
class Point:
    """One input of the space: where it sits, and the values it is made of."""

    index: int
    block: Block
    digits: tuple[int, ...]

    @property
    def values(self) -> tuple[Value, ...]:
        return tuple(d.values[i] for d, i in zip(self.block.dims, self.digits))

    @property
    def complexity(self) -> int:
        return sum(1 for v in self.values if v.config or v.env or v.packages)

    @property
    def sort_key(self) -> tuple[int, int]:
        return (self.complexity, self.index)

    def region(self) -> dict[str, str]:
        return {d.name: d.values[i].label for d, i in zip(self.block.dims, self.digits)}

    def parts(self) -> tuple[Optional[str], dict[str, Any], dict[str, str], dict[str, str], Any]:
        """(device, config mapping, env, packages, model) as the library takes them."""
        device: Optional[str] = None
        model: Any = None
        config: dict[str, Any] = {}
        env: dict[str, str] = {}
        packages: dict[str, str] = {}
        for v in self.values:
            device = v.device or device
            if v.model:
                model = v.model
            if v.arch:
                arch, topk, heads = v.arch
                model = {"architectures": [arch]}
                if topk is not None:
                    model["index_topk"] = topk
                if heads is not None:
                    model["num_attention_heads"] = heads
                model.update(v.model_extra)
            config.update(v.config)
            env.update(v.env)
            packages.update(v.packages)
        return device, config, env, packages, model

    def as_input(self) -> dict:
        """A case-file style mapping: device, model (or arch), config fields, env:VAR, package:NAME."""
        device, config, env, packages, model = self.parts()
        out: dict[str, Any] = {"device": device}
        if isinstance(model, dict):
            out["arch"] = model["architectures"][0]
            out.update({k: v for k, v in model.items() if k != "architectures"})
        else:
            out["model"] = model
        out.update(config)
        out.update({f"env:{k}": v for k, v in env.items()})
        out.update({f"package:{k}": v for k, v in packages.items()})
        return out

    def spelt_flags(self) -> dict[str, str]:
        """config field → the flag this input was spelt with (its values' `spellings`), so a command
        reproduces what the release bundles judge of spellings; "" = carried by another spelt flag."""
        from nsa_policy.engines.sglang.args import load_args

        reg = load_args()
        out: dict[str, str] = {}
        for v in self.values:
            for flag in v.spellings:
                hit = reg.lookup(flag)
                if hit is None:
                    continue
                arg = hit[0]
                if arg.field is not None:
                    out[arg.field] = flag
                elif arg.name == "attn_dp_size":  # read as dp_size=N with DP attention (sglang-args.yaml)
                    out.update(dp_size=flag, enable_dp_attention="")
        return out

    def command(self, policy: Optional[str] = None, flags: Optional[dict[str, str]] = None) -> str:
        """The `nsa-policy resolve` command line that reproduces this input; `flags` maps a config
        field to the spelling to use (e.g. one sglang release's own), else `--field-name`."""
        device, config, env, packages, model = self.parts()
        if device is None:  # every block of the space has a device dimension
            raise ValueError(f"point {self.index} has no device value: no resolve command reproduces it")
        words = [f"{k}={v}" for k, v in env.items()] + ["nsa-policy", "resolve", "--device", device]
        if self.block.engine is not None:
            from nsa_policy import engines

            words += ["--engine", self.block.engine]
            flags = {**engines.get(self.block.engine).resolve_flags, **(flags or {})}
        prefix = ""
        if isinstance(model, dict) and set(model) - {"architectures", "index_topk", "num_attention_heads"}:
            # keys no resolve flag carries (learnable_sink, index_kpool, …): write the config.json first
            prefix = f"printf '%s' {shlex.quote(json.dumps(model))} > config.json && "
            words += ["--model", "config.json"]
        elif isinstance(model, dict):
            words += ["--arch", model["architectures"][0]]
            if "index_topk" in model:
                words += ["--index-topk", str(model["index_topk"])]
            if "num_attention_heads" in model:
                words += ["--num-attention-heads", str(model["num_attention_heads"])]
        else:
            words += ["--model", model]
        spelt = self.spelt_flags()
        for key, value in config.items():
            flag = spelt.get(key)
            if flag == "":
                continue  # folded into another spelt flag (--attn-dp-size N = --dp-size N --enable-dp-attention)
            flag = flag or (flags or {}).get(key) or "--" + key.replace("_", "-")
            if value is True:
                words.append(flag)
            else:
                words += [flag, str(value)]
        for dist, version in packages.items():
            words += ["--package", f"{dist}={version}"]
        if policy:
            words += ["--policy", policy]
        return prefix + " ".join(shlex.quote(w) for w in words)


@dataclass
class Space:
    blocks: tuple[Block, ...]
    description: str = ""
    _offsets: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        off = 0
        for b in self.blocks:
            self._offsets.append(off)
            off += b.size
        self.size = off

    def __len__(self) -> int:
        return self.size

    def offset(self, block: Block) -> int:
        return self._offsets[self.blocks.index(block)]

    def point(self, index: int) -> Point:
        if not 0 <= index < self.size:
            raise IndexError(index)
        for b, off in zip(reversed(self.blocks), reversed(self._offsets)):
            if index >= off:
                return Point(index, b, b.digits(index - off))
        raise IndexError(index)  # pragma: no cover

    def points(self, start: int = 0, stop: Optional[int] = None) -> Iterable[Point]:
        stop = self.size if stop is None else stop
        for i in range(start, stop):
            yield self.point(i)

    def neighbours(self, point: Point, dims: Iterable[str]) -> list[int]:
        """Indices of the points that differ from `point` only in the named dimensions (itself excluded)."""
        block = point.block
        free = sorted({i for i in (block.dim_index(d) for d in dims) if i is not None})
        if not free:
            return []
        off = self.offset(block)
        out: list[tuple[int, ...]] = [()]
        for i in free:
            out = [prefix + (v,) for prefix in out for v in range(len(block.dims[i].values))]
        result: list[int] = []
        for combo in out:
            digits = list(point.digits)
            for i, v in zip(free, combo):
                digits[i] = v
            idx = off + block.local(digits)
            if idx != point.index:
                result.append(idx)
        return result

    def summary(self) -> list[dict]:
        return [{"block": b.name, "inputs": b.size,
                 "dimensions": {d.name: d.labels() for d in b.dims}} for b in self.blocks]


# ---------------------------------------------------------------- the standard space

def cfg_value(label: str, **config: Any) -> Value:
    """A value of a config dimension: its label and the ServingConfig fields it sets."""
    return Value(label=label, config=tuple(config.items()))


def _named_model_ids(bundles: Iterable[Any]) -> list[str]:
    """Catalog model ids that some rule names in a `model.id` condition (they must be in the space)."""
    found: list[str] = []
    for bundle in bundles:
        for rule in bundle.rules:
            for key, val in leaves(rule.when):
                if key != "model.id":
                    continue
                lits = val if not isinstance(val, dict) else (val.get("in") or val.get("eq") or val.get("ne")
                                                              or val.get("not_in") or [])
                for lit in (lits if isinstance(lits, list) else [lits]):
                    if isinstance(lit, str) and lit not in found:
                        found.append(lit)
    return found


def _device_leaves(when: Any, out: list) -> None:
    """Every test of a fact of the device alone anywhere in a condition (inside all/any/not too)."""
    out.extend((key, pred) for key, pred in leaves(when) if inputs_of(key) == {"device"})


def device_groups(catalog: Catalog, bundles: Sequence[Any]) -> list[list[str]]:
    """Device classes no rule and no catalog cell can tell apart, grouped (first = representative).

    Two classes are equivalent when they have the same vendor, every `device.*` test in every rule
    gives the same answer for both, and the capability matrix (status per backend × KV dtype ×
    phase, head padding) is the same: then every decision differs only in the device's name inside
    messages, so one class is evaluated for the group.
    """
    from nsa_policy.core.conditions import compile_condition

    found: list = []
    for bundle in bundles:
        for rule in bundle.rules:
            _device_leaves(rule.when, found)
    checks = []
    for key, pred in found:
        refs = isinstance(pred, dict) and any(isinstance(v, dict) and "fact" in v for v in pred.values())
        checks.append(None if refs else compile_condition({key: pred})[0])
    groups: dict[tuple, list[str]] = {}
    for cls in catalog.device_doc.classes:
        dev = catalog.device(cls)
        ns = device_part(dev, catalog)  # a capability spec: no product, memory or SM count
        truths = tuple(cls if c is None else bool(c(ns)) for c in checks)
        cells = tuple((catalog.capability(b, cls, kv, ph).status, spec.pad_heads_to.get(cls))
                      for b, spec in catalog.backends.items() for kv in ("bfloat16", "fp8_e4m3")
                      for ph in ("prefill", "decode"))
        groups.setdefault((dev.vendor, truths, cells), []).append(cls)
    return list(groups.values())


def other_kv_dtypes() -> tuple[str, ...]:
    """KV dtypes some release's --kv-cache-dtype lists that are not DSA's (nor INVALID_KV, nor an alias): its
    KV-cache checks judge them where the DSA block does not (Intel XPU, family-only architectures; sglang 0.5.22+
    arg_groups/kv_cache_hook.py; fp4_e2m1 up to 0.5.15). Read from the argument registry, their one owner."""
    from nsa_policy.catalog.store import KV_DTYPES
    from nsa_policy.engines.sglang.args import load_args
    from nsa_policy.engines.sglang.config import KV_ALIASES

    listed = dict.fromkeys(k for c in load_args().argument("kv_cache_dtype").choices for k in c.values)
    return tuple(k for k in listed if KV_ALIASES.get(k, k) not in ("auto", *KV_DTYPES) and k != INVALID_KV)


def _arch_values(archs: Iterable[str], topk: int) -> tuple[Value, ...]:
    """A model given by its architecture alone (no catalog checkpoint): the catalog family's defaults."""
    return tuple(Value(label=f"{arch} (topk {topk}, heads not given)", arch=(arch, topk, None)) for arch in archs)


def uncatalogued_families(catalog: Catalog) -> list[tuple[str, str]]:
    """(family, architecture) for DSA families with no checkpoint in the model catalog (e.g. mistral_large3)."""
    have = {catalog.model(m).family for m in catalog.model_ids}
    return [(fam, spec.architectures[0]) for fam, spec in catalog.model_doc.families.items() if fam not in have]


def representative_models(catalog: Catalog, bundles: Iterable[Any] = ()) -> list[str]:
    """One catalog model per DSA family: the first one a rule names, else the family's first."""
    named = _named_model_ids(bundles)
    out = []
    for family in catalog.model_doc.families:
        ids = [m for m in catalog.model_ids if catalog.model(m).family == family]
        if not ids:
            continue  # a family with no released checkpoint in the catalog
        pick = next((m for m in named if m in ids), ids[0])
        out.append(pick)
    return out


SHAPES = (
    cfg_value("tp1"),
    cfg_value("tp8", tp_size=8),
    cfg_value("tp8 dp8 dp-attention", tp_size=8, dp_size=8, enable_dp_attention=True),
)
BAD_SHAPES = (
    cfg_value("tp1"),
    cfg_value("tp6", tp_size=6),
    cfg_value("tp8 dp3 dp-attention", tp_size=8, dp_size=3, enable_dp_attention=True),
    cfg_value("dp8 dp-attention, tp unset (1)", dp_size=8, enable_dp_attention=True),
    cfg_value("tp8 attn-cp3", tp_size=8, attn_cp_size=3),
    cfg_value("tp8 dp4 dp-attention attn-cp4", tp_size=8, dp_size=4, enable_dp_attention=True, attn_cp_size=4),
    cfg_value("tp8 dp3 (replicas) attn-cp2", tp_size=8, dp_size=3, attn_cp_size=2),
)
HISPARSE = (
    cfg_value("off"),
    cfg_value("on (radix cache on)", enable_hisparse=True),
    cfg_value("on (radix cache off)", enable_hisparse=True, disable_radix_cache=True),
)


def _thresholds(topk: int) -> tuple[Value, ...]:
    env_var = threshold_env_vars()[0]
    return (
        cfg_value(f"{topk // 2} (flag)", dense_attn_kv_len_threshold=topk // 2),
        cfg_value(f"{topk * 2} (flag)", dense_attn_kv_len_threshold=topk * 2),
        cfg_value("131072 (flag)", dense_attn_kv_len_threshold=131072),
        Value(label="131072 (env)", env=((env_var, "131072"),)),
        # the DSA name alone: sglang up to 0.5.12 does not read it, 0.5.13+ read only it (environ.py of each release)
        Value(label="131072 (DSA env)", env=((threshold_env_vars()[1], "131072"),)),
        # both names, different values: each release reads its own; default refuses the ambiguity (NSA004)
        Value(label=f"{topk * 2} (NSA env) + {topk // 2} (DSA env)",
              env=((env_var, str(topk * 2)), (threshold_env_vars()[1], str(topk // 2)))),
    )


EXTRAS = (
    cfg_value("page_size 1", page_size=1),
    # a forced attention backend: sglang keeps it (dsa only when unset); the default refuses a non-DSA one
    cfg_value("attention_backend flashinfer", attention_backend="flashinfer"),
    cfg_value("attention_backend flashinfer, deterministic inference", attention_backend="flashinfer",
              enable_deterministic_inference=True),
    cfg_value("attention_backend fa4, deterministic inference", attention_backend="fa4",
              enable_deterministic_inference=True),
    cfg_value("attention_backend dsa", attention_backend="dsa"),
    *(cfg_value(f"attention_backend {b}", attention_backend=b)
      for b in ("trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "intel_xpu", "cutlass_mla",
                "flashmla")),
    cfg_value("HiSparse with mixed chunk", enable_hisparse=True, disable_radix_cache=True, enable_mixed_chunk=True),
    cfg_value("HiCache on a PD decode server", enable_hierarchical_cache=True, disaggregation_mode="decode"),
    cfg_value("page_size 64", page_size=64),
    cfg_value("page_size 16", page_size=16),
    # a page size of 64 or more that is not the model's 64 x index_kpool (default: page-size.cuda-conflict-index-kpool)
    cfg_value("page_size 128", page_size=128),
    cfg_value("modelopt_fp4 (tp8 dp8 dp-attention)", quantization="modelopt_fp4", tp_size=8, dp_size=8,
         enable_dp_attention=True),
    Value(label="flashinfer-python 0.6.7", packages=(("flashinfer-python", "0.6.7"),)),
    Value(label="flashinfer-python 0.6.14", packages=(("flashinfer-python", "0.6.14"),)),
    # ROCm page size from sglang 0.5.12: 64 when aiter's preshuffle paged-MQA path is usable
    Value(label="aiter preshuffle (SGLANG_USE_AITER=1, triton 3.6.0)", env=(("SGLANG_USE_AITER", "1"),),
          packages=(("triton", "3.6.0"),)),
    # ... disabled under the NSA name, which 0.5.12-0.5.20 read and 0.5.21 no longer does (0.5.21 environ.py)
    Value(label="SGLANG_NSA_HIP_DISABLE_PRESHUFFLE=1 (SGLANG_USE_AITER=1, triton 3.6.0)",
          env=(("SGLANG_USE_AITER", "1"), ("SGLANG_NSA_HIP_DISABLE_PRESHUFFLE", "1")), packages=(("triton", "3.6.0"),)),
    # flag spellings the releases judge: deprecated from 0.5.13, refused from 0.5.20; added in 0.5.22
    Value(label="spelt --nsa-prefill-backend", spellings=("--nsa-prefill-backend",)),
    cfg_value("spelt --attn-dp-size 8 (tp8)", tp_size=8, dp_size=8,
         enable_dp_attention=True)._replace_spellings(("--attn-dp-size",)),
    cfg_value("spelt --enable-dp-attention (tp8 dp8)", tp_size=8, dp_size=8,
         enable_dp_attention=True)._replace_spellings(("--enable-dp-attention",)),
    # read when sglang builds the DSA backend and indexer (late checks, NSA112/NSA321)
    cfg_value("dsa_triton_union 4 (tp8)", dsa_triton_union=4, tp_size=8),
    cfg_value("dsa_triton_union 4, deterministic inference (tp8)", dsa_triton_union=4, tp_size=8,
         enable_deterministic_inference=True),
    cfg_value("enable_mixed_chunk", enable_mixed_chunk=True),
    # check_server_args: the per-rank chunked-prefill size must be a multiple of the page size (0.5.22+)
    cfg_value("chunked_prefill_size 1000 (tp8)", chunked_prefill_size=1000, tp_size=8),
    # DSA prefill CP reads --dp-size as attention DP (0.5.22+): tp must be a multiple of it
    cfg_value("prefill CP interleave, dp 3 without DP attention (tp unset)", enable_prefill_cp=True,
              cp_strategy="interleave", dp_size=3),
    # CP-TP group sharing (Glm5Next, 0.5.22+): the attention-CP width must equal tp_size
    cfg_value("prefill CP interleave, attn_cp_size 4 (tp8)", enable_prefill_cp=True, cp_strategy="interleave",
              attn_cp_size=4, tp_size=8),
    cfg_value("dsa_paged_mqa_logits_backend aiter", dsa_paged_mqa_logits_backend="aiter"),
    cfg_value("dsa_paged_mqa_logits_backend deepgemm", dsa_paged_mqa_logits_backend="deepgemm"),
    cfg_value("dsa_paged_mqa_logits_backend cutedsl", dsa_paged_mqa_logits_backend="cutedsl"),
    # a linear-attention hybrid's Mamba radix cache: the page size must divide the track interval (0.5.20+)
    cfg_value("mamba_track_interval 100 (tp8)", mamba_track_interval=100, tp_size=8),
    cfg_value("speculative_num_draft_tokens 512 (tp8)", speculative_num_draft_tokens=512, tp_size=8),
    # trtllm_mha prefill with attention CP needs SM100 (0.5.19+ attention_hook.py)
    cfg_value("attention_backend trtllm_mha, attn_cp_size 2 (tp8)", attention_backend="trtllm_mha", attn_cp_size=2,
              tp_size=8),
)


# Model variants and serving options the later sglang releases read (their arg_groups/model_hook.py): attention
# sinks (HYV4), pooled index pages, top-k sharing, a NextN draft architecture as the main model; decode and
# prefill context parallel, two-batch overlap.
def _model_variants(topk: int) -> tuple[Value, ...]:
    return (
        Value(label="HYV4ForCausalLM (learnable_sink)", arch=("HYV4ForCausalLM", topk, None),
              model_extra=(("learnable_sink", True),)),
        Value(label="DeepseekV3ForCausalLM (index_kpool 2)", arch=("DeepseekV3ForCausalLM", topk, None),
              model_extra=(("index_kpool", 2),)),
        Value(label="DeepseekV3ForCausalLM (index_topk_freq 2)", arch=("DeepseekV3ForCausalLM", topk, None),
              model_extra=(("index_topk_freq", 2),)),
        Value(label="DeepseekV3ForCausalLMNextN", arch=("DeepseekV3ForCausalLMNextN", topk, None)),
        # the family overrides only, from sglang 0.5.16 (bundle.yaml family_only_architectures)
        Value(label="LongcatFlashForCausalLMNextN", arch=("LongcatFlashForCausalLMNextN", topk, None)),
        # a NoPE MLA model (qk_rope_head_dim 0): sglang 0.5.22+ refuses flashmla_sparse_q8 over its fp8 pool
        Value(label="GlmMoeDsaForCausalLM (NoPE)", arch=("GlmMoeDsaForCausalLM", topk, None),
              model_extra=(("qk_rope_head_dim", 0),)),
        # a deepseek_v3 config.json with the indexer's top-k but not its head size (sglang: AttributeError)
        Value(label="DeepseekV3ForCausalLM (model_type deepseek_v3, no index_head_dim)",
              arch=("DeepseekV3ForCausalLM", topk, None), model_extra=(("model_type", "deepseek_v3"),)),
    )


SERVING_VARIANTS = (
    cfg_value("default"),
    cfg_value("dcp_size 2", dcp_size=2),
    cfg_value("dcp_size 2 with HiSparse", dcp_size=2, enable_hisparse=True, disable_radix_cache=True),
    # HiSparse on the variant architectures (family-only ones are validated on the values as given)
    cfg_value("HiSparse", enable_hisparse=True, disable_radix_cache=True),
    cfg_value("prefill context parallel (interleave)", enable_prefill_cp=True, cp_strategy="interleave"),
    cfg_value("two-batch overlap", enable_two_batch_overlap=True),
    # 16 heads per rank for a 128-head model: triton_sparse_mla's index_kpool check is reached
    cfg_value("tp_size 8", tp_size=8),
    # a threshold set under decode context parallel, which turns dense MHA one-shot off (NSA203 notes it)
    cfg_value("dcp_size 2 with threshold 1024 (flag)", dcp_size=2, dense_attn_kv_len_threshold=1024),
)


# Speculative decoding as sglang 0.5.15+ resolves it for a DSA model (arg_groups/speculative_hook.py):
# the draft parameters given in part, or the steps without the top-k, a paged draft tree, NGRAM.
SPECULATIVE_VARIANTS = (
    cfg_value("EAGLE, top-k without the steps", speculative_algorithm="EAGLE", speculative_eagle_topk=4),
    cfg_value("EAGLE, steps without the top-k", speculative_algorithm="EAGLE", speculative_num_steps=3),
    cfg_value("EAGLE, steps 3 top-k 4 draft 8", speculative_algorithm="EAGLE", speculative_num_steps=3,
              speculative_eagle_topk=4, speculative_num_draft_tokens=8),
    cfg_value("NEXTN, steps 3 top-k 1 draft 4", speculative_algorithm="NEXTN", speculative_num_steps=3,
              speculative_eagle_topk=1, speculative_num_draft_tokens=4),
    cfg_value("NGRAM", speculative_algorithm="NGRAM"),
    cfg_value("NGRAM, attention DP 8 (tp8)", speculative_algorithm="NGRAM", tp_size=8, dp_size=8,
              enable_dp_attention=True),
    cfg_value("STANDALONE, steps 3 top-k 1 draft 4, attention DP 8 (tp8)", speculative_algorithm="STANDALONE",
              speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4, tp_size=8, dp_size=8,
              enable_dp_attention=True),
    # a forced flex_attention, HiCache with DCP, HiSparse: each takes speculative decoding only in part
    cfg_value("STANDALONE, steps 3 top-k 1 draft 4, attention_backend flex_attention", speculative_algorithm="STANDALONE",
              speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4,
              attention_backend="flex_attention"),
    cfg_value("EAGLE, steps 1 top-k 1 draft 2, HiCache with dcp 2 (tp8)", speculative_algorithm="EAGLE",
              speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=2,
              enable_hierarchical_cache=True, dcp_size=2, tp_size=8),
    cfg_value("NGRAM top-k 2, HiSparse", speculative_algorithm="NGRAM", speculative_num_steps=2, speculative_eagle_topk=2,
              enable_hisparse=True, disable_radix_cache=True),
)


# Prefill context parallel as the sglang releases check it (strategy, DP, world size, PD role, dcp); the
# generic switch of 0.5.10-0.5.19 with its zigzag default.
PREFILL_CP_VARIANTS = (
    cfg_value("prefill CP interleave (tp8)", enable_prefill_cp=True, cp_strategy="interleave", tp_size=8),
    cfg_value("prefill CP zigzag (tp8)", enable_prefill_cp=True, cp_strategy="zigzag", tp_size=8),
    cfg_value("prefill CP without a strategy (tp8)", enable_prefill_cp=True, tp_size=8),
    cfg_value("prefill CP interleave (tp8 dp8 dp-attention)", enable_prefill_cp=True, cp_strategy="interleave",
         tp_size=8, dp_size=8, enable_dp_attention=True),
    cfg_value("prefill CP zigzag (tp16)", enable_prefill_cp=True, cp_strategy="zigzag", tp_size=16),
    cfg_value("prefill CP interleave on a PD decode worker (tp8)", enable_prefill_cp=True, cp_strategy="interleave",
         tp_size=8, disaggregation_mode="decode"),
    cfg_value("prefill CP interleave with dcp 2 (tp8)", enable_prefill_cp=True, cp_strategy="interleave", tp_size=8,
         dcp_size=2),
    cfg_value("generic prefill CP switch, zigzag (tp8 dp8 dp-attention)", enable_prefill_context_parallel=True,
         cp_strategy="zigzag", tp_size=8, dp_size=8, enable_dp_attention=True),
    cfg_value("DSA cache layer split, interleave CP, PD prefill (tp8)", enable_dsa_cache_layer_split=True,
         enable_prefill_cp=True, cp_strategy="interleave", tp_size=8, disaggregation_mode="prefill"),
    cfg_value("DSA cache layer split without CP (tp8)", enable_dsa_cache_layer_split=True, tp_size=8),
)


def standard_space(bundles: Iterable[Any] = (), catalog: Optional[Catalog] = None, engine: Optional[str] = None) -> Space:
    """The space `check` and `diff` enumerate. `bundles` only decide which catalog model stands for a family;
    `engine` names the engine the configs are for (None: the default one)."""
    catalog = catalog or load_catalog()
    bundles = list(bundles)
    device = Dim("device", tuple(Value(label=group[0], device=group[0], covers=tuple(group))
                                 for group in device_groups(catalog, bundles)), counts_for_size=False)
    models = representative_models(catalog, bundles)
    model = Dim("model", tuple(Value(label=m, model=m) for m in models), counts_for_size=False)
    topk = min((catalog.model(m).index_topk or 2048) for m in models) if models else 2048
    kv3 = Dim("kv_cache_dtype", (cfg_value("auto"), cfg_value("bfloat16", kv_cache_dtype="bfloat16"),
                                 cfg_value("fp8_e4m3", kv_cache_dtype="fp8_e4m3")))
    kv4 = Dim("kv_cache_dtype", kv3.values + (cfg_value(INVALID_KV, kv_cache_dtype=INVALID_KV),))
    names = catalog.backend_names

    def side(phase: str, choices: Sequence[Optional[str]]) -> Dim:
        key = f"{phase}_backend"
        return Dim(phase, tuple(cfg_value("unset") if c is None else cfg_value(c, **{key: c}) for c in choices))

    all_choices = [None] + names
    bad_choices = [None, "trtllm", INVALID_BACKEND]
    blocks = (
        Block("backends", (device, model, kv3, side("prefill", all_choices), side("decode", all_choices),
                           Dim("parallel", SHAPES))),
        Block("hisparse", (device, model, kv3, side("prefill", all_choices), side("decode", all_choices),
                           Dim("hisparse", HISPARSE[1:]))),
        Block("threshold", (device, model, kv3, side("prefill", all_choices),
                            Dim("threshold", _thresholds(topk)), Dim("parallel", (SHAPES[0], SHAPES[2])))),
        Block("input", (device, model, kv4, side("prefill", bad_choices), side("decode", bad_choices),
                        Dim("parallel", BAD_SHAPES))),
        Block("extras", (device, model, kv3, side("prefill", all_choices), Dim("extra", EXTRAS))),
        *([Block("uncatalogued", (device, Dim("model", _arch_values(
            (arch for _, arch in uncatalogued_families(catalog)), topk), counts_for_size=False), kv3,
            side("prefill", all_choices), side("decode", all_choices)))] if uncatalogued_families(catalog) else []),
        Block("variants", (device, Dim("model", _model_variants(topk), counts_for_size=False), kv3,
                           side("prefill", all_choices), Dim("serving", SERVING_VARIANTS))),
        # CP-TP group sharing (0.5.22+) reads a Glm5Next checkpoint's linear-attention config, which a
        # config.json of another model type lacks
        Block("prefill_cp", (device, Dim("model", model.values + (
            Value(label="Glm5NextForConditionalGeneration (model_type deepseek_v3)",
                  arch=("Glm5NextForConditionalGeneration", topk, None),
                  model_extra=(("model_type", "deepseek_v3"), ("index_head_dim", 128))),), counts_for_size=False),
            Dim("prefill_cp", PREFILL_CP_VARIANTS))),
        Block("kv_hooks", (device, Dim("model", model.values + _arch_values(
            [a for _, a in uncatalogued_families(catalog)]
            + sorted({a for b in bundles for a in getattr(b, "family_only_architectures", ())}), topk),
            counts_for_size=False),
            Dim("kv_cache_dtype", tuple(cfg_value(k, kv_cache_dtype=k) for k in (*other_kv_dtypes(), INVALID_KV))),
            # a forced trtllm_mla or cutedsl_mla reads the KV dtype as typed where the DSA KV default does not run;
            # a forced fa3 meets the attention-backend pass's e4m3-only check where a release keeps fp8_e5m2
            Dim("attention_backend", (cfg_value("unset"), *(cfg_value(f"attention_backend {b}", attention_backend=b)
                                                            for b in ("trtllm_mla", "cutedsl_mla", "fa3")))))),
        Block("speculative", (device, model, kv3, Dim("speculative", SPECULATIVE_VARIANTS))),
        Block("not_dsa_prefill_cp", (device, Dim("model", (Value(label=NON_DSA_ARCH, arch=(NON_DSA_ARCH, None, None)),),
                                                 counts_for_size=False), Dim("prefill_cp", PREFILL_CP_VARIANTS))),
        Block("not_dsa", (device, Dim("model", (Value(label=NON_DSA_ARCH, arch=(NON_DSA_ARCH, None, None)),),
                                      counts_for_size=False),
                          Dim("kv_cache_dtype", (kv4.values[0], kv4.values[3])),
                          side("prefill", [None, names[0]]), Dim("hisparse", HISPARSE[:3:2]),
                          Dim("threshold", (cfg_value("unset"), _thresholds(topk)[0])),
                          Dim("serving", (SERVING_VARIANTS[0], SERVING_VARIANTS[5])))),
    )
    if engine is not None:
        blocks = tuple(dataclasses.replace(b, engine=engine) for b in blocks)
    return Space(blocks, description="device classes × one catalog model per DSA family × KV dtypes × "
                                     "backend choices × shapes × HiSparse × thresholds × extras")


def space_for(bundles: Sequence[Any], catalog: Optional[Catalog] = None) -> Space:
    """The space bundles are checked (or diffed) over: their engine's (vLLM's facts are not sglang's)."""
    from nsa_policy import engines
    from nsa_policy.base.errors import InputError

    names = sorted({b.engine for b in bundles})
    if len(names) > 1:
        raise InputError("policy", ", ".join(b.name for b in bundles),
                         hint=f"bundles of different engines ({', '.join(names)}) have no space in common")
    return engines.get(names[0] if names else engines.DEFAULT).space(bundles, catalog)


# ---------------------------------------------------------------- points → facts (cached: many points share parts)

class FactsBuilder:
    """Builds Facts for points quickly: devices, models, configs and environments are reused."""

    def __init__(self, catalog: Optional[Catalog] = None):
        self.catalog = catalog or load_catalog()
        self._parts: dict = {}
        self._models: dict = {}
        self._derived: dict = {}

    def model(self, model: Any):
        key = model if isinstance(model, str) else repr(sorted(model.items()))
        hit = self._models.get(key)
        if hit is None:
            hit = (self.catalog.model(model) if isinstance(model, str)
                   else self.catalog.model_from_config(model, source="space"))
            self._models[key] = hit
        return hit

    def _settings(self, point: Point):
        """(ServingConfig, Environment) for the point's non-device, non-model values (shared by many points)."""
        key = (point.block.name,) + tuple(i for d, i in zip(point.block.dims, point.digits) if d.counts_for_size)
        hit = self._parts.get(key)
        if hit is None:
            config: dict[str, Any] = {}
            env: dict[str, str] = {}
            packages: dict[str, str] = {}
            for v in point.values:
                config.update(v.config)
                env.update(v.env)
                packages.update(v.packages)
            if point.block.engine is not None:
                config["engine"] = point.block.engine
            hit = self._parts[key] = (ServingConfig(**config), environment_from(env, packages))
        return hit

    def facts(self, point: Point) -> Facts:
        device: Optional[str] = None
        model: Union[str, dict[str, Any], None] = None
        for v in point.values:
            device = v.device or device
            if v.model:
                model = v.model
            elif v.arch:
                model = {"architectures": [v.arch[0]], **({"index_topk": v.arch[1]} if v.arch[1] else {}),
                         **({"num_attention_heads": v.arch[2]} if v.arch[2] else {}), **dict(v.model_extra)}
        if device is None:  # every block has a device dimension
            raise ValueError(f"point {point.index} has no device value")
        cfg, environment = self._settings(point)
        mdl = self.model(model)
        dkey = (id(mdl), id(cfg))
        derived = self._derived.get(dkey)
        if derived is None:
            derived = self._derived[dkey] = derive(mdl, cfg)
        spellings = tuple(s for v in point.values for s in v.spellings)
        return Facts.model_construct(device=self.catalog.device(device), model=mdl, config=cfg, env=environment,
                                     derived=derived, spellings=spellings)
