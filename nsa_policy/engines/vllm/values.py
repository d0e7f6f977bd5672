"""vLLM's own value form in a rule's `set` (`attention_backend: {vllm_first_valid: [...]}`) and the
check that a rule names real vLLM backends."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from nsa_policy.base.errors import closest
from nsa_policy.catalog.store import Catalog
from nsa_policy.core.bundle import Fixed, ValueSpec
from nsa_policy.engines.vllm.reads import SELECTOR_READS


@dataclass(frozen=True)
class VllmFirstValid(ValueSpec):
    """vLLM's automatic choice: the first candidate its validate_configuration accepts here
    (rules/catalog/vllm/backends.yaml), for the KV dtype at selection decided so far."""

    candidates: tuple[str, ...]
    reads: tuple[str, ...] = SELECTOR_READS  # what selector_facts reads

    def value(self, ns: Mapping[str, Any], catalog: Catalog) -> Any:
        from nsa_policy.engines.vllm.catalog import load_vllm, selector_facts

        if ns["out.requested_kv_cache_dtype"] is None:
            return None
        v, sel = load_vllm(), selector_facts(ns, catalog)
        return next((c for c in self.candidates if not v.reasons(c, sel)), None)

    def describe(self) -> str:
        return f"the first vLLM backend that validates here of {', '.join(self.candidates)}"


def compile_first_valid(out: str, cands: Any, err: Callable[[str], Exception]) -> ValueSpec:
    if not (isinstance(cands, list) and all(isinstance(c, str) for c in cands)):
        raise err(f"set.{out}: vllm_first_valid takes a list of vLLM backend names")
    return VllmFirstValid(tuple(cands))


def set_problem(out: str, value: ValueSpec) -> Optional[str]:
    """An unknown vLLM backend name that a rule sets attention_backend to (an upper-case enum name or
    a candidate)."""
    if out != "attention_backend":
        return None
    if isinstance(value, VllmFirstValid):
        names = list(value.candidates)
    elif isinstance(value, Fixed) and isinstance(value.literal, str) and value.literal.isupper():
        names = [value.literal]
    else:
        return None
    from nsa_policy.engines.vllm.catalog import load_vllm

    v = load_vllm()
    for b in names:
        # a candidate is validated, so it needs the catalog's entry; a fixed name may be any registered one
        # (vLLM's XPU platform returns TURBOQUANT, which no DSA layer validates)
        known = b in v.backends if isinstance(value, VllmFirstValid) else v.is_registered(b)
        if not known:
            return f"unknown vLLM backend {b!r}; did you mean {closest(b, v.backend_names)!r}?"
    return None
