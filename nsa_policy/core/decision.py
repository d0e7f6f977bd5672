"""The decision: outputs, where each came from, findings, and the trace of the rules.

The tags on the fields (`Annotated[..., Tags(...)]`) are the one registry of what each field is for:
an output the rules set, a value every rank must agree on, a value `check`/`diff` record per input,
a row of `resolve`'s table. Every list of such fields (OUTPUT_FIELDS, the agreement view, the
records of a space run, the table) is read from the tags with `tagged()`.
"""

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, Field

from nsa_policy.core.facts import Facts, Frozen
from nsa_policy.engines import DEFAULT as DEFAULT_ENGINE

Level = Literal["error", "warning", "info"]
Tag = Literal["output", "agreed", "recorded", "shown"]
TAGS: tuple[Tag, ...] = ("output", "agreed", "recorded", "shown")


@dataclass(frozen=True)
class Tags:
    """What a Decision (or RuntimeThresholds) field is for. Pydantic keeps it as field metadata only:
    it changes neither validation nor the JSON Schema.

    output:   the rules set it (`set: {name: …}`; `out.<name>` and `prov.<name>` in conditions)
    agreed:   every rank of one deployment must share it (`nsa_policy.fleet`, `ensure_agreement`)
    recorded: `nsa-policy check` and `diff` record it for every input of the space
    shown:    a row of `nsa-policy resolve`'s table and of `--explain`'s why
    """

    tags: frozenset[str]
    title: Optional[str] = None  # how reports name it ("KV cache dtype"); default: the field name
    agreed_as: Optional[str] = None  # its name in the agreement view when that holds a projection of it

    def __init__(self, *tags: Tag, title: Optional[str] = None, agreed_as: Optional[str] = None):
        unknown = set(tags) - set(TAGS)
        if unknown:
            raise ValueError(f"unknown field tag(s) {sorted(unknown)}; valid: {', '.join(TAGS)}")
        object.__setattr__(self, "tags", frozenset(tags))
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "agreed_as", agreed_as)


class Finding(Frozen):
    """One error, warning or note, with a stable code (documented in rules/codes.yaml)."""

    code: str
    level: Level
    message: str
    rule: str = Field(description="the rule id that produced it")
    fields: tuple[str, ...] = Field(default=(), description="the input fields at fault (for lint locations)")
    alternatives: tuple[str, ...] = Field(default=(), description="valid values on this device and dtype")
    evidence: tuple[str, ...] = ()


# The one vocabulary of provenance labels: what a value is to the engine, beyond where it came from.
#   release default       the engine runs its own default here (a value nobody declared, e.g. an env default)
#   ignored by the engine the engine runs this value whatever the user gave (`overwrote` holds the user's)
ProvenanceLabel = Literal["release default", "ignored by the engine"]
PROVENANCE_LABELS: tuple[ProvenanceLabel, ...] = ("release default", "ignored by the engine")


class Provenance(Frozen):
    """Where an output's value came from."""

    source: Literal["user", "env", "rule", "model", "none"]
    detail: str = Field(description="the flag, the environment variable, or the rule id")
    overwrote: Optional[str] = Field(default=None, description="compat bundles only: the value a rule replaced")
    # left out of the output when unset, so that a provenance without one reads as it always has
    label: Optional[ProvenanceLabel] = Field(default=None, exclude_if=lambda v: v is None,
                                             description="what the value is to the engine (PROVENANCE_LABELS)")

    @property
    def rule(self) -> Optional[str]:
        """The id of the rule that set the output (None when the user, the environment or no rule did)."""
        if self.source == "rule":
            return self.detail or None
        if self.source == "model":
            m = _MODEL_DETAIL.fullmatch(self.detail)
            return m.group(2) if m else None
        return None

    @property
    def fact(self) -> Optional[str]:
        """The model fact an output was taken from (source "model"), e.g. "model.index_topk"."""
        if self.source != "model":
            return None
        m = _MODEL_DETAIL.fullmatch(self.detail)
        return m.group(1) if m else self.detail or None


# A value the model decides, taken by a rule: "model.index_topk (rule threshold.index-topk)".
_MODEL_DETAIL = re.compile(r"(.*) \(rule (.*)\)")


def model_detail(fact: str, rule_id: str) -> str:
    """Provenance detail of an output a rule took from a model fact (Provenance.rule reads it back)."""
    return f"{fact} (rule {rule_id})"


class TraceEntry(Frozen):
    rule: str
    stage: str
    outcome: Literal["fired", "not_matched", "already_set", "no_valid_candidate", "emitted"]
    why: str


_OUT = Tags("output")


class RuntimeThresholds(Frozen):
    """Per-batch planner inputs (sglang's NSA backend constants)."""

    mha_chunk_capacity: Annotated[int, _OUT] = 131072
    flashmla_auto_ratio: Annotated[int, _OUT] = 512
    mha_one_shot: Annotated[bool, _OUT] = Field(description="whether dense MHA one-shot prefill exists on this device")


def _out(title: str, *more: Tag) -> Tags:
    """An output every rank shares and the table shows; `more` adds `recorded`."""
    return Tags("output", "agreed", "shown", *more, title=title)


_AGREED = Tags("agreed")


class Decision(Frozen):
    applies: Annotated[bool, _AGREED]
    # full: the engine runs its DSA start-up code; family_only: only the model-family overrides (attention
    # backend, page size), the KV dtype, backends and threshold stay as given; none: not DSA there.
    dsa_scope: Annotated[Literal["full", "family_only", "none"], _AGREED] = "full"
    engine: Annotated[str, _AGREED] = Field(default=DEFAULT_ENGINE,
                                            description="the engine the decision is for: a registered engine")
    policy: str
    policy_digest: str = Field(description="sha256 of the bundle's rule files, first 16 hex digits")
    answers_for: Optional[str] = Field(
        default=None, description="the release asked for when an older bundle answers for it: `sglang-0.5.23` "
                                  "(a release whose start-up policy did not change ships no bundle of its own)")
    device: str
    device_class: str
    model: Annotated[Optional[str], _AGREED] = None
    model_family: Annotated[Optional[str], _AGREED] = None
    architecture: Optional[str] = None
    kv_cache_dtype: Annotated[Optional[str], _out("KV cache dtype", "recorded")] = None
    prefill_backend: Annotated[Optional[str], _out("prefill backend", "recorded")] = None
    decode_backend: Annotated[Optional[str], _out("decode backend", "recorded")] = None
    page_size: Annotated[Optional[int], _out("page size", "recorded")] = None
    attention_backend: Annotated[Optional[str], _out("attention backend", "recorded")] = None  # nsa → dsa in 0.5.13
    dense_attn_kv_len_threshold: Annotated[Optional[int], _out("dense-attention threshold", "recorded")] = None
    index_topk: Annotated[Optional[int], _out("index top-k")] = None
    kv_cache_layout: Annotated[Optional[str], _out("KV cache layout", "recorded")] = None
    # vLLM: the KV dtype its backend selector sees (the flag after the model hook), before the
    # post-selection rewrite that gives kv_cache_dtype (fp8 -> fp8_ds_mla on FLASHMLA_SPARSE).
    requested_kv_cache_dtype: Annotated[Optional[str], _out("KV dtype at selection")] = None
    indexer_cache_dtype: Annotated[Optional[str], _out("indexer cache dtype")] = None
    heads_per_rank: Annotated[Optional[int], _AGREED] = None
    padded_heads: Annotated[dict[str, int], _AGREED] = Field(
        default_factory=dict, description="phase → q heads after kernel padding")
    runtime: Annotated[Optional[RuntimeThresholds], _AGREED] = None
    warnings: tuple[Finding, ...] = ()
    # Ranks agree on the error codes, not the messages: a message may name the device.
    errors: Annotated[tuple[Finding, ...], Tags("agreed", agreed_as="error_codes")] = ()
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


def _tags_of(model: type[BaseModel]) -> dict[str, Tags]:
    found = {}
    for name, info in model.model_fields.items():
        marks = [m for m in info.metadata if isinstance(m, Tags)]
        if marks:
            found[name] = marks[0]
    return found


FIELD_TAGS: dict[str, Tags] = {**_tags_of(Decision), **_tags_of(RuntimeThresholds)}


def tagged(tag: Tag, model: type[BaseModel] = Decision) -> tuple[str, ...]:
    """The fields of `model` carrying `tag`, in declaration order."""
    if tag not in TAGS:
        raise ValueError(f"unknown field tag {tag!r}; valid: {', '.join(TAGS)}")
    return tuple(name for name, t in _tags_of(model).items() if tag in t.tags)


def field_title(name: str) -> str:
    """How reports name a tagged field ("KV cache dtype"); the field name when it has no title."""
    t = FIELD_TAGS.get(name)
    return t.title if t is not None and t.title else name


# Outputs the rules set: the Decision's own, then the planner constants it carries in `runtime`.
DECISION_OUTPUTS = tagged("output")
OUTPUT_FIELDS = DECISION_OUTPUTS + tagged("output", RuntimeThresholds)


# What an engine leaves as given when it applies only the model-family overrides.
LEFT_AS_GIVEN = ("kv_cache_dtype", "prefill_backend", "decode_backend", "dense_attn_kv_len_threshold", "kv_cache_layout")


def outputs_for(engine: str, dsa_scope: str = "full") -> tuple[str, ...]:
    """The Decision outputs an engine's decisions set (vLLM-only fields are not sglang's; a family-only
    scope leaves the KV dtype, backends, threshold and layout as given)."""
    return tuple(f for f in of_engine(DECISION_OUTPUTS, engine)
                 if not (dsa_scope == "family_only" and f in LEFT_AS_GIVEN))


def of_engine(fields: tuple[str, ...], engine: str) -> tuple[str, ...]:
    """Those of `fields` an `engine` decision has: an output only another engine's decisions hold (vLLM's
    KV dtype at selection on an sglang decision; Engine.own_outputs) is left out of its table, agreement
    view and digest."""
    others = _others_outputs(engine)
    return tuple(f for f in fields if f not in others)


@lru_cache(maxsize=16)
def _others_outputs(engine: str) -> frozenset[str]:
    from nsa_policy import engines

    return frozenset(f for e in engines.every() if e.name != engine for f in e.own_outputs)


# What ranks compare, under the agreement view's names (errors → error_codes).
AGREED_FIELDS = tuple(FIELD_TAGS[f].agreed_as or f for f in tagged("agreed"))
RECORDED_FIELDS = tagged("recorded")
SHOWN_FIELDS = tagged("shown")
