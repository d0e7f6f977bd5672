"""What a finding lists as valid instead (`emit.alternatives: {<kind>: <argument>}`).

One registry: each kind says what its argument is, which facts its list depends on, and how the
list is computed. Rule files, the compiler's checks, the evaluator and consumers (lint, docs)
all read it from here.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional

from nsa_policy.catalog.store import KV_DTYPES, Catalog

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
        return kinds()[self.kind].compute(self.arg, ns, catalog)


def compile_alternatives(spec: Any) -> tuple[Optional[Alternatives], Optional[str]]:
    """(compiled, None), or (None, the problem) for a malformed `emit.alternatives`."""
    if spec is None:
        return None, None
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in kinds():
        return None, f"emit.alternatives takes one of {tuple(kinds())}"
    kind, arg = next(iter(spec.items()))
    k = kinds()[kind]
    if not k.check(arg):
        return None, f"emit.alternatives.{kind} takes {k.argument}, got {arg!r}"
    return Alternatives(kind, arg, k.reads(arg)), None


# ---------------------------------------------------------------- the kinds

def _values(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    return tuple(str(v) for v in arg)


def _in_release(names: Any, phase: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """The backends of `names` that the targeted engine release accepts for `phase` (all of them when no
    release is targeted): offering one the release lacks is advice its parser refuses."""
    release = ns["input.release"]
    if release is None:
        return tuple(names)
    from nsa_policy import engines  # lazy: the registry loads the engines' packages

    engine = engines.get(ns["config.engine"])
    return tuple(b for b in names if engine.lists_backend(catalog, b, phase, release))


def _valid(phase: str, device_class: str, kv: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    return _in_release(catalog.valid_backends(phase, device_class, kv, ns["model.index_topk"], ns.packages),
                       phase, ns, catalog)


def _backends(phase: str, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    kv = ns["out.kv_cache_dtype"]
    if kv is None:
        return ()
    current = ns[f"out.{phase}_backend"]
    return tuple(b for b in _valid(phase, ns["device.class"], kv, ns, catalog) if b != current)


def _kv_dtypes(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    dev, kv = ns["device.class"], ns["out.kv_cache_dtype"]
    return tuple(k for k in KV_DTYPES if k != kv and all(_valid(p, dev, k, ns, catalog) for p in _PHASES))


def _catalog_backends(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """Every backend name (of a phase: those that serve it, per the catalog's `phases`), in the release."""
    if arg is True:
        return tuple(b for b in catalog.backend_names
                     if any(_in_release((b,), p, ns, catalog) for p in catalog.backends[b].phases))
    return _in_release((b for b in catalog.backend_names if arg in catalog.backends[b].phases), arg, ns, catalog)


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
    tp = ns["derived.tp_size"]
    if what == "dp_size":
        # tp_size unset is 1: the likelier intent is tp_size = dp_size, so that comes first
        given_tp = () if ns["config.tp_size"] is not None or not dp_attn else (f"tp_size {dp}",)
        return given_tp + tuple(f"dp_size {d}" for d in range(1, tp + 1)
                                if tp % d == 0 and (not heads or heads % (tp // d) == 0))
    if what == "attn_cp_size":
        # attention-CP widths tp_size takes (times the attention-DP width, with DP attention)
        width = dp if dp_attn else 1
        return tuple(f"attn_cp_size {c}" for c in range(1, tp + 1) if tp % (c * width) == 0)
    if not heads:
        return ()
    flag = "tp_size/dp_size" if dp_attn else "tp_size"
    return tuple(f"{flag} {a}" for a in range(1, heads + 1) if heads % a == 0)


_RELEASE_READS = ("input.release", "config.engine")


def _backend_reads(phase: str) -> tuple[str, ...]:
    return ("device.class", "out.kv_cache_dtype", "model.index_topk", f"out.{phase}_backend", ANY_PACKAGE,
            *_RELEASE_READS)


_KV_READS = ("device.class", "out.kv_cache_dtype", "model.index_topk", ANY_PACKAGE, *_RELEASE_READS)
_PARALLEL_READS = ("model.num_attention_heads", "config.tp_size", "derived.tp_size", "config.dp_size",
                   "config.enable_dp_attention")


def _is_phase(arg: Any) -> bool:
    return arg in _PHASES


# The engine-neutral kinds; each engine adds its own (Engine.alternatives_kinds).
NEUTRAL_KINDS: dict[str, AlternativesKind] = {k.name: k for k in (
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
    AlternativesKind("catalog_backends", "every backend name of the catalog (of a phase: those that serve it), "
                     "within the targeted release", "true, or a phase: prefill or decode",
                     lambda a: a is True or _is_phase(a), lambda a: _RELEASE_READS, _catalog_backends),
    AlternativesKind("threshold_variables", "the values the two dense-attention threshold variables carry "
                     "(set one of them)", "true", lambda a: a is True,
                     lambda a: ("env.dense_attn_kv_len_threshold", "env.dsa_threshold"),
                     lambda a, ns, catalog: tuple(f"dense_attn_kv_len_threshold {v}" for v in (
                         ns["env.dense_attn_kv_len_threshold"], ns["env.dsa_threshold"]) if v is not None)),
    AlternativesKind("parallel", "parallel shapes that divide evenly: dp sizes for this tp_size (dp_size), "
                     "attention-CP widths for this tp_size (attn_cp_size) or attention-TP sizes for these heads "
                     "(attention_tp)", "dp_size, attn_cp_size or attention_tp",
                     lambda a: a in ("dp_size", "attn_cp_size", "attention_tp"), lambda a: _PARALLEL_READS, _parallel),
)}



@lru_cache(maxsize=1)
def kinds() -> dict[str, AlternativesKind]:
    """Every kind a rule may name: the neutral ones and each registered engine's."""
    from nsa_policy import engines

    out = dict(NEUTRAL_KINDS)
    for engine in engines.every():
        for k in engine.alternatives_kinds():
            out[k.name] = k
    return out


__all__ = ["ANY_PACKAGE", "Alternatives", "AlternativesKind", "NEUTRAL_KINDS", "kinds", "compile_alternatives"]
