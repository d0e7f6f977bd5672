"""Reading sglang's configuration: its attribute names (nsa_* and the later dsa_* spellings), the
flags a --config file or a mapping spells, the attention-DP width, a legacy switch's implied mode."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from nsa_policy.base.errors import InputError, closest
from nsa_policy.catalog.store import KV_DTYPE_ALIASES, KV_DTYPES
from nsa_policy.core.facts import ServingConfig
from nsa_policy.engines.sglang.args import load_args
from nsa_policy.inputs import CONFIG_FIELDS, merge_value, validate_config

# sglang's KV dtype names → the policy's: bf16 is sglang's alias of bfloat16 (the one owner of the alias)
KV_ALIASES = {"auto": "auto", **{k: k for k in KV_DTYPES}, **KV_DTYPE_ALIASES}

# Every other name sglang (any release) or nsa-policy gives a ServingConfig field: the dsa_* spellings
# (NSA was renamed DSA in 0.5.13), the parser's tensor/data_parallel_size dests (up to 0.5.13),
# nsa-policy's own threshold attributes and --tp/--dp. Derived from rules/catalog/sglang/args.yaml.
FIELD_ALIASES: dict[str, str] = load_args().field_aliases()
# sglang 0.5.22+ spells DP attention as --attn-dp-size N (it turns the deprecated
# `--dp-size N --enable-dp-attention` into attn_dp_size=N, dp_size=1); the policy reads it as that pair.
ATTN_DP_NAMES: tuple[str, ...] = tuple(a.name for a in load_args().argument("attn_dp_size").attributes)
# A legacy CP mode attribute always holds its parser default: it counts only with its own switch on.
ALIAS_SWITCHES: dict[str, str] = load_args().alias_switches()
# Switch fields: another name's False is a switch left off (a legacy alias beside the canonical one), not a value.
BOOL_FIELDS = frozenset(n for n, f in ServingConfig.model_fields.items() if f.annotation is bool)

# field → {old value: the value it names now}: renamed choices the policy reads under their new name
# (cp_strategy's in-seq-split is zigzag); from the registry's choice_aliases.
# A value that was a choice of its own before its rename (distinct_before) is kept as given here: the
# release targeted renames it (config_at_release), since the releases before the rename check it as itself.
VALUE_ALIASES: dict[str, dict[str, str]] = {
    a.field: {c.value: c.canonical for c in a.choice_aliases if not c.distinct_before}
    for a in load_args().arguments.values() if a.field and any(not c.distinct_before for c in a.choice_aliases)}
RELEASE_RENAMES: tuple[tuple[str, Any], ...] = tuple(
    (a.field, c) for a in load_args().arguments.values() if a.field for c in a.choice_aliases if c.distinct_before)


def config_at_release(config: ServingConfig, release: Optional[str]) -> ServingConfig:
    """The configuration as the release targeted (None: the newest) reads it after its own renames of
    deprecated values: 0.5.23 turns --attention-backend tokenspeed_mla into cutedsl_mla with fp8_e4m3 KV
    (serving_hook._handle_deprecated_args); before 0.5.23 the value is its own backend, kept as given."""
    from nsa_policy.base.versions import version_ge

    update: dict[str, Any] = {}
    for field, alias in RELEASE_RENAMES:
        if getattr(config, field) == alias.value and (release is None or version_ge(release, alias.deprecated)):
            update[field] = alias.canonical
            update.update(alias.implies)
    return config.model_copy(update=update) if update else config



def _flag_key(key: Any) -> Optional[tuple[Any, Any]]:
    """(argument, spelling) of a mapping key written as sglang's flag: `--nsa-prefill-backend`, or
    `nsa-prefill-backend` as a --config file spells it. Underscored keys are attribute/field names."""
    if not isinstance(key, str) or not (key.startswith("--") or "-" in key):
        return None
    return load_args().lookup(key if key.startswith("--") else "--" + key)


def spellings_from(obj: Any) -> tuple[str, ...]:
    """The sglang spellings a mapping's keys use, in order: its flag-form keys (--dsa-prefill-backend), and
    its sglang attribute names that are not nsa-policy's own field names (dsa_prefill_backend), which the
    target release judges as it judges the attribute (nsa-policy's own spellings left out)."""
    if not isinstance(obj, Mapping):
        return ()
    reg = load_args()
    out = []
    for key, value in obj.items():
        if value is None or value is False:
            continue
        hit = _flag_key(key)
        if hit is not None:
            if not hit[1].nsa_policy_only:
                out.append(hit[1].flag)
        elif isinstance(key, str) and key not in ServingConfig.model_fields and reg.attribute(key) is not None:
            out.append(key)
    return tuple(dict.fromkeys(out))


def config_from(obj: Any) -> ServingConfig:
    """A ServingConfig from a ServingConfig, a mapping, or any object with sglang's attribute names.

    A mapping's keys are field or attribute names (prefill_backend; sglang's nsa_prefill_backend,
    dsa_prefill_backend), or sglang's
    flags as a --config file spells them (nsa-prefill-backend, --dsa-prefill-backend); the flags of
    arguments the policy does not read are accepted and not used."""
    if obj is None:
        return ServingConfig()
    if isinstance(obj, ServingConfig):
        return obj
    values: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        attn_dp = []
        for key, value in obj.items():
            hit = _flag_key(key)
            if key in ATTN_DP_NAMES or (hit is not None and hit[0].name == "attn_dp_size"):
                if value is not None:
                    attn_dp.append((key, value))
                continue
            if hit is not None:
                if hit[0].field is None:
                    continue  # an sglang argument the policy does not read (cp_strategy, attention_backend)
                name = hit[0].field
                if hit[0].type == "bool" and value is False:
                    continue  # a switch left off, as a --config file's `key: false` is
            else:
                name = FIELD_ALIASES.get(key, key)
                if key in ALIAS_SWITCHES and not obj.get(ALIAS_SWITCHES[key]):
                    continue  # a mode without its switch: sglang does not read it
                if value is False and name in BOOL_FIELDS and name != key:
                    continue  # a legacy switch left off beside the canonical one
            if name not in ServingConfig.model_fields:
                raise InputError(f"config.{key}", value, hint="unknown serving argument"
                                 + (f"; did you mean {closest(key, CONFIG_FIELDS)!r}?" if closest(key, CONFIG_FIELDS) else ""))
            if value is not None:
                merge_value(values, name, value, key)
        for key, value in attn_dp:  # after dp_size: it sets the attention-DP width
            _attn_dp(values, value, key)
        reg = load_args()  # a legacy switch carries its mode's default (--enable-nsa-prefill-context-parallel)
        for arg, value in reg.implied(spellings_from(obj), {n for n in values}).items():
            field = reg.argument(arg).field
            if field is not None and field not in values:
                values[field] = value
        return _validated(values)
    for name in CONFIG_FIELDS:
        value = getattr(obj, name, None)
        if value is not None and not (value is False and name in BOOL_FIELDS):  # a switch left off: the default
            values[name] = value
    for alias, name in FIELD_ALIASES.items():
        value = getattr(obj, alias, None)
        if alias in ALIAS_SWITCHES and not getattr(obj, ALIAS_SWITCHES[alias], False):
            continue  # a mode without its switch: sglang does not read it
        if value is False and name in BOOL_FIELDS:
            continue
        if value is not None and len(alias) > 2:
            merge_value(values, name, value, alias)
    for name in ATTN_DP_NAMES:
        value = getattr(obj, name, None)
        if value is not None:
            _attn_dp(values, value, name)
    return _validated(values)



def _attn_dp(values: dict[str, Any], value: Any, key: str) -> None:
    """attn_dp_size N (sglang 0.5.22+) as the policy's (enable_dp_attention, dp_size): attention-DP width N."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(key, value, hint="the attention data-parallel size must be an integer >= 1")
    if value == 1:
        return  # no attention DP: sglang's default
    # Beside attn_dp_size > 1, dp_size counts replicas, with or without --enable-dp-attention (which "adds
    # nothing" there), and sglang refuses replicas with attention DP: parallel_hook.py
    # _handle_deprecated_dp_attention and handle_data_parallelism (0.5.22-0.5.23).
    replicas = values.get("dp_size", 1)
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 1:
        raise InputError(key, value, hint=f"sglang refuses --dp-size {replicas} with --attn-dp-size {value}: "
                                          "data-parallel replicas combined with attention data parallelism are not "
                                          "supported; valid: --attn-dp-size alone, or --dp-size alone")
    values["enable_dp_attention"] = True
    values["dp_size"] = value




def _validated(values: dict[str, Any]) -> ServingConfig:
    for name, aliases in VALUE_ALIASES.items():  # renamed choices, read under their new name
        if isinstance(values.get(name), str) and values[name] in aliases:
            values[name] = aliases[values[name]]
    return validate_config(values)
