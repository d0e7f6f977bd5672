"""`nsa-policy launch -- python -m sglang.launch_server ARGS…`: the policy without changing the engine's code.

The command is written for one sglang release, and sglang renames and removes spellings between
releases (rules/catalog/sglang/args.yaml). So launch first finds the target release: `--sglang-version`,
else the version installed for the command's own interpreter (asked through importlib.metadata in a
subprocess; sglang is never imported), else the newest release the registry knows, with a note.

Then, from the registry, for that release:
- the serving flags the policy reads are picked out of the command (`--flag value` and `--flag=value`;
  the last occurrence wins, as in argparse; every other token passes through untouched);
- a spelling the release refuses or only accepts as a deprecated alias is rewritten to its canonical
  spelling (`--nsa-prefill-backend` → `--dsa-prefill-backend` from 0.5.13; `--dp-size N
  --enable-dp-attention` → `--attn-dp-size N` from 0.5.22); nsa-policy's own threshold flags become
  the variable the release reads; a value outside the release's choices is an error, not a command
  that will not start;
- the flags go through `startup.apply` on a namespace shaped like that release's parsed arguments,
  so the launcher and the library hook fill the same fields; what apply writes becomes flags in the
  release's spelling (an explicit `--kv-cache-dtype auto` is rewritten in place), and the threshold
  variable it sets becomes an environment addition.
The plan also carries what the release would decide on its own (its compatibility bundle: the newest
sglang-<version> bundle at or below the release) next to the final decision.
"""
from __future__ import annotations

import logging
import os
import shlex
from types import SimpleNamespace
from typing import Any, Mapping, Optional, Sequence

from pydantic import Field

from nsa_policy.base.errors import InputError, NsaPolicyError, PolicyError
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Frozen
from nsa_policy.engines.sglang.args import Argument, TargetRelease, load_args

THRESHOLD = "dense_attn_kv_len_threshold"
# launch's own options that sglang does not have: inside the server command they are a misplaced option
_LAUNCH_OPTIONS = ("--sglang-version", "--dry-run", "--log-decisions")
_PYTHON_NAMES = ("python", "python3")


def flag_table() -> dict[str, tuple[str, str]]:
    """flag → (registry argument, value type), for every spelling of every release and nsa-policy's own."""
    reg = load_args()
    return {flag: (arg.name, arg.type) for flag, (arg, _) in reg.by_flag.items()}


class Occurrence(Frozen):
    index: int = Field(description="position of the flag token in the command")
    flag: str
    arg: str = Field(description="the registry argument it sets")
    value: Any = None
    inline: bool = Field(default=False, description="--flag=value form")

    @property
    def width(self) -> int:
        """Tokens it takes in the command."""
        return 1 if self.inline or self.value is True else 2


class ParsedCommand(Frozen):
    argv: tuple[str, ...]
    occurrences: tuple[Occurrence, ...]
    values: dict[str, Any] = Field(description="registry argument → value, last occurrence wins")
    has_config_file: bool = False


def parse_command(argv: Sequence[str]) -> ParsedCommand:
    """Pick the serving flags the policy reads out of a launch command."""
    if not argv:
        raise InputError("command", "", hint="give the server command after '--', e.g. "
                                             "nsa-policy launch -- python -m sglang.launch_server --model-path …")
    table = flag_table()
    occurrences: list[Occurrence] = []
    values: dict[str, Any] = {}
    has_config = False
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, inline_value = token.partition("=")
        has_config = has_config or flag == "--config"
        if flag not in table:
            i += 1
            continue
        arg, kind = table[flag]
        if kind == "bool":
            if eq:
                raise InputError(flag, token, hint="a switch: give it without a value")
            value: Any = True
            step = 1
        else:
            if eq:
                raw, step = inline_value, 1
            elif i + 1 < len(argv):
                raw, step = argv[i + 1], 2
            else:
                raise InputError(flag, None, hint="needs a value")
            value = raw
            if kind == "int":
                try:
                    value = int(raw)
                except ValueError:
                    raise InputError(flag, raw, hint="must be an integer") from None
        earlier = next((o for o in occurrences if o.arg == arg and o.flag != flag and o.value != value), None)
        if earlier is not None:  # two spellings of one argument: not "the last one wins" silently
            raise InputError(flag, value, hint=f"conflicts with {earlier.flag} {earlier.value}: one argument, two values")
        occurrences.append(Occurrence(index=i, flag=flag, arg=arg, value=value, inline=bool(eq)))
        values[arg] = value
        i += step
    # a legacy switch carries its mode's default when the command gives no mode (cp_strategy interleave)
    values.update(load_args().implied([o.flag for o in occurrences], values))
    return ParsedCommand(argv=tuple(argv), occurrences=tuple(occurrences), values=values, has_config_file=has_config)


# the target release -----------------------------------------------------------------------------
def command_interpreter(command: Sequence[str]) -> Optional[str]:
    """The Python interpreter that will run the server (integration.discovery.command_python)."""
    from nsa_policy.integration.discovery import command_python

    return command_python(command, "sglang")


def detect_sglang_version(command: Sequence[str], *, timeout: float = 20.0) -> tuple[Optional[str], str]:
    """(the sglang version installed for the command's interpreter or None, how that was found)."""
    from nsa_policy.integration.discovery import probe_installed

    python = command_interpreter(command)
    if python is None:
        return None, f"the command starts with {command[0]!r}, not python/python3 or the sglang entry point"
    return probe_installed(python, "sglang", timeout=timeout)


def target_release(command: Sequence[str], sglang_version: Optional[str] = None) -> TargetRelease:
    """The release the command targets: --sglang-version, else the command's interpreter, else the newest known."""
    reg = load_args()
    if sglang_version is not None:
        return reg.target(sglang_version, "--sglang-version")
    found, how = detect_sglang_version(command)
    return reg.target(found, how)


# the plan -----------------------------------------------------------------------------------------
class ReleaseRefuses(PolicyError):
    """The decision needs a value the target release's parser does not list: that sglang cannot run it."""

    def __init__(self, decision: Decision, message: str):
        super().__init__(decision)
        self.args = (message,)


class LaunchPlan(Frozen):
    """The final command: what runs, what was added or rewritten, the release, and the decisions behind it."""

    argv: tuple[str, ...]
    env_additions: dict[str, str]
    added_flags: tuple[str, ...] = Field(description="flags appended or rewritten in place, in command order")
    rewritten: tuple[str, ...] = Field(default=(), description="the command's own spellings changed for the release")
    decision: Decision
    release: TargetRelease
    engine_bundle: Optional[str] = Field(default=None, description="the compatibility bundle standing for the release")
    engine_decision: Optional[Decision] = Field(
        default=None, description="what the release decides on its own for the command as given (its compat bundle)")
    engine_overrides: dict[str, Any] = Field(
        default_factory=dict, description="output → the value the release runs with the final command where that differs "
                                          "from the decision (a release rule that ignores the flags, per its compat bundle)")
    notes: tuple[str, ...] = ()

    def shell_line(self) -> str:
        """The exact final command, shell-quoted, with the environment additions in front."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_additions.items())
        return (env + " " if env else "") + shlex.join(self.argv)


def _for_release(parsed: ParsedCommand, rel: str) -> tuple[list[str], dict[int, int], dict[str, Any], dict[str, str], list[str]]:
    """The command respelt for the release: (argv, old token index → new, argument → value,
    the threshold variable from nsa-policy's own flag, what was rewritten)."""
    reg = load_args()
    argv = list(parsed.argv)
    values = dict(parsed.values)
    drop: set[int] = set()
    rewrites: list[str] = []
    threshold: dict[str, str] = {}

    def respell(o: Occurrence, new_flag: str, value: Any = None) -> None:
        value = o.value if value is None else value
        if o.inline:
            argv[o.index] = f"{new_flag}={value}"
        else:
            argv[o.index] = new_flag
            if o.width == 2:
                argv[o.index + 1] = str(value)

    dp_attention = [o for o in parsed.occurrences if o.arg == "enable_dp_attention"]
    carried: list[tuple[str, Any, str]] = []
    replace_dp = bool(dp_attention) and reg.status("--enable-dp-attention", rel) == "deprecated" \
        and reg.spelling_for("attn_dp_size", rel) is not None
    for o in parsed.occurrences:
        arg = reg.argument(o.arg)
        status = reg.status(o.flag, rel)
        if o.arg == THRESHOLD:
            drop.update(range(o.index, o.index + o.width))
            var = reg.env_var_read(THRESHOLD, rel)
            assert var is not None
            threshold[var] = str(o.value)
            rewrites.append(f"{o.flag} {o.value} → {var}={o.value} (sglang reads the threshold from the environment)")
            continue
        if replace_dp and o.arg == "enable_dp_attention":
            drop.add(o.index)
            continue
        if replace_dp and o.arg == "dp_size" and "attn_dp_size" not in parsed.values:
            new = reg.spelling_for("attn_dp_size", rel)
            assert new is not None
            respell(o, new)
            rewrites.append(f"--enable-dp-attention {o.flag} {o.value} → {new} {o.value} "
                            f"(sglang {rel} deprecates --enable-dp-attention)")
            continue
        # a value renamed with settings of its own (distinct_before: tokenspeed_mla's fp8 KV) is left for
        # sglang's own rename, which sets them too
        alias = next((a for a in arg.choice_aliases if a.value == o.value and not a.distinct_before
                      and reg._rel(rel) >= reg._rel(a.deprecated)), None)
        if status in ("canonical",):
            if alias is not None:  # a deprecated value (--attention-backend nsa from 0.5.13): its canonical name
                respell(o, o.flag, alias.canonical)
                values[o.arg] = alias.canonical
                rewrites.append(f"{o.flag} {o.value} → {o.flag} {alias.canonical} (sglang {rel}: deprecated value)")
                continue
            _check_choice(arg, o, rel)
            continue
        new = reg.spelling_for(o.arg, rel)
        if new is None:
            raise InputError(o.flag, o.value, hint=f"sglang {rel} has no such argument (first accepted in "
                                                   f"{_first(arg)}); remove it or target another release")
        why = {"deprecated": "deprecated alias", "removed": "refused by the parser", "not-yet": "not yet accepted",
               "nsa-policy": "nsa-policy's own spelling"}[status or "nsa-policy"]
        if alias is not None:  # the old flag's value under the new flag's name (in-seq-split → zigzag)
            respell(o, new, alias.canonical)
            values[o.arg] = alias.canonical
            rewrites.append(f"{o.flag} {o.value} → {new} {alias.canonical} (sglang {rel}: {why})")
            continue
        respell(o, new)
        rewrites.append(f"{o.flag} → {new} (sglang {rel}: {why})")
        _check_choice(arg, o, rel)
        carried += _implied_lost(o, new, parsed, rel)
    if replace_dp:
        if "attn_dp_size" in parsed.values:
            rewrites.append(f"--enable-dp-attention dropped (sglang {rel}: deprecated; --attn-dp-size is given)")
        elif not any(o.arg == "dp_size" for o in parsed.occurrences):
            rewrites.append(f"--enable-dp-attention dropped (sglang {rel}: deprecated; with no --dp-size the attention-DP "
                            "width is 1)")
        dp = values.pop("dp_size", None)
        values.pop("enable_dp_attention", None)
        if dp is not None and "attn_dp_size" not in values:
            values["attn_dp_size"] = dp
    kept = [i for i in range(len(argv)) if i not in drop]
    values.pop(THRESHOLD, None)
    out = [argv[i] for i in kept]
    for flag, value, why in carried:  # what the old spelling implied, spelt out for the release
        out += [flag, str(value)]
        rewrites.append(why)
    return out, {old: new for new, old in enumerate(kept)}, values, threshold, rewrites


def _implied_lost(o: Occurrence, new: str, parsed: ParsedCommand, rel: str) -> list[tuple[str, Any, str]]:
    """(flag, value, why) for each value the old spelling implied (--enable-nsa-prefill-context-parallel:
    cp_strategy interleave) that the new spelling does not, where the command gives no value of its own."""
    reg = load_args()
    old_sp, new_hit = reg.by_flag[o.flag][1], reg.by_flag.get(new)
    new_implies = new_hit[1].implies if new_hit is not None else {}
    out = []
    for arg, value in (old_sp.implies or {}).items():
        if (new_implies or {}).get(arg) == value or any(x.arg == arg for x in parsed.occurrences):
            continue
        flag = reg.spelling_for(arg, rel)
        if flag is not None:
            out.append((flag, value, f"{o.flag} implied {flag} {value}; {new} does not, so it is given (sglang {rel})"))
    return out


def _refuse_abbreviations(parsed: ParsedCommand, rel: str) -> None:
    """argparse (allow_abbrev) takes a unique prefix of a long option as that option. A prefix of a flag
    the policy reads would hide that flag from nsa-policy, and an added flag would then override the
    user's value; so such a prefix is refused, with the flags it could stand for in this release."""
    from nsa_policy.engines.sglang.flags import load_flags

    reg = load_args()
    known = set(load_flags().known)  # full names of other sglang flags are not abbreviations
    accepted = [f for f in reg.by_flag if reg.accepts(f, rel)]
    for token in parsed.argv:
        flag = token.partition("=")[0]
        if not flag.startswith("--") or len(flag) <= 2 or flag in reg.by_flag or flag[2:] in known:
            continue
        candidates = sorted(f for f in accepted if f.startswith(flag))
        if candidates:
            raise InputError(flag, token, candidates,
                             hint=f"an abbreviation sglang {rel} reads as {' or '.join(candidates)}; "
                                  "write the flag in full so that nsa-policy reads it too")
        # a prefix of a spelling this release no longer (or not yet) has: sglang refuses it, or reads it as
        # another flag; nsa-policy would add the release's own spelling after it
        other = sorted(f for f in reg.by_flag if f.startswith(flag) and not reg.by_flag[f][1].nsa_policy_only)
        if other:
            raise InputError(flag, token, [f for f in (reg.spelling_for(reg.by_flag[o][0].name, rel) for o in other) if f],
                             hint=f"an abbreviation of {' or '.join(other)}, which sglang {rel} does not accept; "
                                  "write the release's flag in full")


def _config_files(parsed: ParsedCommand) -> list[tuple[str, dict[Any, Any]]]:
    """(path, mapping) of each `--config FILE` the command names that reads as one YAML mapping."""
    from nsa_policy.base import safe_io

    argv = list(parsed.argv)
    paths = [argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--config"]
    paths += [t.partition("=")[2] for t in argv if t.startswith("--config=")]
    out = []
    for path in paths:
        try:
            data = safe_io.load_yaml_text(safe_io.read_text(path, field="--config"), path, field="--config")
        except (NsaPolicyError, OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append((path, data))
    return out


def config_file_values(parsed: ParsedCommand) -> tuple[dict[str, Any], list[str]]:
    """(registry argument → value, the files read) from the command's `--config` files, as sglang merges them
    (srt/utils/server_args_config_parser.py: each key is `--key`, underscores allowed, the file's arguments go
    first so the command line wins; `false` adds nothing)."""
    reg = load_args()
    values: dict[str, Any] = {}
    files = []
    for path, data in _config_files(parsed):
        files.append(path)
        for key, value in data.items():
            hit = reg.lookup("--" + str(key).replace("_", "-")) if isinstance(key, str) else None
            if hit is None or value is None or value is False:
                continue
            arg = hit[0]
            if arg.type == "int" and not isinstance(value, bool):
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    raise InputError(f"--config {path}: {key}", value, hint="must be an integer") from None
            values[arg.name] = value
    return values, files


def _refuse_config_file_spellings(parsed: ParsedCommand, rel: str) -> None:
    """sglang turns each key of a --config YAML file into `--key value` before parsing, so a key the
    release's parser does not have (nsa-prefill-backend on 0.5.20+) stops the server as the flag would.
    launch cannot respell inside the file: such a key is refused here, naming what to write instead.
    A file that cannot be read is left to sglang (the note about --config says its flags are not read)."""

    reg = load_args()
    for path, data in _config_files(parsed):
        for key in data:
            if not isinstance(key, str):
                continue
            hit = reg.lookup("--" + key)
            if hit is None or hit[1].status(reg._rel(rel)) not in ("removed", "not-yet"):
                continue
            arg, sp = hit
            why = f"removed after sglang {sp.last}" if sp.last else f"first accepted in sglang {sp.first}"
            new = reg.spelling_for(arg.name, rel)
            raise InputError(f"--config {path}: {key}", data[key],
                             hint=f"sglang {rel} refuses this key ({why}; its parser: unrecognized arguments)"
                                  + (f"; write {new[2:]}" if new else ""))


def _first(arg: Argument) -> str:
    firsts = [sp.first for sp in arg.spellings if sp.first]
    return min(firsts, key=lambda v: load_args()._rel(v)) if firsts else "no release"


def _check_choice(arg: Argument, o: Occurrence, rel: str) -> None:
    """A value the release's parser would refuse is an error here, with that release's choices."""
    reg = load_args()
    valid = reg.choices(arg.name, rel)
    if valid is None or o.value in valid:
        return
    alias = next((a for a in arg.choice_aliases if a.value == o.value), None)
    if alias is not None and alias.canonical in valid:
        return
    raise InputError(o.flag, o.value, list(valid), hint=f"not a choice of sglang {rel}")


def launch_namespace(values: Mapping[str, Any], rel: str) -> SimpleNamespace:
    """A namespace shaped like the release's parsed args: its attribute names; what the command left out is unset."""
    reg = load_args()
    ns = SimpleNamespace()
    for arg_name, value in values.items():
        attr = reg.attribute_for(arg_name, rel) or reg.argument(arg_name).field
        if attr:
            setattr(ns, attr, value)
    for arg in reg.arguments.values():
        if arg.output is None or arg.name == THRESHOLD:
            continue  # no threshold attribute: the release reads the variable
        attr = reg.attribute_for(arg.name, rel)
        if attr and not hasattr(ns, attr):
            setattr(ns, attr, "auto" if "auto" in arg.unset_values else None)  # sglang's defaults
    return ns


def _attr_flags(rel: str) -> dict[str, str]:
    """attribute of the release → its canonical flag there."""
    reg = load_args()
    out = {}
    for arg in reg.arguments.values():
        attr, flag = reg.attribute_for(arg.name, rel), reg.spelling_for(arg.name, rel)
        if attr and flag:
            out[attr] = flag
    return out


def plan_launch(command: Sequence[str], *, policy: str = "default", device: Any = "auto", model: Any = None,
                env: Optional[Mapping[str, str]] = None, sglang_version: Optional[str] = None,
                logger: Optional[logging.Logger] = None) -> LaunchPlan:
    """Resolve from the command's flags for its sglang release and build the final command.

    sglang_version: the target release (default: ask the command's interpreter; unknown → the newest known).
    Raises StartupRejected (a PolicyError) when the policy rejects it, InputError for a command that
    release cannot run (a flag it does not have, a value outside its choices).
    """
    from nsa_policy.engines.sglang.startup import apply

    parsed = parse_command(command)
    for token in parsed.argv:
        if token.partition("=")[0] in _LAUNCH_OPTIONS:
            raise InputError("command", token, hint="an nsa-policy launch option inside the server command; "
                                                    "give it before the command (before `--`)")
    release = target_release(command, sglang_version)
    rel = release.version
    _refuse_abbreviations(parsed, rel)
    _refuse_config_file_spellings(parsed, rel)
    argv, moved, values, threshold_flag, rewrites = _for_release(parsed, rel)
    from_config, config_paths = config_file_values(parsed)
    for arg_name, value in from_config.items():  # the command line wins over the file
        if arg_name not in parsed.values and arg_name != THRESHOLD:
            values[arg_name] = value
    ns = launch_namespace(values, rel)
    env_view = dict(os.environ if env is None else env)
    env_view.update(threshold_flag)  # nsa-policy's threshold flag wins over the environment, as in resolve
    # the release on the command as given judges its spellings too (0.5.20+ refuse --nsa-*, NSA319), even
    # though the final command respells them
    given = tuple(dict.fromkeys(o.flag for o in parsed.occurrences))
    engine_bundle, engine_decision, engine_note = _engine_view(ns, rel, policy, device, model, env_view, release,
                                                               spellings=given)
    applied = apply(ns, policy=policy, device=device, model=model, env=env_view, logger=logger, sglang_version=rel)
    flags = _attr_flags(rel)
    added: list[str] = []
    for attr, value in applied.written.items():
        flag = flags[attr]
        arg = next(a for a in load_args().arguments.values() if load_args().attribute_for(a.name, rel) == attr)
        _check_release_lists(arg, value, flag, rel, applied.decision)
        auto = [o for o in parsed.occurrences if o.arg == arg.name and o.value == "auto"]
        if auto:  # rewrite the explicit 'auto' (sglang's "engine decides") in place
            o = auto[-1]
            pos = moved[o.index]
            if o.inline:
                argv[pos] = f"{argv[pos].partition('=')[0]}={value}"
            else:
                argv[pos + 1] = str(value)
            added.append(f"{flag} {value} (was auto)")
        else:
            argv += [flag, str(value)]
            added.append(f"{flag} {value}")
    notes = []
    if release.note:
        notes.append(release.note)
    notes += [n for n in applied.notes if n != release.note]
    if engine_note:
        notes.append(engine_note)
    decision: Decision = applied.decision
    overrides: dict[str, Any] = {}
    if engine_bundle is not None:  # the release on the final command: does it run what was decided?
        _, after, _ = _engine_view(ns, rel, policy, device, model, env_view, release)
        if after is not None and not after.errors:
            decision, overrides, more = _what_runs(applied.decision, after, engine_bundle, rel)
            notes += more
    if config_paths:
        notes.append(f"read --config {', '.join(config_paths)}: its server arguments count as given (the command "
                     f"line wins over them), so no flag is added for them")
    elif parsed.has_config_file:
        notes.append("the command has --config, and its file could not be read here: flags inside it were not "
                     "read; an added flag overrides the file's value")
    env_additions = {**threshold_flag, **applied.env_set}
    return LaunchPlan(argv=tuple(argv), env_additions=env_additions, added_flags=tuple(added), rewritten=tuple(rewrites),
                      decision=decision, release=release, engine_bundle=engine_bundle,
                      engine_decision=engine_decision, engine_overrides=overrides, notes=tuple(notes))


_OUTPUTS = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "dense_attn_kv_len_threshold")


def _what_runs(decided: Decision, after: Decision, bundle: str, rel: str) -> tuple[Decision, dict[str, Any], list[str]]:
    """The final decision states what the release will run: where the release, given the final command,
    still decides an output its own way (its compat bundle says so), that value, its provenance and the
    release's warnings replace nsa-policy's; the notes say what nsa-policy had decided."""
    overrides = {out: getattr(after, out) for out in _OUTPUTS if getattr(after, out) != getattr(decided, out)}
    if not overrides:
        return decided, {}, []
    notes = []
    provenance = dict(decided.provenance)
    for out, value in overrides.items():
        p = after.provenance.get(out)
        if p is not None:
            provenance[out] = p.model_copy(update={"overwrote": str(getattr(decided, out))})
        why = f" ({p.source} {p.detail})".rstrip() if p else ""
        notes.append(f"sglang {rel} runs {out}={value} with this command whatever the flags say, not nsa-policy's "
                     f"{getattr(decided, out)}: its own rule{why} per {bundle}; the decision states what runs")
    seen = {(f.code, f.message) for f in decided.warnings}
    warnings = tuple(decided.warnings) + tuple(f for f in after.warnings if f.code.startswith("NSA3")
                                               and (f.code, f.message) not in seen)
    return decided.model_copy(update={**overrides, "provenance": provenance, "warnings": warnings}), overrides, notes


def _check_release_lists(arg: Argument, value: Any, flag: str, rel: str, decision: Decision) -> None:
    """A decided value the release's parser would refuse: that release cannot run the decision."""
    reg = load_args()
    valid = reg.choices(arg.name, rel)
    if valid is None or value in valid:
        return
    later = next((r for r in reg.releases if reg._rel(r) > reg._rel(rel) and value in (reg.choices(arg.name, r) or ())), None)
    raise ReleaseRefuses(decision, (
        f"nsa-policy {decision.policy} decided {flag} {value} on {decision.device} ({decision.device_class}), which sglang "
        f"{rel} does not list" + (f" (first listed in {later})" if later else "") + f"; it lists {', '.join(valid)}. "
        f"Upgrade sglang, or give an explicit {flag} that runs here."))


def _engine_view(ns: SimpleNamespace, rel: str, policy: str, device: Any, model: Any, env: Mapping[str, str],
                 release: TargetRelease, spellings: tuple[str, ...] = ()
                 ) -> tuple[Optional[str], Optional[Decision], Optional[str]]:
    """What the release decides on its own for the command as given: its compat bundle's decision."""
    from nsa_policy.api import resolve
    from nsa_policy.core.bundle import release_bundle
    from nsa_policy.engines.sglang.startup import ArgsView

    try:
        bundle = release_bundle(f"sglang-{rel}")
    except NsaPolicyError as exc:
        return None, None, f"no compatibility bundle reproduces sglang {rel}: {exc}"
    if bundle is None:
        return None, None, None
    ignored = set(load_args().env_vars_ignored(THRESHOLD, rel))
    engine_env = {k: v for k, v in env.items() if k not in ignored}
    try:
        decision = resolve(ArgsView(ns).serving_config(), device=device, model=model, policy=bundle, env=engine_env,
                           raise_on_error=False, spellings=spellings)
    except NsaPolicyError as exc:
        return bundle, None, f"{bundle} could not evaluate this command: {exc}"
    note = None if bundle == f"sglang-{rel}" else (
        f"sglang {rel}'s own decision is shown by {bundle}, the newest compatibility bundle at or below it")
    return bundle, decision, note


def exec_plan(plan: LaunchPlan) -> None:  # pragma: no cover - replaces the process
    env = dict(os.environ)
    env.update(plan.env_additions)
    os.execvpe(plan.argv[0], list(plan.argv), env)
