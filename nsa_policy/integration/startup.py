"""The start-up hook: resolve from a server's parsed arguments and fill in what the user left unset.

    args = parser.parse_args()                      # sglang's argparse Namespace (or a ServerArgs-like object)
    nsa_policy.startup.apply(args)                  # before ServerArgs.from_cli_args / __post_init__

What it does, in order:
1. reads the serving arguments by sglang's attribute names (nsa_* and the later dsa_* spellings);
2. resolves with the policy on the local GPU (or `device=`);
3. when rejected: logs the decision at ERROR and raises `StartupRejected` (a PolicyError) with the
   explanation — nothing is written;
4. writes each decided output into its attribute only where that attribute is unset (None; for
   kv_cache_dtype also "auto", sglang's default, which means "engine decides") — an explicit value
   is never replaced, a compat bundle's different opinion of it is only logged;
5. sets the dense-attention threshold variable where the engine reads it from the environment
   (no threshold attribute on the object) and neither SGLANG_NSA_… nor SGLANG_DSA_… is set;
6. logs exactly one record on `logger` (default "nsa_policy.startup") whose `nsa_policy` attribute
   holds the structured decision and `nsa_decision` the Decision (for DecisionLogHandler).
Applying twice changes nothing: the second call finds every field it would fill already set.

`attention_backend` is never written: sglang sets it itself for DSA models, and its value was
renamed (nsa → dsa) across versions. sglang's ServerArgs fills the same fields in `__post_init__`;
called on an already-initialised ServerArgs, apply sees sglang's own defaults as explicit values
(it then validates them and rejects the bad ones, but fills nothing).
"""
from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any, Mapping, Optional

from pydantic import Field

from nsa_policy.engine.decision import Decision
from nsa_policy.errors import InputError, PolicyError
from nsa_policy.engine.facts import THRESHOLD_ENV_VARS, Frozen
from nsa_policy.inputs import CONFIG_FIELDS, FIELD_ALIASES

LOGGER_NAME = "nsa_policy.startup"

# decision output → the attributes that carry it, as sglang spells them (older spelling first).
TARGETS: dict[str, tuple[str, ...]] = {
    "kv_cache_dtype": ("kv_cache_dtype",),
    "prefill_backend": ("nsa_prefill_backend", "dsa_prefill_backend"),
    "decode_backend": ("nsa_decode_backend", "dsa_decode_backend"),
    "page_size": ("page_size",),
    "dense_attn_kv_len_threshold": ("dense_attn_kv_len_threshold", "nsa_prefill_dense_attn_kv_len_threshold",
                                    "dsa_prefill_dense_attn_kv_len_threshold"),
}
# "auto" is sglang's default kv_cache_dtype: the user left the choice to the engine.
UNSET_VALUES: dict[str, tuple[Any, ...]] = {"kv_cache_dtype": (None, "auto")}
SAME_VALUE = {"bf16": "bfloat16"}  # sglang's alias: an explicit bf16 agrees with a decided bfloat16
DSA_SPELLING_MARKERS = ("dsa_prefill_backend", "dsa_decode_backend", "dsa_prefill_dense_attn_kv_len_threshold")
NSA_ENV, DSA_ENV = THRESHOLD_ENV_VARS
# sglang's parser stores --tp-size/--dp-size as these; ServerArgs.from_cli_args copies them over later.
PARSER_DESTS = {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size"}


class StartupRejected(PolicyError):
    """The policy rejected the server's arguments; the message explains why and what would be valid."""

    def __init__(self, decision: Decision):
        super().__init__(decision)
        self.args = (explain_rejection(decision),)


class Applied(Frozen):
    """What apply() did."""

    decision: Decision
    written: dict[str, Any] = Field(default_factory=dict, description="attribute → value written (was unset)")
    previous: dict[str, Any] = Field(default_factory=dict, description="attribute → its unset value before (None or 'auto')")
    env_set: dict[str, str] = Field(default_factory=dict, description="environment variable → value set")
    kept: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="attribute → {explicit, decided}: an explicit value the decision differs from, left as is")

    @property
    def changed(self) -> bool:
        return bool(self.written or self.env_set)


class _Args:
    """Attribute objects (Namespace, dataclass, ServerArgs) and mutable mappings behind one interface."""

    def __init__(self, target: Any):
        self.target = target
        self.is_mapping = isinstance(target, Mapping)
        if self.is_mapping and not isinstance(target, MutableMapping):
            raise InputError("server_args", type(target).__name__, hint="a read-only mapping cannot take the decided values")

    def has(self, name: str) -> bool:
        return name in self.target if self.is_mapping else hasattr(self.target, name)

    def get(self, name: str) -> Any:
        return self.target.get(name) if self.is_mapping else getattr(self.target, name, None)

    def set(self, name: str, value: Any) -> None:
        if self.is_mapping:
            self.target[name] = value
            return
        try:
            setattr(self.target, name, value)
        except (AttributeError, TypeError) as exc:  # frozen dataclass, slots, read-only property
            raise InputError(f"server_args.{name}", value, hint=f"cannot be written on {type(self.target).__name__}: {exc}") from None

    def serving_config(self) -> dict[str, Any]:
        names = list(CONFIG_FIELDS) + [a for a in FIELD_ALIASES if len(a) > 2]  # 'tp'/'dp' may mean other things
        values = {n: self.get(n) for n in names if self.has(n) and self.get(n) is not None}
        for dest, field in PARSER_DESTS.items():
            if field not in values and self.get(dest) is not None:
                values[field] = self.get(dest)
        return values

    def uses_dsa_spelling(self) -> bool:
        return any(self.has(n) for n in DSA_SPELLING_MARKERS)


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def explain_rejection(decision: Decision) -> str:
    """Why the policy rejected the arguments, which flags are at fault and what would be valid."""
    from nsa_policy.catalog.codes import load_codes

    codes = load_codes().codes
    model = decision.model or decision.architecture or "the model"
    lines = [f"nsa-policy rejected the serving arguments for {model} on {decision.device} ({decision.device_class}) "
             f"under policy {decision.policy} ({decision.policy_digest}):"]
    for err in decision.errors:
        lines.append(f"  {err.code}: {err.message}")
        if err.fields:
            lines.append(f"    at fault: {', '.join(_flag(f) for f in err.fields)}")
        if err.alternatives:
            lines.append(f"    valid here: {', '.join(err.alternatives)}")
        doc = codes.get(err.code)
        if doc is not None and getattr(doc, "fix", None):
            lines.append(f"    fix: {doc.fix}")
    return "\n".join(lines)


def plan(args: _Args, decision: Decision, env: Mapping[str, str]) -> Applied:
    """What apply would write, without writing it."""
    written: dict[str, Any] = {}
    previous: dict[str, Any] = {}
    env_set: dict[str, str] = {}
    kept: dict[str, dict[str, Any]] = {}
    if not decision.applies or decision.errors:
        return Applied(decision=decision)
    for output, attrs in TARGETS.items():
        decided = getattr(decision, output)
        if decided is None:
            continue
        present = [a for a in attrs if args.has(a)]
        unset = UNSET_VALUES.get(output, (None,))
        explicit = [a for a in present if args.get(a) not in unset]
        for attr in explicit:
            value = args.get(attr)
            if SAME_VALUE.get(value, value) != decided:
                kept[attr] = {"explicit": value, "decided": decided}
        if explicit:
            continue  # one explicit spelling decides; an alias left unset is the engine's to merge
        prov = decision.provenance.get(output)
        if prov is not None and prov.source == "env":
            continue  # the engine reads that variable itself
        for attr in present:
            written[attr] = decided
            previous[attr] = args.get(attr)
        if output == "dense_attn_kv_len_threshold" and not present:
            if not any(str(env.get(v, "")).strip() for v in THRESHOLD_ENV_VARS):
                env_set[DSA_ENV if args.uses_dsa_spelling() else NSA_ENV] = str(decided)
            else:
                var = next(v for v in THRESHOLD_ENV_VARS if str(env.get(v, "")).strip())
                if str(env[var]).strip() != str(decided):
                    kept[var] = {"explicit": env[var], "decided": decided}
    return Applied(decision=decision, written=written, previous=previous, env_set=env_set, kept=kept)


def _record(applied: Applied, status: str) -> dict[str, Any]:
    d = applied.decision
    outputs = {f: getattr(d, f) for f in TARGETS}
    outputs.update(attention_backend=d.attention_backend, kv_cache_layout=d.kv_cache_layout,
                   index_topk=d.index_topk, heads_per_rank=d.heads_per_rank)
    return {
        "status": status, "policy": d.policy, "policy_digest": d.policy_digest, "device": d.device,
        "device_class": d.device_class, "model": d.model or d.architecture, "decision": outputs,
        "provenance": {k: (p.source + (f" {p.detail}" if p.detail else "")) for k, p in d.provenance.items()},
        "written": dict(applied.written), "previous": dict(applied.previous), "env_set": dict(applied.env_set),
        "kept": dict(applied.kept),
        "warnings": [{"code": f.code, "message": f.message} for f in d.warnings],
        "notes": [{"code": f.code, "message": f.message} for f in d.notes],
        "errors": [{"code": f.code, "message": f.message, "fields": list(f.fields), "alternatives": list(f.alternatives)}
                   for f in d.errors],
    }


def _message(applied: Applied, status: str) -> str:
    d = applied.decision
    head = f"nsa-policy {d.policy} ({d.policy_digest}) on {d.device} ({d.device_class}), model {d.model or d.architecture}"
    if status == "rejected":
        return explain_rejection(d)
    if status == "not_applicable":
        return head + ": not a DSA model, nothing to set"
    parts = []
    for output in TARGETS:
        value = getattr(d, output)
        p = d.provenance.get(output)
        src = f"{p.source} {p.detail}".strip() if p else "-"
        parts.append(f"{output}={value} [{src}]")
    text = head + ": " + ", ".join(parts)
    if applied.written:
        text += "; wrote " + ", ".join(f"{k}={v}" + (f" (was {applied.previous[k]!r}, sglang's 'engine decides')"
                                                       if applied.previous.get(k) == "auto" else "")
                                       for k, v in applied.written.items())
    if applied.env_set:
        text += "; set " + ", ".join(f"{k}={v}" for k, v in applied.env_set.items())
    if applied.kept:
        text += "; kept explicit " + ", ".join(f"{k}={v['explicit']} (policy decided {v['decided']})"
                                               for k, v in applied.kept.items())
    for f in d.warnings:
        text += f"\n  warning {f.code}: {f.message}"
    return text


def apply(server_args: Any, *, policy: str = "default", device: Any = "auto", model: Any = None,
          env: Optional[MutableMapping[str, str]] = None, logger: Optional[logging.Logger] = None) -> Applied:
    """Resolve from `server_args` and write the decision into its unset fields (see the module doc).

    server_args: argparse.Namespace, a dataclass / ServerArgs, or a mutable mapping, with sglang's names.
    device: "auto" (the local GPU through NVML), a catalog name, a capability spec or DeviceFacts.
    model: None = server_args.model_path; else a catalog id, a path, or a config mapping.
    env: where the threshold variable is read and set (default os.environ).
    Raises InputError for arguments that cannot be read, StartupRejected (a PolicyError) when rejected.
    """
    from nsa_policy.api import resolve

    args = _Args(server_args)
    env = os.environ if env is None else env
    logger = logger or logging.getLogger(LOGGER_NAME)
    decision = resolve(args.serving_config(), device=device, model=model, policy=policy, env=env,
                       raise_on_error=False)
    applied = plan(args, decision, env)
    status = "rejected" if decision.errors else ("applied" if decision.applies else "not_applicable")
    if status == "applied":
        for attr, value in applied.written.items():
            args.set(attr, value)
        for var, value in applied.env_set.items():
            env[var] = value
    level = logging.ERROR if status == "rejected" else (logging.WARNING if decision.warnings or applied.kept else logging.INFO)
    logger.log(level, _message(applied, status), extra={
        "nsa_policy": _record(applied, status), "nsa_decision": decision,
        "nsa_context": {"status": status, "written": dict(applied.written), "previous": dict(applied.previous),
                        "env_set": dict(applied.env_set), "kept": dict(applied.kept)}})
    if status == "rejected":
        raise StartupRejected(decision)
    return applied
