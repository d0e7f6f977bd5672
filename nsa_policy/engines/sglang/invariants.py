"""The invariants of an sglang recommendation bundle (`default` and any non-compat sglang bundle), checked per decision.

These are written independently of the rules: they read the decision, the facts and the capability
matrix, never the rule files, so a rule that breaks one cannot also hide it. Compatibility bundles
reproduce sglang's bugs on purpose and are exempt.

1. no backend chosen where the capability matrix says it cannot run (a rule's choice, accepted or not;
   any choice of an accepted decision, which must also meet the backend's top-k and package needs);
2. no accepted fp8 decision with exactly one trtllm side;
3. an explicit valid user choice is never replaced;
4. every rejection lists at least one valid alternative when one exists (needs the neighbours of an
   input, so it is decided over the space in check.py);
5. every accepted decision passes the validations below (page size a backend needs, KV layout,
   HiSparse prerequisites, parallel shape, index_topk).
"""
from __future__ import annotations

from typing import Any, Iterator

from nsa_policy.catalog.store import KV_DTYPES, Catalog
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Facts, effective_tp_size
from nsa_policy.engines.sglang.config import KV_ALIASES

INVARIANTS = {
    "backend-runs-here": "no backend is chosen where the capability matrix says it cannot run",
    "fp8-trtllm-both-or-neither": "no accepted fp8 decision has exactly one trtllm side",
    "user-choice-kept": "an explicit valid user choice is never replaced",
    "rejection-lists-alternative": "every rejection lists at least one valid alternative when one exists",
    "accepted-passes-validations": "every accepted decision passes all validations",
}

Violation = tuple[str, str, str]  # (invariant, detail key, message)


def _backends_run(decision: Decision, facts: Facts, catalog: Catalog) -> Iterator[Violation]:
    kv = decision.kv_cache_dtype
    if kv not in KV_DTYPES:
        return
    accepted = not decision.errors
    for phase in ("prefill", "decode"):
        backend = getattr(decision, f"{phase}_backend")
        if backend is None or backend not in catalog.backends:
            continue
        prov = decision.provenance.get(f"{phase}_backend")
        by_rule = prov is not None and prov.source == "rule"
        if not (by_rule or accepted):
            continue  # the user's own unrunnable choice, rejected: that is the policy working
        cap = catalog.capability(backend, facts.device.device_class, kv, phase)
        problem = None if cap.runs else cap.reason
        if accepted:  # requirements beyond the matrix (top-k, package versions) bind accepted decisions
            problem = problem or catalog.requirement_problem(backend, facts.model.index_topk, facts.env.packages)
        if problem:
            who = f"rule {prov.detail}" if by_rule and prov is not None else "an accepted decision"
            yield ("backend-runs-here", f"{who}: {phase} {backend}",
                   f"{who} chose {phase} backend {backend} on {facts.device.device_class} with {kv} KV, "
                   f"which cannot run there: {problem}")


def _fp8_pairing(decision: Decision) -> Iterator[Violation]:
    if decision.errors or decision.kv_cache_dtype != "fp8_e4m3":
        return
    sides = (decision.prefill_backend == "trtllm", decision.decode_backend == "trtllm")
    if sides[0] != sides[1]:
        yield ("fp8-trtllm-both-or-neither", f"{decision.prefill_backend}/{decision.decode_backend}",
               f"accepted fp8 KV with prefill {decision.prefill_backend} and decode {decision.decode_backend}: "
               "the two sides read different KV layouts of one pool")


def _user_choices_kept(decision: Decision, facts: Facts, catalog: Catalog) -> Iterator[Violation]:
    cfg = facts.config
    wanted: dict[str, Any] = {}
    kv = KV_ALIASES.get(cfg.kv_cache_dtype) if cfg.kv_cache_dtype is not None else None
    if kv in KV_DTYPES:
        wanted["kv_cache_dtype"] = kv
    for phase in ("prefill", "decode"):
        name = getattr(cfg, f"{phase}_backend")
        if name in catalog.backends:
            wanted[f"{phase}_backend"] = name
    if cfg.page_size is not None:
        wanted["page_size"] = cfg.page_size
    threshold = cfg.dense_attn_kv_len_threshold
    if threshold is None:
        threshold = facts.env.dense_attn_kv_len_threshold
    if threshold is not None:
        wanted["dense_attn_kv_len_threshold"] = threshold
    for out, value in wanted.items():
        got = getattr(decision, out)
        prov = decision.provenance.get(out)
        if got != value or (prov is not None and prov.overwrote):
            who = f" by rule {prov.detail}" if prov is not None and prov.source == "rule" else ""
            yield ("user-choice-kept", out, f"the user's {out}={value!r} was replaced with {got!r}{who}")


def _validations(decision: Decision, facts: Facts, catalog: Catalog) -> Iterator[Violation]:
    if decision.errors:
        return
    cfg, dev = facts.config, facts.device
    kv, pre, dec = decision.kv_cache_dtype, decision.prefill_backend, decision.decode_backend

    def bad(detail: str, message: str) -> Violation:
        return ("accepted-passes-validations", detail, message)

    if kv not in KV_DTYPES:
        yield bad("kv dtype", f"accepted with kv_cache_dtype {kv!r}, not one of {', '.join(KV_DTYPES)}")
        return
    for phase, backend in (("prefill", pre), ("decode", dec)):
        spec = catalog.backends.get(backend) if backend else None
        if spec is not None and spec.page_size is not None and decision.page_size != spec.page_size:
            yield bad(f"page size for {backend}",
                      f"{phase} backend {backend} needs page size {spec.page_size}, decision has {decision.page_size}")
    raw = {"tilelang", "triton", "aiter"}  # raw fp8 rows on ROCm; CUDA tilelang on both sides too
    if kv == "bfloat16":
        layout = "bf16-576"
    elif "trtllm" in (pre, dec) or (dev.vendor == "amd" and raw & {pre, dec}) or pre == dec == "tilelang":
        layout = "fp8-576-per-tensor"
    else:
        layout = "fp8-656-blockwise"
    if decision.kv_cache_layout != layout:
        yield bad("kv layout", f"{kv} KV with prefill {pre} / decode {dec} needs layout {layout}, "
                               f"decision has {decision.kv_cache_layout}")
    if cfg.enable_hisparse and not cfg.disable_radix_cache:
        yield bad("hisparse radix cache", "HiSparse accepted with the radix cache on (sglang refuses it at launch)")
    heads = facts.model.num_attention_heads
    attn_tp = facts.derived.attn_tp_size
    if cfg.enable_dp_attention and effective_tp_size(cfg) % cfg.dp_size:
        yield bad("parallel shape", f"accepted tp_size {effective_tp_size(cfg)} with dp_size {cfg.dp_size} under DP attention")
    if heads and heads % attn_tp:
        yield bad("parallel shape", f"accepted {heads} heads over an attention-TP size of {attn_tp}")
    if decision.index_topk != facts.model.index_topk:
        yield bad("index_topk", f"index_topk {decision.index_topk} differs from the model's {facts.model.index_topk}")
    if dev.device_class not in catalog.device_doc.classes:
        yield bad("device", f"unknown device class {dev.device_class}")


def check_invariants(decision: Decision, facts: Facts, catalog: Catalog) -> list[Violation]:
    """Invariants 1, 2, 3 and 5 for one decision of a DSA model (4 needs the space)."""
    out: list[Violation] = []
    out.extend(_backends_run(decision, facts, catalog))
    out.extend(_fp8_pairing(decision))
    out.extend(_user_choices_kept(decision, facts, catalog))
    out.extend(_validations(decision, facts, catalog))
    return out
