"""The facts a decision is made from: device, model, serving configuration, and what follows from them."""

from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nsa_policy import engines  # the registry (engine packages load on first use)
from nsa_policy.engines import DEFAULT as DEFAULT_ENGINE

Vendor = Literal["nvidia", "amd", "intel", "cpu"]


# what → the names it may hold, registered by the catalog when it loads (the catalog sits above the
# facts: it builds them), so a JSON schema made after loading lists the loaded catalog's names.
SCHEMA_NAMES: dict[str, Callable[[], list[str]]] = {}


def _catalog_enum(what: str) -> Callable[[dict[str, Any]], None]:
    """JSON-schema hook: list the loaded catalog's device classes or model families.

    The catalog (rules/catalog/) is the one owner of these names, so the types here are plain
    strings; inputs are checked against the loaded catalog (Catalog.check_device/check_model)."""
    def extra(schema: dict[str, Any]) -> None:
        names = SCHEMA_NAMES.get(what)
        if names is None:
            return  # no catalog loaded: the schema says "string"
        target = next((b for b in schema.get("anyOf", ()) if b.get("type") == "string"), schema)
        target["enum"] = names()
    return extra


class Frozen(BaseModel):
    # schemas build on first use: a cold `resolve` validates few of these models, and a class's
    # eager build was most of this module's import time
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


class FrozenDict(dict[Any, Any]):
    """A dict no caller can change. Decisions are memoised and shared between callers, so the mappings
    inside them (provenance, padded heads, packages) must be as immutable as the frozen models around them."""

    def _readonly(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("this mapping is part of a shared, immutable decision; copy it with dict(...) to change it")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly

    def __reduce__(self) -> tuple[Any, ...]:  # pickle/deepcopy rebuild from a plain dict, never by item writes
        return (FrozenDict, (dict(self),))


class DeviceFacts(Frozen):
    """One accelerator class, as the catalog or NVML describes it."""

    name: str = Field(description="catalog name (h200) or capability spec (sm90) or discovered product name")
    device_class: str = Field(description="a device class of the catalog (rules/catalog/devices.yaml)",
                              json_schema_extra=_catalog_enum("device_class"))
    vendor: Vendor
    compute_capability: Optional[tuple[int, int]] = Field(
        default=None, description="(major, minor); ROCm reports major 9: gfx942 → (9, 4), gfx950 → (9, 5)")
    product_name: Optional[str] = Field(default=None, description="the name NVML/torch reports, e.g. 'NVIDIA H200'")
    memory_gb: Optional[float] = None
    sm_count: Optional[int] = Field(default=None, description="streaming multiprocessors (NVIDIA) or compute units (AMD)")
    source: Literal["catalog", "capability", "nvml", "torch"] = "catalog"


class ModelFacts(Frozen):
    """What the policy needs to know about a model: is it DSA, which family, top-k and heads."""

    model_id: Optional[str] = None
    architecture: str
    family: Optional[str] = Field(default=None, description="a catalog family; None when the model is not a DSA model",
                                  json_schema_extra=_catalog_enum("family"))
    index_topk: Optional[int] = None
    num_attention_heads: Optional[int] = None
    # DSA variants later sglang releases branch on (config.json keys of the same names)
    learnable_sink: bool = Field(default=False, description="attention sinks (HYV4): sglang 0.5.20+ forces bf16 KV")
    index_kpool: int = Field(default=1, ge=1, description="KV pages per index page: sglang 0.5.22+ pages 64 x index_kpool")
    index_topk_freq: int = Field(default=1, ge=1, description="the indexer runs every index_topk_freq layers")
    index_topk_pattern: Optional[str] = Field(default=None, description="per-layer indexer pattern ('S': shared index)")
    qk_rope_head_dim: Optional[int] = Field(default=None, ge=0, description="RoPE part of the MLA head; 0: a NoPE model "
                                            "(sglang 0.5.22+ refuses flashmla_sparse_q8 with fp8 KV for it)")
    # config.json as given (None: the key is absent, or a catalog id): sglang reads index_head_dim for every
    # DSA architecture, and transformers fills it in only for the model types whose config class defaults it
    model_type: Optional[str] = Field(default=None, description="config.json model_type")
    index_head_dim: Optional[int] = Field(default=None, ge=1, description="config.json index_head_dim (the indexer's head size)")
    source: str = Field(default="catalog", description="catalog, a config.json path, 'mapping' or 'cli'")

    @property
    def is_dsa(self) -> bool:
        return self.family is not None


def _registered_engine(value: str) -> str:
    if value not in engines.names():
        raise ValueError(f"not a registered engine; valid: {', '.join(engines.names())}")
    return value


class ServingConfig(Frozen):
    """The serving arguments that bear on DSA, spelt as sglang spells them. None = unset.

    `engine` says which serving engine the arguments are for; vLLM's names map onto these fields
    through rules/catalog/vllm/args.yaml (block_size → page_size, tensor_parallel_size → tp_size,
    decode_context_parallel_size → dcp_size)."""

    engine: str = Field(default=DEFAULT_ENGINE, description="the serving engine: a registered engine's name")

    @field_validator("engine", mode="after")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        return _registered_engine(value)

    model_path: Optional[str] = None
    kv_cache_dtype: Optional[str] = Field(default=None, description="auto, bfloat16, bf16 (alias), fp8_e4m3")
    # the engine-neutral names; each engine's spellings (sglang's nsa_*/dsa_* attributes and flags,
    # its releases judging them) are aliases in the engine's argument registry
    prefill_backend: Optional[str] = Field(default=None, description="the prefill kernel backend")
    decode_backend: Optional[str] = Field(default=None, description="the decode kernel backend")
    tp_size: Optional[int] = Field(default=None, ge=1, description="unset: 1, the engines' default (DP attention too)")
    dp_size: int = Field(default=1, ge=1)
    enable_dp_attention: bool = False
    quantization: Optional[str] = None
    enable_hisparse: bool = False
    disable_radix_cache: bool = False
    page_size: Optional[int] = Field(default=None, ge=1)
    dense_attn_kv_len_threshold: Optional[int] = Field(default=None, ge=0)
    speculative_algorithm: Optional[str] = None
    speculative_eagle_topk: Optional[int] = Field(default=None, ge=1)
    speculative_num_steps: Optional[int] = Field(default=None, ge=0)
    speculative_num_draft_tokens: Optional[int] = Field(default=None, ge=1)
    # Read by the sglang compatibility bundles of later releases (their arg_groups/model_hook.py).
    dcp_size: int = Field(default=1, ge=1, description="decode context parallel size (sglang 0.5.15+); 0.5.22: > 1 -> trtllm")
    attn_cp_size: int = Field(default=1, ge=1, description="attention context-parallel size (--attn-cp-size); sglang "
                                                     "asserts tp_size % attn_cp_size == 0 when it is > 1")
    chunked_prefill_size: Optional[int] = Field(
        default=None, ge=-1, description="--chunked-prefill-size (-1: off); unset: sglang's GPU-memory default. sglang "
                                         "0.5.22+ asserts the per-rank size is a multiple of the page size")
    enable_prefill_cp: bool = Field(default=False, description="DSA prefill context parallel (--enable-prefill-cp)")
    cp_strategy: Optional[Literal["zigzag", "interleave"]] = Field(
        default=None, description="prefill CP layout; the pre-0.5.14 mode names in-seq-split/round-robin-split "
                                  "are the same layouts")
    enable_prefill_context_parallel: bool = Field(
        default=False, description="the generic prefill CP switch: no DSA effect up to 0.5.13, "
                                   "--enable-prefill-cp in 0.5.14-0.5.19")
    enable_dsa_cache_layer_split: bool = Field(
        default=False, description="split the DSA cache by layer over the prefill-CP ranks (sglang 0.5.16+)")
    enable_two_batch_overlap: bool = Field(default=False, description="TBO; refused with index-topk sharing (0.5.13+)")
    disaggregation_mode: str = Field(default="null", description="PD disaggregation: null, prefill or decode")
    enable_hierarchical_cache: bool = Field(default=False, description="HiCache; refused with dcp_size > 1 (0.5.22+)")
    # vLLM only (rules/catalog/vllm/args.yaml)
    attention_backend: Optional[str] = Field(default=None, description="--attention-backend as forced, in the engine's "
                                                               "names (sglang: dsa, flashinfer, …; vLLM: the enum "
                                                               "name); None = the engine decides")
    prefill_context_parallel_size: int = Field(default=1, ge=1, description="vLLM --prefill-context-parallel-size")
    sparse_mla_force_mqa: bool = Field(default=False, description="vLLM -ac.sparse_mla_force_mqa: no dense short prefill")
    indexer_kv_dtype: Optional[str] = Field(default=None, description="vLLM -ac.indexer_kv_dtype: auto, fp8 or mxfp4")
    # Read by sglang when it builds the DSA backend and indexer, after the weights load (late checks:
    # layers/attention/dsa_backend.py, dsa/paged_mqa_logits_backend.py).
    dsa_triton_union: Literal[0, 2, 4] = Field(default=0, description="--dsa-triton-union (0.5.22+): triton_sparse_mla "
                                                                     "union group size; 0 disables")
    dsa_paged_mqa_logits_backend: Optional[Literal["auto", "deepgemm", "cutedsl", "aiter"]] = Field(
        default=None, description="--dsa-paged-mqa-logits-backend (0.5.16+): the indexer's paged MQA logits kernel; None = auto")
    enable_mixed_chunk: bool = Field(default=False, description="--enable-mixed-chunk: flashmla_sparse_q8 refuses it (0.5.22+)")
    enable_deterministic_inference: bool = Field(
        default=False, description="--enable-deterministic-inference: turns --dsa-triton-union off (0.5.22+)")
    mamba_track_interval: Optional[int] = Field(
        default=None, ge=1, description="--mamba-track-interval (sglang default 256): a linear-attention hybrid's "
                                        "radix cache snapshots Mamba state every so many tokens; 0.5.20+ asserts "
                                        "the page size divides it")


class Environment(Frozen):
    """What the process environment adds: the threshold variables and installed kernel packages."""

    dense_attn_kv_len_threshold: Optional[int] = Field(default=None, ge=0)
    threshold_env_var: Optional[str] = Field(default=None, description="which variable set the threshold")
    packages: dict[str, str] = Field(default_factory=dict, description="distribution name → version, never imported")
    variables: dict[str, str] = Field(default_factory=dict, description="the variables the engines' DSA start-up reads "
                                                                     "(Engine.env_variables) that are set, as given")

    @field_validator("packages", "variables", mode="after")
    @classmethod
    def _immutable(cls, value: dict[str, str]) -> dict[str, str]:
        return FrozenDict(value)


class DerivedFacts(Frozen):
    attn_tp_size: int = Field(description="tp_size / dp_size with DP attention, else tp_size")
    heads_per_rank: Optional[int] = Field(default=None, description="num_attention_heads / attn_tp_size")


class Facts(Frozen):
    """Everything the evaluator sees."""

    device: DeviceFacts
    model: ModelFacts
    config: ServingConfig
    env: Environment = Environment()
    derived: DerivedFacts
    # How the caller spelt the serving arguments, where it said so in sglang's own spelling (resolve's
    # flags, flag-form keys of a mapping such as a --config file's): each release accepts, deprecates
    # or refuses spellings (rules/catalog/sglang/args.yaml), and its compatibility bundle says which.
    spellings: tuple[str, ...] = Field(default=(), description="the engine's flags as given (--nsa-prefill-backend); "
                                                               "empty when given by policy field name")
    # The engine release the caller targets (lint's image tag, pin or hint; a release-named --policy):
    # what a finding offers instead is limited to what that release accepts.
    release: Optional[str] = Field(default=None, description="the engine release targeted (0.5.15); unset: any")


def derive(model: ModelFacts, config: ServingConfig) -> DerivedFacts:
    tp = effective_tp_size(config)
    attn_tp = tp // config.dp_size if config.enable_dp_attention else tp
    attn_tp = max(attn_tp, 1)
    heads = model.num_attention_heads // attn_tp if model.num_attention_heads else None
    return DerivedFacts(attn_tp_size=attn_tp, heads_per_rank=heads)


def effective_tp_size(config: ServingConfig) -> int:
    """The tensor-parallel size the engine runs: unset is 1, with DP attention too (sglang's ServerArgs
    default; it then asserts tp_size % dp_size == 0, so --dp-size 8 alone is refused, not tp 8)."""
    return config.tp_size if config.tp_size is not None else 1
