"""vLLM as an engine: its DSA backends (rules/catalog/vllm/backends.yaml) and its arguments (rules/catalog/vllm/args.yaml).

The one reader of those two files. Every surface that names a vLLM backend, argument or variable
(the vllm-* bundles through the fact namespace, resolve --engine vllm, the library's input names,
launch, lint, startup.apply_vllm) derives it from here.

`VllmCatalog.reasons(backend, sel)` is vLLM's `AttentionBackend.validate_configuration` evaluated
from the catalog's data: the same reason strings, in the same order (checked against vLLM 0.33.0's
own code by scripts/vllm_oracle).
"""

import re
from functools import lru_cache
from typing import Annotated, Any, Literal, Mapping, Optional, TypeVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from nsa_policy.base.errors import InputError, RuleFileError
from nsa_policy.base.paths import catalog_dir
from nsa_policy.base.schema_load import load_doc
from nsa_policy.base.versions import parse_version
from nsa_policy.core.conditions import Check, compile_condition

T = TypeVar("T")
# vLLM's unquantized KV dtypes (kv_cache_interface.is_quantized_kv_cache: anything else is quantized)
UNQUANTIZED_KV = ("auto", "float16", "bfloat16")


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


Tup = Annotated[tuple[T, ...], BeforeValidator(_as_tuple)]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


class CombinationCheck(_Spec):
    when: dict[str, Any]
    reason: str


class KvRewrite(_Spec):
    from_: Union[Literal["quantized"], Tup[str]] = Field(alias="from")
    except_: Tup[str] = Field(default=(), alias="except")
    to: str

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", populate_by_name=True, defer_build=True)

    def applies(self, kv: str) -> bool:
        if kv in self.except_:
            return False
        if self.from_ == "quantized":
            return kv not in UNQUANTIZED_KV
        return kv in self.from_


class Crash(_Spec):
    vendor: str
    reason: str


class AfterSelection(_Spec):
    """A configuration validate_configuration accepts but the backend's impl or metadata builder then
    refuses (NotImplementedError at start-up): `when` over sel.* facts, vLLM's own message as `reason`."""

    when: dict[str, Any]
    reason: str
    evidence: Tup[str] = ()


class VllmBackend(_Spec):
    since: str
    sparse: bool
    description: str
    head_sizes: Tup[int] = ()
    dtypes: Tup[str] = ()
    kv_cache_dtypes: Tup[str] = ()
    block_sizes: Tup[int] = ()
    capability_majors: Optional[Tup[int]] = None
    dcp: bool = False
    dense_prefill: bool = False
    combination: Tup[CombinationCheck] = ()
    kv_rewrite: Tup[KvRewrite] = ()
    crashes: Optional[Crash] = None
    fails_after_selection: Tup[AfterSelection] = ()
    evidence: Tup[str] = ()


class Indexer(_Spec):
    block_sizes: dict[str, Tup[int]]
    cache_dtypes: dict[str, str]
    mxfp4_capability_majors: Tup[int]
    default_block_size: int


class VllmBackendDoc(_Spec):
    selector_release: str
    model_dtype: str
    backends: dict[str, VllmBackend]
    indexer: Indexer
    # every other registered name → the first reason a DSA layer fails its validation with
    registered: dict[str, str] = {}
    # names AttentionConfig takes as another setting, leaving the backend to automatic selection
    automatic_aliases: Tup[str] = ()


class Spelling(_Spec):
    flag: str
    first: str
    last: Optional[str] = None


class VllmArgument(_Spec):
    name: str
    field: str
    help: str
    output: Optional[str] = None
    spellings: Tup[Spelling] = ()
    attention_config_key: Optional[str] = None
    attributes: Tup[str] = ()
    unset_values: Tup[str] = ()
    choices: Optional[Tup[str]] = None


class VllmEnvVar(_Spec):
    name: str
    first: str
    last: Optional[str] = None
    replaced_by: Optional[str] = None
    help: Optional[str] = None
    evidence: Tup[str] = ()


class VllmArgsDoc(_Spec):
    releases: Tup[str]
    arguments: Tup[VllmArgument]
    env: Tup[VllmEnvVar]


_PLACEHOLDER = re.compile(r"\{(sel\.[a-z_0-9]+)\}")
SEL_FACTS = ("sel.major", "sel.kv_cache_dtype", "sel.block_size", "sel.use_dcp", "sel.dcp_size", "sel.use_pcp",
             "sel.num_heads", "sel.gathered_heads", "sel.index_topk", "sel.index_topk_mult_128", "sel.kv_lora_rank",
             "sel.qk_rope_head_dim", "sel.qk_nope_head_dim", "sel.head_size")


class VllmCatalog:
    """vLLM's backends and arguments, loaded once."""

    def __init__(self) -> None:
        path = catalog_dir() / "vllm" / "backends.yaml"
        self.doc, _ = load_doc(VllmBackendDoc, path)
        self.args_doc, _ = load_doc(VllmArgsDoc, catalog_dir() / "vllm" / "args.yaml")
        self.backends: dict[str, VllmBackend] = self.doc.backends
        self._checks: dict[str, tuple[tuple[Check, str], ...]] = {}
        self._later: dict[str, tuple[tuple[Check, str], ...]] = {}
        for name, spec in self.backends.items():
            self._checks[name] = self._compile_checks(path, f"backends.{name}.combination", spec.combination)
            self._later[name] = self._compile_checks(path, f"backends.{name}.fails_after_selection",
                                                     spec.fails_after_selection)
        self.arguments = {a.name: a for a in self.args_doc.arguments}

    @staticmethod
    def _compile_checks(path: Any, where: str, checks: Any) -> tuple[tuple[Check, str], ...]:
        compiled = []
        for i, c in enumerate(checks):
            try:
                check, _, reads = compile_condition(c.when)
            except ValueError as exc:
                raise RuleFileError(str(path), None, f"{where}[{i}]: {exc}") from None
            unknown = [r for r in reads if r not in SEL_FACTS]
            unknown += [p for p in _PLACEHOLDER.findall(c.reason) if p not in SEL_FACTS]
            if unknown:
                raise RuleFileError(str(path), None, f"{where}[{i}]: unknown fact {unknown[0]!r}; "
                                                     f"valid: {', '.join(SEL_FACTS)}")
            compiled.append((check, c.reason))
        return tuple(compiled)

    # ------------------------------------------------------------ backends

    @property
    def backend_names(self) -> list[str]:
        return list(self.backends)

    @property
    def registered_names(self) -> list[str]:
        """Every name vLLM's parser accepts: the DSA-relevant backends, then the other registered ones."""
        return [*self.backends, *self.doc.registered, *self.doc.automatic_aliases]

    def is_registered(self, name: str) -> bool:
        return name.upper() in self.backends or name.upper() in self.doc.registered \
            or name.upper() in self.doc.automatic_aliases

    def check_backend(self, name: str, field: str = "attention_backend") -> str:
        """vLLM parses the enum name case-insensitively (auto = None is handled by the caller)."""
        up = name.upper()
        if not self.is_registered(up):
            raise InputError(field, name, self.backend_names, hint="not a vLLM attention backend")
        return up

    def available(self, backend: str, release: str) -> bool:
        spec = self.backends.get(backend)
        return spec is not None and parse_version(spec.since) <= parse_version(release)

    def reasons(self, backend: str, sel: Mapping[str, Any]) -> tuple[str, ...]:
        """Why vLLM's validate_configuration rejects `backend` for these selector facts; () = valid."""
        spec = self.backends[backend]
        out = []
        if spec.head_sizes and sel["sel.head_size"] not in spec.head_sizes:
            out.append("head_size not supported")
        if spec.dtypes and self.doc.model_dtype not in spec.dtypes:
            out.append("dtype not supported")
        if spec.kv_cache_dtypes and sel["sel.kv_cache_dtype"] not in spec.kv_cache_dtypes:
            out.append("kv_cache_dtype not supported")
        block = sel["sel.block_size"]
        if block is not None and spec.block_sizes and not any(block % b == 0 for b in spec.block_sizes):
            out.append("block_size not supported")
        if not spec.sparse:
            out.append("sparse not supported")
            return tuple(out)  # dense backends: their other checks are not transcribed
        if spec.capability_majors is not None and sel["sel.major"] not in spec.capability_majors:
            out.append("compute capability not supported")
        if sel["sel.use_dcp"] and not spec.dcp:
            out.append("DCP not supported")
        for check, reason in self._checks[backend]:
            if check(sel):
                out.append(_PLACEHOLDER.sub(lambda m: str(sel[m.group(1)]), reason))
                break
        return tuple(out)

    def fails_after_selection(self, backend: str, sel: Mapping[str, Any]) -> Optional[str]:
        """vLLM's message when `backend`, accepted at selection, raises while the attention layers are built
        here (FlashMLA sparse under DCP); None when it starts."""
        for check, reason in self._later.get(backend, ()):
            if check(sel):
                return _PLACEHOLDER.sub(lambda m: str(sel[m.group(1)]), reason)
        return None

    def fails_here(self, backend: str, vendor: str, sel: Mapping[str, Any]) -> Optional[str]:
        """Why `backend` fails after vLLM accepts it, on this vendor or in this configuration; None: it runs."""
        spec = self.backends[backend]
        if spec.crashes is not None and spec.crashes.vendor == vendor:
            return spec.crashes.reason
        return self.fails_after_selection(backend, sel)

    def stored_kv(self, backend: str, kv: str) -> str:
        """The KV dtype vLLM stores after selecting `backend` (its post-selection rewrite)."""
        spec = self.backends.get(backend)
        for rw in spec.kv_rewrite if spec else ():
            if rw.applies(kv):
                return rw.to
        return kv

    def block_size(self, backend: str, vendor: str) -> int:
        """vLLM's choice without --block-size: the smallest size the backend and the indexer both accept,
        searched from the default (platforms/interface.py _preferred_block_size_for_backends)."""
        import itertools
        import math

        sets = [self.backends[backend].block_sizes or (1,), self.doc.indexer.block_sizes[vendor]]
        default = self.doc.indexer.default_block_size
        if all(any(default % b == 0 for b in s) for s in sets):
            return default
        for cand in sorted({math.lcm(*combo) for combo in itertools.product(*sets)}):
            if all(any(cand % b == 0 for b in s) for s in sets):
                return cand
        raise ValueError(f"no common block size for {backend} and the indexer")

    # ------------------------------------------------------------ arguments

    def argument(self, name: str) -> VllmArgument:
        return self.arguments[name]

    def field_aliases(self) -> dict[str, str]:
        """vLLM's attribute names → ServingConfig fields (tensor_parallel_size → tp_size, …)."""
        out = {}
        for arg in self.args_doc.arguments:
            for attr in arg.attributes:
                if attr != arg.field:
                    out[attr] = arg.field
        return out

    def flag_for(self, name: str, release: str) -> Optional[str]:
        """The long flag of argument `name` that vLLM `release` accepts (None: none does)."""
        v = parse_version(release, field="vllm release")
        for s in self.argument(name).spellings:
            if s.flag.startswith("--") and parse_version(s.first) <= v and (s.last is None or v <= parse_version(s.last)):
                return s.flag
        return None

    def flag_table(self) -> dict[str, str]:
        """Every spelling (long and short) → argument name."""
        return {s.flag: a.name for a in self.args_doc.arguments for s in a.spellings}

    def env_var(self, name: str) -> Optional[VllmEnvVar]:
        return next((e for e in self.args_doc.env if e.name == name), None)

    def env_read(self, name: str, release: str) -> bool:
        e = self.env_var(name)
        if e is None:
            return False
        v = parse_version(release, field="vllm release")
        return parse_version(e.first) <= v and (e.last is None or v <= parse_version(e.last))

    @property
    def newest_release(self) -> str:
        return self.args_doc.releases[-1]


@lru_cache(maxsize=1)
def load_vllm() -> VllmCatalog:
    return VllmCatalog()


# The rule facts selector_facts reads are declared in catalog/vllm_reads.py (SELECTOR_READS), which imports
# nothing heavy, so that the rule compiler can name them without loading this module.


def selector_facts(ns: Mapping[str, Any], catalog: Any) -> dict[str, Any]:
    """The sel.* facts vLLM's selector sees, from a rule namespace (after the model hook)."""
    mla = family_mla(catalog, ns["model.family"])
    # the model's own RoPE dim (config.json) wins over its family's
    rope = ns["model.qk_rope_head_dim"] if ns["model.qk_rope_head_dim"] is not None else mla.get("qk_rope_head_dim")
    heads = ns["derived.heads_per_rank"] or 0
    dcp = ns["config.dcp_size"] or 1
    topk = ns["model.index_topk"]
    return {
        "sel.major": ns["device.major"], "sel.kv_cache_dtype": ns["out.requested_kv_cache_dtype"],
        "sel.block_size": ns["config.page_size"], "sel.use_dcp": dcp > 1, "sel.dcp_size": dcp,
        "sel.use_pcp": (ns["config.prefill_context_parallel_size"] or 1) > 1,
        "sel.num_heads": heads, "sel.gathered_heads": heads * dcp, "sel.index_topk": topk,
        "sel.index_topk_mult_128": topk is not None and topk % 128 == 0,
        "sel.kv_lora_rank": mla.get("kv_lora_rank"), "sel.qk_rope_head_dim": rope,
        "sel.qk_nope_head_dim": mla.get("qk_nope_head_dim"),
        # unknown MLA dims give no head size, never 0
        "sel.head_size": mla["kv_lora_rank"] + (rope or 0) if mla.get("kv_lora_rank") is not None else None,
    }


def family_mla(catalog: Any, family: Optional[str]) -> dict[str, int]:
    spec = catalog.model_doc.families.get(family) if family else None
    return dict(spec.mla) if spec is not None and spec.mla else {}
