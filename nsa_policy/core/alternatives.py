"""What a finding lists as valid instead (`emit.alternatives: {<kind>: <argument>}`).

One registry: each kind says what its argument is, which facts its list depends on, and how the
list is computed. Rule files, the compiler's checks, the evaluator and consumers (lint, docs)
all read it from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from nsa_policy.catalog.store import KV_DTYPES, Catalog
from nsa_policy.engines.vllm.reads import SELECTOR_READS

# Fact paths an alternatives list reads beyond the ones spelt out: "pkg.*" = any installed package.
ANY_PACKAGE = "pkg.*"
_PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class AlternativesKind:
    name: str
    doc: str
    argument: str  # what the argument is, for error messages and docs
    check: Callable[[Any], bool]  # is this a valid argument?
    reads: Callable[[Any], tuple[str, ...]]  # argument → fact paths the list depends on
    compute: Callable[[Any, Any, Catalog], tuple[str, ...]]  # (argument, namespace, catalog) → the list


@dataclass(frozen=True)
class Alternatives:
    """A rule's compiled `emit.alternatives`: the kind, its argument, and the facts the list reads."""

    kind: str
    arg: Any
    reads: tuple[str, ...]

    def values(self, ns: Any, catalog: Catalog) -> tuple[str, ...]:
        """The alternatives for the facts and outputs in `ns` (as the evaluator sees them)."""
        return KINDS[self.kind].compute(self.arg, ns, catalog)


def compile_alternatives(spec: Any) -> tuple[Optional[Alternatives], Optional[str]]:
    """(compiled, None), or (None, the problem) for a malformed `emit.alternatives`."""
    if spec is None:
        return None, None
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        return None, f"emit.alternatives takes one of {tuple(KINDS)}"
    kind, arg = next(iter(spec.items()))
    k = KINDS[kind]
    if not k.check(arg):
        return None, f"emit.alternatives.{kind} takes {k.argument}, got {arg!r}"
    return Alternatives(kind, arg, k.reads(arg)), None


# ---------------------------------------------------------------- the kinds

def _values(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    return tuple(str(v) for v in arg)


def _backends(phase: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    kv = ns["out.kv_cache_dtype"]
    if kv is None:
        return ()
    current = ns[f"out.{phase}_backend"]
    return tuple(b for b in catalog.valid_backends(phase, ns["device.class"], kv, ns["model.index_topk"], ns.packages)
                 if b != current)


def _kv_dtypes(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    dev, kv, topk = ns["device.class"], ns["out.kv_cache_dtype"], ns["model.index_topk"]
    return tuple(k for k in KV_DTYPES if k != kv and all(
        catalog.valid_backends(p, dev, k, topk, ns.packages) for p in _PHASES))


def _device_classes(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    topk = ns["model.index_topk"]
    return tuple(cls for cls in catalog.device_doc.classes
                 if any(all(catalog.valid_backends(p, cls, k, topk) for p in _PHASES) for k in KV_DTYPES))


def _backends_or_kv_dtypes(phase: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    # The valid backends of this phase; when none runs this KV dtype here, the KV dtypes that would.
    found = _backends(phase, ns, catalog)
    if found or ns["out.kv_cache_dtype"] is None:
        return found
    return tuple(f"kv_cache_dtype {k}" for k in _kv_dtypes(True, ns, catalog))


def _parallel(what: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """Shapes that divide evenly: dp sizes for this tp_size, or attention-TP sizes for these heads."""
    heads = ns["model.num_attention_heads"]
    dp, dp_attn = ns["config.dp_size"], ns["config.enable_dp_attention"]
    tp = ns["config.tp_size"] or (dp if dp_attn else 1)
    if what == "dp_size":
        return tuple(f"dp_size {d}" for d in range(1, tp + 1)
                     if tp % d == 0 and (not heads or heads % (tp // d) == 0))
    if not heads:
        return ()
    flag = "tp_size/dp_size" if dp_attn else "tp_size"
    return tuple(f"{flag} {a}" for a in range(1, heads + 1) if heads % a == 0)


def _vllm_backends(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """vLLM backend names: every sparse one (all), or those that validate here (valid), other than the chosen."""
    from nsa_policy.engines.vllm.catalog import load_vllm, selector_facts

    v = load_vllm()
    if arg == "all":
        return tuple(v.backend_names)
    if ns["out.requested_kv_cache_dtype"] is None:
        return ()
    sel, current = selector_facts(ns, catalog), ns["out.attention_backend"]
    return tuple(b for b, spec in v.backends.items()
                 if spec.sparse and b != current and not v.reasons(b, sel)
                 and v.fails_here(b, ns["device.vendor"], sel) is None)


def _vllm_choices(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    from nsa_policy.engines.vllm.catalog import load_vllm

    return tuple(load_vllm().argument(str(arg)).choices or ())


def _vllm_kv_or_devices(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """The KV dtypes some sparse backend validates here (as the selector would see them); when none, say so."""
    from nsa_policy.engines.vllm.catalog import load_vllm, selector_facts

    v = load_vllm()
    sel = selector_facts(ns, catalog)
    found = []
    for kv in v.argument("kv_cache_dtype").choices or ():
        trial = {**sel, "sel.kv_cache_dtype": kv}
        if kv != sel["sel.kv_cache_dtype"] and any(spec.sparse and not v.reasons(b, trial)
                                                   and v.fails_here(b, ns["device.vendor"], trial) is None
                                                   for b, spec in v.backends.items()):
            found.append(f"kv_cache_dtype {kv}")
    return tuple(found) or ("a device with a vLLM sparse backend (sm90, sm100, sm103, sm120, sm121, ROCm)",)


# vLLM's validation reads the selector facts (catalog/vllm.py SELECTOR_READS); a backend that fails after
# selection is passed over (by the device's vendor, or the selector facts), and the chosen backend is not its own alternative.
_VLLM_KV_READS = (*SELECTOR_READS, "device.vendor")
_VLLM_BACKENDS_READS = (*_VLLM_KV_READS, "out.attention_backend")


def _backend_reads(phase: str) -> tuple[str, ...]:
    return ("device.class", "out.kv_cache_dtype", "model.index_topk", f"out.{phase}_backend", ANY_PACKAGE)


_KV_READS = ("device.class", "out.kv_cache_dtype", "model.index_topk", ANY_PACKAGE)
_PARALLEL_READS = ("model.num_attention_heads", "config.tp_size", "config.dp_size", "config.enable_dp_attention")


def _is_phase(arg: Any) -> bool:
    return arg in _PHASES


KINDS: dict[str, AlternativesKind] = {k.name: k for k in (
    AlternativesKind("values", "the listed values, as written", "a list of values",
                     lambda a: isinstance(a, list), lambda a: (), _values),
    AlternativesKind("backends", "the backends of this phase that run here (device, KV dtype, model, packages), "
                     "other than the one chosen", "a phase: prefill or decode", _is_phase, _backend_reads, _backends),
    AlternativesKind("kv_dtypes", "the other KV dtypes with a backend on both phases here", "true",
                     lambda a: a is True, lambda a: _KV_READS, _kv_dtypes),
    AlternativesKind("device_classes", "the device classes where this model runs on both phases", "true",
                     lambda a: a is True, lambda a: ("model.index_topk",), _device_classes),
    AlternativesKind("backends_or_kv_dtypes", "the backends of this phase that run here; when none does, the KV "
                     "dtypes that would", "a phase: prefill or decode", _is_phase,
                     _backend_reads, _backends_or_kv_dtypes),
    AlternativesKind("catalog_backends", "every backend name of the catalog", "true",
                     lambda a: a is True, lambda a: (), lambda a, ns, catalog: tuple(catalog.backend_names)),
    AlternativesKind("sglang_choices", "the backends an sglang release lists as --nsa/--dsa-*-backend choices",
                     "an sglang release, e.g. \"0.5.10\"", lambda a: isinstance(a, str),
                     lambda a: (), lambda a, ns, catalog: tuple(catalog.sglang_choices(str(a)))),
    AlternativesKind("vllm_backends", "vLLM sparse attention backends: every name (all) or those that validate "
                     "here (valid)", "all or valid", lambda a: a in ("all", "valid"),
                     lambda a: _VLLM_BACKENDS_READS, _vllm_backends),
    AlternativesKind("vllm_choices", "the values a vLLM argument accepts (rules/catalog/vllm/args.yaml)",
                     "a vLLM argument name", lambda a: isinstance(a, str), lambda a: (), _vllm_choices),
    AlternativesKind("vllm_kv_or_devices", "the KV dtypes some vLLM sparse backend validates here", "true",
                     lambda a: a is True, lambda a: _VLLM_KV_READS, _vllm_kv_or_devices),
    AlternativesKind("threshold_variables", "the values the two dense-attention threshold variables carry "
                     "(set one of them)", "true", lambda a: a is True,
                     lambda a: ("env.dense_attn_kv_len_threshold", "env.dsa_threshold"),
                     lambda a, ns, catalog: tuple(f"dense_attn_kv_len_threshold {v}" for v in (
                         ns["env.dense_attn_kv_len_threshold"], ns["env.dsa_threshold"]) if v is not None)),
    AlternativesKind("parallel", "parallel shapes that divide evenly: dp sizes for this tp_size (dp_size) or "
                     "attention-TP sizes for these heads (attention_tp)", "dp_size or attention_tp",
                     lambda a: a in ("dp_size", "attention_tp"), lambda a: _PARALLEL_READS, _parallel),
)}

__all__ = ["ANY_PACKAGE", "Alternatives", "AlternativesKind", "KINDS", "compile_alternatives"]
