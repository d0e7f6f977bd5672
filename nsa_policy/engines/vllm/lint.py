"""lint for `vllm serve …` launches: vLLM's flags read through vLLM's argument registry
(rules/catalog/vllm/args.yaml), the launch resolved with the vLLM bundles (vllm-default for `default`,
vllm-0.33 when asked), each finding placed at the flag it is about; removed environment variables
(VLLM_ATTENTION_BACKEND) reported where they are set."""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

from nsa_policy.api import build_facts, decide
from nsa_policy.base.errors import InputError
from nsa_policy.engines.vllm.catalog import load_vllm
from nsa_policy.lint.configfile import (
    config_mapping_args,
    node_value,
    read_config_file,
    read_confined,
    with_config_files,
)
from nsa_policy.lint.report import Arg, Diagnostic, Launch, Location

__all__ = ["config_mapping_args", "node_value", "read_config_file", "with_config_files"]

if TYPE_CHECKING:
    from nsa_policy.lint.launch_checks import Checker

Token = tuple[str, Location, Optional[str]]  # text, where, unresolved variable
# vLLM's attention config: `-ac '{json}'`, `-ac.KEY VALUE`, `--attention-config.KEY=VALUE` (config/attention.py)
_AC_PREFIXES = ("-ac.", "--attention-config.")
_AC_WHOLE = ("-ac", "--attention-config")
_BOOL_ARGS = ("sparse_mla_force_mqa",)
_INT_ARGS = ("block_size", "tensor_parallel_size", "decode_context_parallel_size", "prefill_context_parallel_size")


def vllm_flag(written: str, table: dict[str, str]) -> str:
    """A flag as vLLM's FlexibleArgumentParser and argparse read it: `_` → `-` in a long option's name (up
    to the first `.`), then a unique prefix of a known long option (allow_abbrev) as that option.
    InputError for a prefix of two known options (argparse: ambiguous option)."""
    if not written.startswith("--"):
        return written
    head, dot, rest = written.partition(".")
    flag = head.replace("_", "-") + dot + rest
    if flag in table or dot or len(flag) < 5:
        return flag
    hits = sorted({f for f in table if f.startswith(flag) and f.startswith("--")})
    if len(hits) > 1 and len({table[f] for f in hits}) > 1:
        raise InputError(written, written, hits, hint="an abbreviation of several vLLM options (argparse: ambiguous "
                                                      "option); write the flag in full")
    return hits[0] if hits else flag


def parse_vllm_cli(tokens: Iterable[Token]) -> list[Arg]:
    """The words after `vllm serve` as arguments, read as vLLM reads them: underscores and abbreviations
    (vllm_flag), `--flag=value` and `-dcp=2`; the positional word wherever it stands is the model (spelt
    `--model` in the result); `-ac.KEY` keys keep their spelling. Flags outside the registry keep a value
    when the next word is not a flag. A word lint cannot see ("$@") is kept as an `unseen` argument."""
    table = load_vllm().flag_table()
    toks = list(tokens)
    args: list[Arg] = []
    model_seen = False
    i = 0
    while i < len(toks):
        text, loc, unresolved = toks[i]
        i += 1
        if text == "--":
            continue
        if not text.startswith("-") or text == "-":
            if unresolved is not None:
                args.append(Arg(text, None, loc, "unseen", unresolved))
            elif not model_seen:
                args.insert(0, Arg("--model", text, loc, "flag", unresolved))
                model_seen = True
            continue
        if "=" in text:
            flag, _, value = text.partition("=")
            flag = vllm_flag(flag, table)
            if flag == "--model":
                model_seen = True
            args.append(Arg(flag, value, loc, "flag", unresolved))
            continue
        text = vllm_flag(text, table)
        nxt = toks[i] if i < len(toks) else None
        takes = text in table or text in _AC_WHOLE or text.startswith(_AC_PREFIXES)
        if nxt is not None and (takes or not nxt[0].startswith("-")):
            if text == "--model":
                model_seen = True
            args.append(Arg(text, nxt[0], loc, "flag", nxt[2]))
            i += 1
        else:
            args.append(Arg(text, True, loc, "flag"))
    return args


# ---------------------------------------------------------------- `vllm serve --config file.yaml`
# Read as sglang reads its own --config too: nsa_policy/lint/configfile.py.
CONFIG_FLAG = "--config"


# ---------------------------------------------------------------- the vLLM release a launch targets

def vllm_release(value: str, field: str) -> str:
    """A vLLM release nsa-policy's argument registry covers (its first sampled release up to the newest's
    patch releases), as written; InputError naming the field, the value and what is valid otherwise."""
    from nsa_policy.base.versions import parse_version

    vc = load_vllm()
    releases = vc.args_doc.releases
    try:
        v = parse_version(value, field=field)
    except InputError:
        raise InputError(field, value, hint=f"not a release number; valid: vLLM {releases[0]} … "
                                            f"{_series(vc.newest_release)}") from None
    newest = parse_version(vc.newest_release)
    if v < parse_version(releases[0]) or (v.major, v.minor) > (newest.major, newest.minor):
        raise InputError(field, value, hint=f"not a vLLM release nsa-policy knows; valid: vLLM {releases[0]} … "
                                            f"{_series(vc.newest_release)}")
    return value.lstrip("v")


def _series(release: str) -> str:
    major, minor = release.split(".")[:2]
    return f"{major}.{minor}.x"


def vllm_config(launch_args: Iterable[Arg], bad: Callable[[str, Arg], None]
                ) -> tuple[dict[str, Any], dict[str, Arg], Optional[Arg]]:
    """(vLLM config by EngineArgs name, the arg behind each ServingConfig field, the model argument).
    `bad(message, arg)` is told of a value that cannot be read (lint: NSA406; launch: an error)."""
    vc = load_vllm()
    table = vc.flag_table()
    ac_keys = {a.attention_config_key: a for a in vc.args_doc.arguments if a.attention_config_key}
    config: dict[str, Any] = {}
    attention: dict[str, Any] = {}
    by_field: dict[str, Arg] = {}
    model: Optional[Arg] = None
    for arg in launch_args:
        if arg.unresolved is not None:
            continue  # depends on a variable the file does not set: not evaluated
        entries: list[tuple[str, Any]] = []  # (argument name, value)
        if arg.spelling in table:
            entries.append((table[arg.spelling], arg.value))
        elif arg.spelling.startswith(_AC_PREFIXES):
            key = arg.spelling.split(".", 1)[1].replace("-", "_")
            if key in ac_keys:
                entries.append((ac_keys[key].name, arg.value))
        elif arg.spelling in _AC_WHOLE and isinstance(arg.value, (str, dict)):
            try:
                doc = json.loads(arg.value) if isinstance(arg.value, str) else arg.value  # a --config mapping
            except ValueError:
                bad(f"{arg.spelling} {arg.value!r} is not a JSON object", arg)
                continue
            if isinstance(doc, dict):
                entries += [(ac_keys[k].name, v) for k, v in doc.items() if k in ac_keys]
        for name, value in entries:
            spec = vc.argument(name)
            if name == "model":
                model = arg
                continue
            if name in _INT_ARGS:
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    bad(f"{arg.spelling} {value!r} is not an integer", arg)
                    continue
            if name in _BOOL_ARGS and isinstance(value, str):  # -ac.KEY true (vLLM parses JSON-ish values)
                low = value.lower()
                if low not in ("true", "false", "1", "0"):
                    bad(f"{arg.spelling} {value!r} is not true/false", arg)
                    continue
                value = low in ("true", "1")
            if spec.attention_config_key and arg.spelling not in table:
                attention[spec.attention_config_key] = value
            else:
                config[name] = value
            by_field[spec.field] = arg
    if "backend" in attention and "attention_backend" not in config:
        config["attention_backend"] = attention.pop("backend")
    attention.pop("backend", None)
    if attention:
        config["attention_config"] = attention
    return config, by_field, model


def _target_release(checker: Checker, launch: Launch, out: list[Diagnostic]) -> tuple[str, str]:
    """(the vLLM release the launch targets, how lint knows it): a `nsa-policy: vllm=X` comment, else what
    the file installs (a vllm/vllm-openai image tag, a vllm== pin), else the newest release nsa-policy knows."""
    for h in checker.release_hints(launch, "vllm"):
        try:
            release = vllm_release(h.value, "vllm")
        except InputError as exc:
            out.append(checker.diag("NSA407", f"{h.source}: {exc}", h.loc))
            continue
        source = h.source if h.source != "comment" else f"hint comment 'nsa-policy: vllm={h.value}'"
        return release, f"vLLM {release} from {source} at line {h.loc.line}"
    newest = load_vllm().newest_release
    return newest, f"vLLM {newest}, the newest release nsa-policy knows (the file names none)"


def _policy(checker: Checker, launch: Launch, out: list[Diagnostic]) -> str:
    """A vLLM bundle named by --policy or a hint; anything else means `default` (vllm-default)."""
    policy = checker.policy(launch, out)
    return policy if policy.startswith("vllm-") else "default"


def check_vllm(checker: Checker, launch: Launch) -> list[Diagnostic]:
    import os


    vc = load_vllm()
    out: list[Diagnostic] = []
    release, why = _target_release(checker, launch, out)
    for name, ev in launch.env.items():
        var = vc.env_var(name)
        if var is not None and var.last is not None and not vc.env_read(name, release):
            instead = f"; use {var.replaced_by} {ev.value}" if var.replaced_by else ""
            out.append(checker.diag(
                "NSA252", f"{name}={ev.value} is ignored: vLLM reads it up to {var.last} only "
                          f"({', '.join(var.evidence)}){instead} [{why}]", ev.loc,
                fix=f"Remove {name}{f' and pass {var.replaced_by}' if var.replaced_by else ''}."))

    def bad(msg: str, arg: Arg) -> None:
        out.append(checker.diag("NSA406", msg, arg.loc))

    launch_args = with_config_files(launch.args, os.path.dirname(os.path.abspath(launch.path)), bad,
                                    read_confined(checker, launch, out))
    config, by_field, model_arg = vllm_config(launch_args, bad)
    policy = _policy(checker, launch, out)
    bundle = "vllm-default" if policy == "default" else policy
    model = None
    if model_arg is not None and isinstance(model_arg.value, str):
        model = checker.resolve_model(model_arg.value)
        if model is None:
            return out  # not a DSA model nsa-policy knows (or a local path it cannot read): nothing to decide
    devices = checker.devices(launch, out)
    if not devices:
        out.append(checker.no_device(bundle, launch.loc, "vLLM launch"))
    found = _decide(checker, launch, policy, bundle, config, by_field, model, devices)
    if isinstance(found, Diagnostic):
        return out + [found]
    default = "default"
    out += checker.floor(policy, found, lambda: _as_list(_decide(checker, launch, default, "vllm-default", config,
                                                                  by_field, model, devices)))
    return out


def _as_list(found: Any) -> list[Diagnostic]:
    return [found] if isinstance(found, Diagnostic) else found


def _decide(checker: Checker, launch: Launch, policy: str, bundle: str, config: dict[str, Any],
            by_field: dict[str, Arg], model: Any, devices: list) -> Any:
    """The policy's findings for the launch under `policy`, or the one NSA406 when it cannot be evaluated."""
    from nsa_policy.lint.launch_checks import rule_needs

    cat = checker.catalog
    placeholder = next(c for c in cat.device_classes if cat.runs_dsa(c))
    runs = devices or [(cat.device(placeholder), None)]
    mdl = model or cat.model(cat.model_ids[0])
    needs = rule_needs(bundle)
    out: list[Diagnostic] = []
    for dev, hint in runs:
        try:
            facts = build_facts(config, device=dev, model=mdl, env={}, engine="vllm")
        except InputError as exc:
            return checker.diag("NSA406", f"the vLLM launch's arguments cannot be evaluated: {exc}", launch.loc)
        decision = decide(facts, policy, trace=False)
        for f in decision.findings:
            need = needs.get(f.rule or "")
            if need is not None and ((not devices and need.device) or (model is None and need.model)):
                continue
            msg = f.message
            if hint is not None and len(runs) > 1:
                msg += f" [device {dev.name} from {hint.source} at line {hint.loc.line}]"
            loc = next((by_field[fl].loc for fl in f.fields if fl in by_field), launch.loc)
            out.append(checker.diag(f.code, msg, loc, alternatives=f.alternatives, rule=f.rule))
    return out


# ------------------------------------------------------------------ the vLLM Engine's lint hooks
_API_SERVER = "vllm.entrypoints.openai.api_server"
_VERSION = r"(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)"
# The vLLM release: its OpenAI-server image (vllm/vllm-openai:v0.33.0) or a pin (vllm==0.33.0).
IMAGE = r"(?<![\w.:/-])((?:[\w.-]+(?::\d+)?/)*vllm-openai):v?" + _VERSION + r"(?![\w.])([\w.-]*)"
PIN = r"(?<![\w.-])vllm(?:\[[^\]\n]*\])?[ \t]*==[ \t]*" + _VERSION + r"(?![\w.+])"


def launch_start(words: Sequence[str]) -> Optional[int]:
    """Index of the first argument of a vLLM server launch (`vllm serve …`, `python -m
    vllm.entrypoints.openai.api_server …`) among a command's words, or None."""
    from nsa_policy.engines.sglang.lint import python_module_start

    for k, t in enumerate(words):
        if (t == "vllm" or t.endswith("/vllm")) and k + 1 < len(words) and words[k + 1] == "serve":
            return k + 2
    return python_module_start(words, _API_SERVER)


def parse_cli(tokens: Sequence[Any]) -> list[Arg]:
    return parse_vllm_cli(tokens)


def lint_launch(checker: Checker, launch: Launch) -> list[Diagnostic]:
    return check_vllm(checker, launch)


def image_pins() -> tuple[tuple[str, str], ...]:
    return ((IMAGE, PIN),)


# vLLM's OpenAI-server image (docker/Dockerfile: ENTRYPOINT ["vllm", "serve"]), under any registry prefix.
_SERVER_IMAGE = re.compile(r"(?:^|/)vllm-openai(?::|@|$)")


def server_image(image: str) -> bool:
    return _SERVER_IMAGE.search(image) is not None


def config_launch(node: Any, keys: Sequence[str], path: str, loc: Callable[[Any], Location]) -> Optional[Launch]:
    """A `vllm serve --config` file: a mapping of vLLM flag names (without `--`) that names the model
    and at least one argument the vLLM policy reads (`model` alone is any tool's key)."""
    table = load_vllm().flag_table()
    known = [k for k in keys if "--" + k.replace("_", "-") in table]
    if "model" not in known or len(known) < 2:
        return None
    first = node.pairs[0][0]
    return Launch(path, loc(first), "config", args=config_mapping_args(node, path), engine="vllm")
