"""The decision: outputs, where each came from, findings, and the trace of the rules."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from nsa_policy.engine.facts import Facts, Frozen

Level = Literal["error", "warning", "info"]


class Finding(Frozen):
    """One error, warning or note, with a stable code (documented in rules/codes.yaml)."""

    code: str
    level: Level
    message: str
    rule: str = Field(description="the rule id that produced it")
    fields: tuple[str, ...] = Field(default=(), description="the input fields at fault (for lint locations)")
    alternatives: tuple[str, ...] = Field(default=(), description="valid values on this device and dtype")
    evidence: tuple[str, ...] = ()


class Provenance(Frozen):
    """Where an output's value came from."""

    source: Literal["user", "env", "rule", "model", "none"]
    detail: str = Field(description="the flag, the environment variable, or the rule id")
    overwrote: Optional[str] = Field(default=None, description="compat bundles only: the value a rule replaced")


class TraceEntry(Frozen):
    rule: str
    stage: str
    outcome: Literal["fired", "not_matched", "already_set", "no_valid_candidate", "emitted"]
    why: str


class RuntimeThresholds(Frozen):
    """Per-batch planner inputs (sglang's NSA backend constants)."""

    mha_chunk_capacity: int = 131072
    flashmla_auto_ratio: int = 512
    mha_one_shot: bool = Field(description="whether dense MHA one-shot prefill exists on this device")


class Decision(Frozen):
    applies: bool
    policy: str
    policy_digest: str = Field(description="sha256 of the bundle's rule files, first 16 hex digits")
    device: str
    device_class: str
    model: Optional[str] = None
    model_family: Optional[str] = None
    architecture: Optional[str] = None
    kv_cache_dtype: Optional[str] = None
    prefill_backend: Optional[str] = None
    decode_backend: Optional[str] = None
    page_size: Optional[int] = None
    attention_backend: Optional[str] = None
    dense_attn_kv_len_threshold: Optional[int] = None
    index_topk: Optional[int] = None
    kv_cache_layout: Optional[str] = None
    heads_per_rank: Optional[int] = None
    padded_heads: dict[str, int] = Field(default_factory=dict, description="phase → q heads after kernel padding")
    runtime: Optional[RuntimeThresholds] = None
    warnings: tuple[Finding, ...] = ()
    errors: tuple[Finding, ...] = ()
    notes: tuple[Finding, ...] = ()
    provenance: dict[str, Provenance] = Field(default_factory=dict)
    trace: tuple[TraceEntry, ...] = ()
    inputs: Optional[Facts] = Field(default=None, description="the facts, as evaluated")

    @property
    def rejected(self) -> bool:
        return bool(self.errors)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.errors + self.warnings + self.notes


OUTPUT_FIELDS = (
    "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "attention_backend",
    "dense_attn_kv_len_threshold", "index_topk", "kv_cache_layout",
    "mha_chunk_capacity", "flashmla_auto_ratio", "mha_one_shot",
)
