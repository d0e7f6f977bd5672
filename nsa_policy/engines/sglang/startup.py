"""The start-up hook: resolve from a server's parsed arguments and fill in what the user left unset.

    args = parser.parse_args()                      # sglang's argparse Namespace (or a ServerArgs-like object)
    nsa_policy.startup.apply(args)                  # before ServerArgs.from_cli_args / __post_init__

What it does, in order:
0. finds the sglang release it serves: `sglang_version=`, else the running process's installed
   sglang (importlib.metadata, sglang is not imported), else what the object's own attribute names
   allow (nsa_* → the last release with those names), else the newest release in the registry;
1. reads the serving arguments by sglang's attribute names (nsa_* and the later dsa_* spellings);
2. resolves with the policy on the local GPU (or `device=`), with only the threshold variable that
   release reads (a variable it ignores is not honoured: it is copied to the variable it reads when
   that one is unset, else left alone, and a note says so);
3. when rejected: logs the decision at ERROR and raises `StartupRejected` (a PolicyError) with the
   explanation — nothing is written;
4. writes each decided output into its attribute only where that attribute is unset (None; for
   kv_cache_dtype also "auto", sglang's default, which means "engine decides") — an explicit value
   is never replaced, a compat bundle's different opinion of it is only logged;
5. sets the dense-attention threshold variable that release reads (SGLANG_NSA_… up to 0.5.12,
   SGLANG_DSA_… from 0.5.13) where the engine reads it from the environment (no threshold attribute
   on the object) and it is unset;
6. logs exactly one record on `logger` (default "nsa_policy.startup") whose `nsa_policy` attribute
   holds the structured decision and `nsa_decision` the Decision (for DecisionLogHandler).
Applying twice changes nothing: the second call finds every field it would fill already set.

`attention_backend` is never written: sglang sets it itself for DSA models, and its value was
renamed (nsa → dsa) across versions. sglang's ServerArgs fills the same fields in `__post_init__`;
called on an already-initialised ServerArgs, apply sees sglang's own defaults as explicit values
(it then validates them and rejects the bad ones, but fills nothing).
"""

import importlib.metadata
import logging
import os
from collections.abc import MutableMapping
from typing import Any, Mapping, Optional

from pydantic import Field

from nsa_policy.base.errors import InputError, PolicyError
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Frozen
from nsa_policy.engines.sglang.args import TargetRelease, load_args
from nsa_policy.engines.sglang.config import ALIAS_SWITCHES, ATTN_DP_NAMES, FIELD_ALIASES, KV_ALIASES
from nsa_policy.engines.sglang.env import threshold_env_vars
from nsa_policy.inputs import CONFIG_FIELDS

LOGGER_NAME = "nsa_policy.startup"

_ARGS = load_args()
# decision output → the attributes that carry it, as sglang spells them (older spelling first), from
# rules/catalog/sglang/args.yaml.
TARGETS: dict[str, tuple[str, ...]] = _ARGS.output_targets()
# "auto" is sglang's default kv_cache_dtype: the user left the choice to the engine.
UNSET_VALUES: dict[str, tuple[Any, ...]] = _ARGS.unset_values()
# sglang's alias: an explicit bf16 agrees with a decided bfloat16
SAME_VALUE = {k: v for k, v in KV_ALIASES.items() if k != v}
DSA_SPELLING_MARKERS = ("dsa_prefill_backend", "dsa_decode_backend", "dsa_prefill_dense_attn_kv_len_threshold")
NSA_ENV, DSA_ENV = threshold_env_vars()
# sglang's parser stores --tp-size/--dp-size as these up to 0.5.13; ServerArgs.from_cli_args copies them over later.
PARSER_DESTS: dict[str, str] = _ARGS.parser_dests()


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
        default_factory=dict,
        description="attribute → {explicit, decided}: an explicit value the decision differs from, left as is")
    release: Optional[TargetRelease] = Field(default=None, description="the sglang release served, and how it was found")
    notes: tuple[str, ...] = Field(
        default=(), description="what apply noticed about the release (an ignored variable, a guessed release)")

    @property
    def changed(self) -> bool:
        return bool(self.written or self.env_set)


class ArgsView:
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
            raise InputError(f"server_args.{name}", value,
                             hint=f"cannot be written on {type(self.target).__name__}: {exc}") from None

    def serving_config(self) -> dict[str, Any]:
        # 'tp'/'dp' may mean other things; attn_dp_size (0.5.22+) is read as the attention-DP width
        names = list(CONFIG_FIELDS) + [a for a in FIELD_ALIASES if len(a) > 2] + list(ATTN_DP_NAMES)
        values = {n: self.get(n) for n in names if self.has(n) and self.get(n) is not None
                  and (n not in ALIAS_SWITCHES or self.get(ALIAS_SWITCHES[n]))}
        for dest, field in PARSER_DESTS.items():
            if field not in values and self.get(dest) is not None and (
                    dest not in ALIAS_SWITCHES or self.get(ALIAS_SWITCHES[dest])):
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


def plan(args: ArgsView, decision: Decision, env: Mapping[str, str], threshold_var: Optional[str] = None) -> Applied:
    """What apply would write, without writing it. `threshold_var`: the variable the target release reads."""
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
            readable = (threshold_var,) if threshold_var else threshold_env_vars()
            if not any(str(env.get(v, "")).strip() for v in readable):
                env_set[threshold_var or (DSA_ENV if args.uses_dsa_spelling() else NSA_ENV)] = str(decided)
            else:
                var = next(v for v in readable if str(env.get(v, "")).strip())
                if str(env[var]).strip() != str(decided):
                    kept[var] = {"explicit": env[var], "decided": decided}
    return Applied(decision=decision, written=written, previous=previous, env_set=env_set, kept=kept)


def startup_record(applied: Applied, status: str) -> dict[str, Any]:
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
        "sglang": applied.release.model_dump(mode="json") if applied.release else None,
        "apply_notes": list(applied.notes),
        "warnings": [{"code": f.code, "message": f.message} for f in d.warnings],
        "notes": [{"code": f.code, "message": f.message} for f in d.notes],
        "errors": [{"code": f.code, "message": f.message, "fields": list(f.fields), "alternatives": list(f.alternatives)}
                   for f in d.errors],
    }


def _message(applied: Applied, status: str) -> str:
    d = applied.decision
    head = f"nsa-policy {d.policy} ({d.policy_digest}) on {d.device} ({d.device_class}), model {d.model or d.architecture}"
    if applied.release is not None:
        head += f", for {applied.release.describe()}"
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
    text += kept_and_warnings(applied, d)
    for note in applied.notes:
        text += f"\n  note: {note}"
    return text


def kept_and_warnings(applied: Any, d: Any) -> str:
    """The explicit values kept over the decision, then the decision's warnings (sglang and vLLM alike)."""
    text = ""
    if applied.kept:
        text += "; kept explicit " + ", ".join(f"{k}={v['explicit']} (policy decided {v['decided']})"
                                               for k, v in applied.kept.items())
    for f in d.warnings:
        text += f"\n  warning {f.code}: {f.message}"
    return text


THRESHOLD = "dense_attn_kv_len_threshold"


def running_release(server_args: Any, sglang_version: Optional[str] = None) -> TargetRelease:
    """The sglang release `server_args` belongs to: the given version, this process's installed sglang
    (importlib.metadata; sglang is not imported), else what the object's attribute names allow."""
    reg = load_args()
    if sglang_version is not None:
        return reg.target(sglang_version, "sglang_version=")
    try:
        return reg.target(importlib.metadata.version("sglang"), "importlib.metadata in this process")
    except importlib.metadata.PackageNotFoundError:
        pass
    args = server_args if isinstance(server_args, ArgsView) else ArgsView(server_args)
    # the newest release whose attribute for the prefill backend the object carries (nsa_* → 0.5.12.post1)
    fits = [r for r in reg.releases if args.has(reg.attribute_for("dsa_prefill_backend", r) or "")]
    if fits:
        found = reg.target(fits[-1], "no sglang installed in this process; the newest release with the object's "
                                     f"{reg.attribute_for('dsa_prefill_backend', fits[-1])} attribute")
        return found.model_copy(update={"note": f"sglang is not installed in this process: assuming {fits[-1]} from the "
                                                 "argument names; pass sglang_version= to choose"})
    return reg.target(None, "no sglang installed in this process")


def release_env(env: Mapping[str, str], release: TargetRelease) -> tuple[str, dict[str, str], list[str]]:
    """(the threshold variable the release reads, variables to set so that it reads what the user set, notes).

    A threshold set only under a name the release ignores (SGLANG_NSA_… on 0.5.13+, SGLANG_DSA_… before)
    is copied to the name it reads when that one is unset; when both are set the ignored one is left alone."""
    reg = load_args()
    read = reg.env_var_read(THRESHOLD, release.version)
    assert read is not None  # every release reads one (registry test)
    add: dict[str, str] = {}
    notes: list[str] = []
    for var, why in reg.env_vars_ignored(THRESHOLD, release.version).items():
        value = str(env.get(var, "")).strip()
        if not value:
            continue
        if not str(env.get(read, "")).strip() and read not in add:
            add[read] = value
            notes.append(f"{var}={value} is not read by sglang {release.version} ({why}); set {read}={value} instead")
        else:
            used = env.get(read) or add.get(read)
            notes.append(f"{var}={value} is not read by sglang {release.version} ({why}); {read}={used} is")
    return read, add, notes


def write_all(args: ArgsView, applied: Applied, env: MutableMapping[str, str]) -> None:
    """Write every decided attribute and variable, or none: a write that fails undoes the ones before it."""
    done: list[str] = []
    set_vars: dict[str, Optional[str]] = {}
    try:
        for attr, value in applied.written.items():
            args.set(attr, value)
            done.append(attr)
        for var, value in applied.env_set.items():
            set_vars[var] = env.get(var)
            env[var] = value
    except Exception:
        for attr in reversed(done):
            args.set(attr, applied.previous.get(attr))
        for var, before in set_vars.items():
            if before is None:
                env.pop(var, None)
            else:
                env[var] = before
        raise


def apply(server_args: Any, *, policy: str = "default", device: Any = "auto", model: Any = None,
          env: Optional[MutableMapping[str, str]] = None, logger: Optional[logging.Logger] = None,
          sglang_version: Optional[str] = None, device_index: Optional[int] = None) -> Applied:
    """Resolve from `server_args` and write the decision into its unset fields (see the module doc).

    server_args: argparse.Namespace, a dataclass / ServerArgs, or a mutable mapping, with sglang's names.
    device: "auto" (this rank's GPU: LOCAL_RANK through CUDA_VISIBLE_DEVICES, read by NVML; see
        integration.discovery), "auto:N", a catalog name, a capability spec or DeviceFacts.
    device_index: with device="auto", the CUDA device index this process runs on (instead of LOCAL_RANK).
    model: None = server_args.model_path; else a catalog id, a path, or a config mapping.
    env: where the threshold variable is read and set (default os.environ).
    sglang_version: the release served (default: this process's installed sglang; see running_release).
    Raises InputError for arguments that cannot be read, StartupRejected (a PolicyError) when rejected.
    """
    from nsa_policy.api import resolve

    args = ArgsView(server_args)
    env = os.environ if env is None else env
    if device_index is not None:
        from nsa_policy.integration.discovery import auto_index

        if auto_index(device, "device") != (True, None):
            raise InputError("device_index", device_index, hint=f"only with device='auto', not {device!r}")
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise InputError("device_index", device_index, hint="a CUDA device index, an int >= 0")
        device = f"auto:{device_index}"
    logger = logger or logging.getLogger(LOGGER_NAME)
    release = running_release(args, sglang_version)
    read_var, translated, notes = release_env(env, release)
    if release.note:
        notes.insert(0, release.note)
    if any(args.has(a) for a in TARGETS[THRESHOLD]):
        translated = {}  # the engine takes the threshold from the object, not from the environment
    # the policy sees only what the release reads: never a threshold from a variable it ignores
    ignored = set(load_args().env_vars_ignored(THRESHOLD, release.version))
    policy_env = {k: v for k, v in env.items() if k not in ignored}
    policy_env.update(translated)
    decision = resolve(args.serving_config(), device=device, model=model, policy=policy, env=policy_env,
                       raise_on_error=False)
    planned = plan(args, decision, policy_env, read_var)
    status = "rejected" if decision.errors else ("applied" if decision.applies else "not_applicable")
    env_set = {**translated, **planned.env_set} if status == "applied" else {}
    applied = planned.model_copy(update={"release": release, "notes": tuple(notes), "env_set": env_set})
    if status == "applied":
        write_all(args, applied, env)
    level = logging.ERROR if status == "rejected" else (
        logging.WARNING if decision.warnings or applied.kept or notes else logging.INFO)
    logger.log(level, _message(applied, status), extra={
        "nsa_policy": startup_record(applied, status), "nsa_decision": decision,
        "nsa_context": {"status": status, "written": dict(applied.written), "previous": dict(applied.previous),
                        "env_set": dict(applied.env_set), "kept": dict(applied.kept),
                        "sglang": release.model_dump(mode="json"), "notes": list(notes)}})
    if status == "rejected":
        raise StartupRejected(decision)
    return applied
