"""lint for sglang launches: the server's arguments read through sglang's argument registry
(rules/catalog/sglang/args.yaml) and its curated flag list, the release a file targets (hint, image tag,
pin), the release's verdict on each spelling and value, and the policy's decision on the same inputs
the resolver takes, each finding placed at the flag, key or variable it is about.

The functions at the bottom are the sglang Engine's lint hooks (`launch_start`, `parse_cli`,
`lint_launch`, `image_pins`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from nsa_policy.api import build_facts, decide
from nsa_policy.base.errors import InputError
from nsa_policy.base.versions import parse_version
from nsa_policy.core.decision import Finding
from nsa_policy.core.facts import ModelFacts, ServingConfig
from nsa_policy.engines.sglang.args import Argument, Spelling
from nsa_policy.engines.sglang.config import ATTN_DP_NAMES
from nsa_policy.engines.sglang.env import threshold_env_vars
from nsa_policy.engines.sglang.flags import FlagInfo, field_kind, load_flags
from nsa_policy.lint.launch_checks import Needs, rule_needs
from nsa_policy.lint.report import Arg, Diagnostic, Hint, Launch, Location

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.lint.launch_checks import Checker


@dataclass(frozen=True)
class Target:
    """The sglang release a launch targets, and how lint inferred it (said in every release finding)."""

    version: str  # as written
    release: str  # as the registry compares it (the nearest known release outside its span)
    why: str  # "sglang 0.5.23 from image tag lmsysorg/sglang:v0.5.23-cu129 at line 3"


class SglangLint:
    """One lint run's sglang checks: the checker's shared services, and what is remembered across launches."""

    def __init__(self, checker: Checker):
        self.checker = checker
        self.opts = checker.opts
        self.catalog = checker.catalog
        self.reg = load_flags()
        self._listed: dict[str, frozenset[str]] = {}
        self._verdicts: dict[tuple[str, str], Any] = {}
        self._ignored: dict[str, dict[str, tuple[str, Optional[str]]]] = {}

    def diag(self, *a: Any, **k: Any) -> Diagnostic:
        return self.checker.diag(*a, **k)

    def _with_config(self, launch: Launch, out: list[Diagnostic]) -> list[Arg]:
        """The launch's arguments with a `--config FILE` merged in as sglang merges it (the file's keys
        first, the command line's after them: the command line wins), read inside the linted tree only."""
        import os

        from nsa_policy.lint.configfile import read_confined, with_config_files

        if not any(a.spelling == "--config" for a in launch.args):
            return launch.args

        def bad(msg: str, arg: Arg) -> None:
            out.append(self.diag("NSA404", f"--config {arg.value!r}: {msg}", arg.loc))

        return with_config_files(launch.args, os.path.dirname(os.path.abspath(launch.path)), bad,
                                 read_confined(self.checker, launch, out))

    # --------------------------------------------------------------------------------------
    def check(self, launch: Launch) -> list[Diagnostic]:
        out: list[Diagnostic] = []
        policy = self.checker.policy(launch, out)
        target = self._target(launch, out, policy)
        # The old-spelling note (NSA402) is for files whose release is not known; a known release gets
        # the release's own verdict on each spelling (NSA410/NSA412).
        newer = None if target else self._targets_dsa_spelling(launch)
        by_field: dict[str, list[Arg]] = {}
        by_canonical: dict[str, list[tuple[Arg, FlagInfo]]] = {}
        for arg in self._with_config(launch, out):
            if arg.spelling == "--config":
                continue  # its file's keys are read in its place
            info = self.reg.get(arg.spelling)
            if info is None:
                near = self.reg.near(arg.spelling)
                could = sorted({"--" + k for k, i in self.reg.known.items() if k.startswith(arg.name) and i.field})
                if arg.style == "flag" and len(arg.name) >= 3 and len(could) > 1:
                    # argparse: "ambiguous option: --nsa-prefill could match …": the server does not start
                    out.append(self.diag("NSA401", f"{arg.spelling} abbreviates several server arguments "
                                                   f"({', '.join(could)}): argparse refuses it as ambiguous", arg.loc,
                                         alternatives=tuple(could), fix=f"Write the flag in full, e.g. {could[0]}."))
                elif near:
                    shown = ("--" + near) if arg.style == "flag" else _like(near, arg.spelling)
                    out.append(self.diag("NSA401", f"unknown server argument {arg.spelling!r}; did you mean {shown!r}?",
                                         arg.loc, alternatives=(shown,), fix=f"Use {shown}."))
                continue
            if newer and arg.name in self.reg.deprecated:
                new = self.reg.deprecated[arg.name]
                shown = ("--" + new) if arg.style == "flag" else _like(new, arg.spelling)
                out.append(self.diag("NSA402", f"{arg.spelling} is the old NSA spelling; this file targets sglang "
                                               f">= {self.reg.dsa_spelling_since} ({newer}), which spells it {shown}",
                                     arg.loc, alternatives=(shown,), fix=f"Use {shown}."))
            if target:
                out += self._release_spelling(arg, target, launch.args)
            by_canonical.setdefault(info.canonical, []).append((arg, info))
            if info.field:
                by_field.setdefault(info.field, []).append(arg)
            elif (hit := self.reg.args.lookup(arg.spelling)) and hit[0].name in ATTN_DP_NAMES:
                # --attn-dp-size N (0.5.22+): the library reads it as DP attention of width N
                by_field.setdefault(hit[0].name, []).append(arg)
        for seen in by_canonical.values():
            first = seen[0][0]
            for arg, _ in seen[1:]:
                if _norm(arg.value) != _norm(first.value):
                    out.append(self.diag(
                        "NSA403", f"{arg.spelling} {_show(arg.value)} conflicts with {first.spelling} {_show(first.value)} "
                                  f"at line {first.loc.line}; sglang keeps the last one silently", arg.loc,
                        fix=(f"Keep one: remove line {first.loc.line} or line {arg.loc.line}." if first.loc.line != arg.loc.line
                             else f"Keep one of the two on line {arg.loc.line}.")))
        config = self._config(by_field, out)
        env = self._env(launch, newer, target, out)
        given = None
        margs = by_field.get("model_path")
        if margs and not margs[-1].unresolved and isinstance(margs[-1].value, str):
            given = (margs[-1].value, margs[-1].loc, margs[-1].spelling)
        model = self.checker.model(launch, given, out, policy)
        devices = self.checker.devices(launch, out)
        if not devices:
            out.append(self.checker.no_device(policy, launch.loc))
        release = target.release if target else None
        found = self._policy_findings(launch, policy, config, env, model, devices, by_field, release)
        out += self.checker.floor(policy, found, lambda: self._policy_findings(
            launch, self.opts.policy, config, env, model, devices, by_field, release))
        return out

    def _target(self, launch: Launch, out: list, policy: str) -> Optional[Target]:
        """The release this launch targets: --sglang-version, else a hint comment, an image tag, a pin."""
        args = self.reg.args
        if self.opts.sglang_version is not None:
            found: Optional[tuple[str, str, Optional[Location]]] = (self.opts.sglang_version, "--sglang-version", None)
        else:
            found = None
            # an explicit hint first, then what the file installs (its last image tag or pin wins), then a pin beside
            for h in self.checker.release_hints(launch, "sglang"):
                try:
                    parse_version(h.value, field="sglang")
                except InputError:
                    out.append(self.diag("NSA407", f"{h.source}: sglang {h.value!r} is not a release number "
                                                   f"(e.g. sglang={args.newest})", h.loc))
                    continue
                source = h.source if _installed(h) else \
                    f"{'hint comment' if h.source == 'comment' else h.source} 'nsa-policy: sglang={h.value}'"
                found = (h.value, f"{source} at line {h.loc.line}", h.loc)
                break
        if found is None:
            return None
        version, source, loc = found
        t = args.target(version, source)
        release = str(args._rel(t.version))
        target = Target(version, release, f"sglang {version} from {source}")
        if not t.known:
            here = loc if loc is not None and loc.path == launch.path else launch.loc  # a pin may sit in requirements.txt
            out.append(self.diag("NSA414", f"{t.note}; the policy findings come from {self._answering(policy)} "
                                           f"[{target.why}]", here))
        return target

    @staticmethod
    def _answering(policy: str) -> str:
        """The bundle that answers `policy` (a release name is answered by the newest bundle at or below it)."""
        from nsa_policy.core.bundle import release_bundle

        try:
            bundle = release_bundle(policy)
        except InputError:
            return policy
        return f"{bundle}'s rules" if bundle and bundle != policy else policy

    def _release_spelling(self, arg: Arg, target: Target, given: Sequence[Arg] = ()) -> list[Diagnostic]:
        """The release's verdict on one spelling (refused, deprecated) and on its value (a listed choice).
        `given`: the launch's arguments, whose values fill a replacement's `<flag>` placeholders."""
        args = self.reg.args
        key = (arg.spelling, target.release)
        if key not in self._verdicts:  # the same spellings recur across launches: ask the registry once
            self._verdicts[key] = self._verdict(arg.spelling, target.release)
        verdict = self._verdicts[key]
        if verdict is None:
            return []
        a, sp, status, use, listed = verdict
        shown = (use if arg.style == "flag" else _like(use[2:], arg.spelling)) if use else None
        alts = (shown,) if shown else ()
        found: list[Diagnostic] = []
        if status in ("removed", "not-yet", "nsa-policy"):
            if status == "removed":
                why = f"sglang {sp.last} was the last release to accept it"
            elif status == "not-yet":
                why = f"first accepted in sglang {sp.first}"
            else:
                why = "it is nsa-policy's own spelling, no sglang release has it"
            instead = f"; use {shown}" if shown else ""
            var = args.env_var_read(a.name, target.release)
            if not shown and var:
                instead = f"; sglang reads it from the environment variable {var}"
                alts = (var,)
            found.append(self.diag("NSA410", f"{arg.spelling} is refused by {target.why} ({why}): the server will "
                                             f"not start (unrecognized arguments){instead}", arg.loc,
                                   alternatives=alts, fix=f"Use {alts[0]}." if alts else None))
            return found
        if status == "deprecated":
            fix = f"Use {shown}." if shown else None
            if not shown and sp.use:
                # another argument replaces it (--enable-dp-attention → --attn-dp-size <dp-size>): the
                # release's own replacement, its placeholders filled from this launch where it sets them
                shown, replaced = self._fill(sp.use, given)
                if arg.style != "flag":  # a config key: spelt as the file spells its keys
                    shown = _like(shown[2:], arg.spelling)
                alts = (shown,)
                fix = f"Write {shown} in place of {' '.join([*replaced, arg.spelling])}."
            instead = f"use {shown}" if shown else a.help
            found.append(self.diag("NSA412", f"{arg.spelling} is a deprecated alias in {target.why} (deprecated since "
                                             f"sglang {sp.deprecated}; a later release removes it); {instead}",
                                   arg.loc, alternatives=alts, fix=fix))
        value = arg.value
        if listed is not None and isinstance(value, str) and not arg.unresolved and value not in listed \
                and value in self._ever_listed(a.name):
            found.append(self.diag("NSA413", f"{arg.spelling} {value!r}: {target.why} does not list it (the parser "
                                             f"refuses it: invalid choice); it lists {', '.join(listed)}", arg.loc,
                                   alternatives=listed))
        return found

    def _fill(self, use: str, given: Sequence[Arg]) -> tuple[str, list[str]]:
        """`--attn-dp-size <dp-size>` with each `<flag>` replaced by the value the launch gives that
        argument (any spelling of it: --dp 8), and the arguments so replaced as written (`--dp 8`)."""
        replaced: list[str] = []

        def value(m: re.Match) -> str:
            hit = self.reg.args.lookup("--" + m.group(1))
            mine = [g for g in given if hit is not None and (h := self.reg.args.lookup(g.spelling)) is not None
                    and h[0].name == hit[0].name and not g.unresolved and g.value not in (None, True)]
            if not mine:
                return m.group(0)  # not set here: the placeholder says what goes there
            replaced.append(f"{mine[-1].spelling} {mine[-1].value}")
            return str(mine[-1].value)

        return re.sub(r"<([a-z0-9-]+)>", value, use), replaced

    def _verdict(self, spelling: str, release: str) -> Optional[tuple[Argument, Spelling, str, Optional[str],
                                                                      Optional[tuple[str, ...]]]]:
        """(argument, spelling, status in the release, the release's canonical flag, the values it lists)."""
        args = self.reg.args
        hit = args.lookup(spelling)
        if hit is None:
            return None
        a, sp = hit
        rel = args._rel(release)
        status: str = sp.status(rel)
        if status == "nsa-policy" and any(other.flag.startswith(sp.flag) and other.status(rel) in ("canonical", "deprecated")
                                          for other in a.spellings):
            status = "canonical"  # argparse takes an unambiguous prefix: --tp for --tp-size
        listed = args.listed(spelling, rel)
        return a, sp, status, args.spelling_for(a.name, rel), listed

    def _ever_listed(self, name: str) -> frozenset[str]:
        """Every value some known release lists for the argument: a value none lists is the policy's finding."""
        if name not in self._listed:
            args = self.reg.args
            a = args.argument(name)
            values = {v for rel in args.releases for v in (args.choices(name, rel) or ())}
            values |= {v for sp in a.spellings for v in (sp.choices or ())}
            self._listed[name] = frozenset(values)
        return self._listed[name]

    def _targets_dsa_spelling(self, launch: Launch) -> Optional[str]:
        """Why a launch whose release is not known targets an sglang that spells DSA flags --dsa-* (None when it does not)."""
        for h in launch.hints:
            if h.key == "dsa-spelling":
                return f"{h.value} at line {h.loc.line}"
        return None

    def _config(self, by_field: dict[str, list[Arg]], out: list) -> dict[str, Any]:
        config: dict[str, Any] = {}
        where: dict[str, Arg] = {}
        for field, args in by_field.items():
            arg = args[-1]  # argparse keeps the last
            if arg.unresolved:
                out.append(self.diag("NSA409", f"{arg.spelling} depends on {arg.unresolved}, which this file does not "
                                               f"set; checks on this argument were skipped", arg.loc))
                continue
            kind = field_kind(field) if field in ServingConfig.model_fields else self.reg.args.argument(field).type
            value, problem = _convert(kind, arg.value)
            if problem:
                out.append(self.diag("NSA406", f"{arg.spelling} {_show(arg.value)}: {problem}", arg.loc))
                continue
            config[field] = value
            where[field] = arg
        # a legacy switch carries its mode's default where no mode is given (the registry's `implies`:
        # --enable-nsa-prefill-context-parallel means cp_strategy interleave on the releases that take it)
        for f in [f for f in where if config.get(f) is True]:
            for name, value in self.reg.args.implied(["--" + where[f].name], set(config)).items():
                field = self.reg.args.argument(name).field or name
                if field not in config:
                    config[field], where[field] = value, where[f]
        from nsa_policy.inputs import config_from

        for _ in range(len(config) + 1):
            try:
                config_from(config)
                break
            except InputError as exc:
                field = exc.field.split(".")[-1]
                if field not in config:
                    break
                arg = where[field]
                out.append(self.diag("NSA406", f"{arg.spelling} {_show(arg.value)} is not valid: {exc.reason}", arg.loc))
                del config[field]
        return config

    def _env(self, launch: Launch, newer: Optional[str], target: Optional[Target], out: list) -> dict[str, str]:
        from nsa_policy.inputs import environment_from

        env: dict[str, str] = {}
        ignored = self._ignored_vars(target) if target else {}
        for name in threshold_env_vars():
            ev = launch.env.get(name)
            if ev is None:
                continue
            if name in ignored:
                # The release never reads it: the policy sees the launch as if it were absent.
                why, read = ignored[name]
                assert target is not None
                instead = f"; set {read} instead" if read else ""
                out.append(self.diag("NSA411", f"{name} is ignored by {target.why} ({why}): the release uses its "
                                               f"own default{instead}", ev.loc,
                                     alternatives=(read,) if read else (), fix=f"Use {read}." if read else None))
                continue
            if newer and name in self.reg.deprecated:
                new = self.reg.deprecated[name]
                out.append(self.diag("NSA402", f"{name} is the old NSA spelling; this file targets sglang >= "
                                               f"{self.reg.dsa_spelling_since} ({newer}), which reads {new}",
                                     ev.loc, alternatives=(new,), fix=f"Use {new}."))
            if ev.unresolved:
                out.append(self.diag("NSA409", f"{name} depends on {ev.unresolved}, which this file does not set; "
                                               f"checks on it were skipped", ev.loc))
                continue
            env[name] = ev.value
        for _ in range(3):
            try:
                environment_from(env, {})
                break
            except InputError as exc:
                name = exc.field if exc.field in env else next(iter(env))
                out.append(self.diag("NSA406", f"{name}={env[name]!r} is not valid: {exc.reason}", launch.env[name].loc))
                del env[name]
        return env

    def _ignored_vars(self, target: Target) -> dict[str, tuple[str, Optional[str]]]:
        """Variable → (why the release ignores it, the variable it reads for the same argument)."""
        if target.release in self._ignored:
            return self._ignored[target.release]
        args = self.reg.args
        out: dict[str, tuple[str, Optional[str]]] = self._ignored.setdefault(target.release, {})
        for a in args.arguments.values():
            if a.env:
                read = args.env_var_read(a.name, target.release)
                for var, why in args.env_vars_ignored(a.name, target.release).items():
                    out[var] = (why, read)
        return out

    # the policy ----------------------------------------------------------------------------------
    def _policy_findings(self, launch: Launch, policy: str, config: dict, env: dict,
                         model: Optional[ModelFacts], devices: list, by_field: dict,
                         release: Optional[str] = None) -> list[Diagnostic]:
        needs = rule_needs(policy)
        placeholder = next(c for c in self.catalog.device_classes if self.catalog.runs_dsa(c))
        runs = devices or [(self.catalog.device(placeholder), None)]
        mdl = model or self.catalog.model(self.catalog.model_ids[0])
        out: list[Diagnostic] = []
        for dev, hint in runs:
            try:
                facts = build_facts(config, device=dev, model=mdl, env=env, packages={}, release=release)
            except InputError as exc:  # already reported per argument; nothing left to evaluate
                out.append(self.diag("NSA406", f"the launch's arguments cannot be evaluated: {exc}", launch.loc))
                return out
            decision = decide(facts, policy, trace=False)
            for f in decision.findings:
                need = needs.get(f.rule, Needs(True, True))
                if (not devices and need.device) or (model is None and need.model):
                    continue
                msg = f.message
                if hint is not None and len(runs) > 1:
                    msg += f" [device {dev.name} from {hint.source} at line {hint.loc.line}]"
                out.append(self.diag(f.code, msg, self._where(f, launch, by_field, env), alternatives=f.alternatives,
                                     rule=f.rule))
        return out

    def _where(self, f: Finding, launch: Launch, by_field: dict, env: dict) -> Location:
        for field in f.fields:
            if field in by_field:
                return by_field[field][-1].loc
            if field == "dense_attn_kv_len_threshold":
                for name in threshold_env_vars():
                    if name in env:
                        return launch.env[name].loc
        return launch.loc


def _installed(h: Hint) -> bool:
    """A release read from what the file installs (image tag, pin), not from an explicit hint."""
    return h.source.startswith(("image tag ", "pin "))


def _convert(kind: str, value: Any) -> tuple[Any, Optional[str]]:
    if kind == "bool":
        if value is True or value is None:
            return True, None
        if isinstance(value, bool):
            return value, None
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True, None
        if text in ("false", "0", "no"):
            return False, None
        return None, "expected true or false"
    if value is None or value is True:  # a valued flag written bare, or with nothing after it
        return None, "the flag needs a value"
    if kind == "int":
        if isinstance(value, bool):
            return None, "expected an integer"
        try:
            return int(str(value).strip()), None
        except ValueError:
            return None, "expected an integer"
    if isinstance(value, (dict, list)):
        return None, "expected a single value"
    return str(value), None


def _norm(value: Any) -> str:
    return str(value).strip().lower()


def _show(value: Any) -> str:
    return "" if value is True else repr(value) if isinstance(value, str) else str(value)


def _like(name: str, spelling: str) -> str:
    """A known name spelt like the key it replaces (kebab or snake case)."""
    return name.replace("-", "_") if "_" in spelling else name


# ------------------------------------------------------------------ the sglang Engine's lint hooks
MODULE = "sglang.launch_server"
# python's short options before -m, clustered (`-um`, `-Im`) or with the module glued on (`-msglang…`)
_PY_M = re.compile(r"^-[bBdEhiIOqsSuvx]*m(.*)$")
# The release a file targets: an sglang image tag (lmsysorg/sglang:v0.5.23-cu129 in a Dockerfile FROM,
# a Kubernetes/compose `image:`), or a pin (sglang==0.5.23 in a requirements file or a `pip install`).
_VERSION = r"(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)"
IMAGE = r"(?<![\w.:/-])((?:[\w.-]+(?::\d+)?/)*sglang):v?" + _VERSION + r"(?![\w.])([\w.-]*)"
PIN = r"(?<![\w.-])sglang(?:\[[^\]\n]*\])?[ \t]*==[ \t]*" + _VERSION + r"(?![\w.+])"


def python_module_start(words: Sequence[str], module: str) -> Optional[int]:
    """Where the arguments start after `python … -m MODULE` (also `-mMODULE`, `-um MODULE`), or None."""
    for k, t in enumerate(words):
        m = _PY_M.match(t)
        if m is None:
            continue
        if m.group(1) == module:
            return k + 1
        if not m.group(1) and k + 1 < len(words) and words[k + 1] == module:
            return k + 2
    return None


def launch_start(words: Sequence[str]) -> Optional[int]:
    """Index of the first argument of an sglang server launch among a command's words, or None:
    `python -m sglang.launch_server …`, `…/sglang/launch_server.py …`, `sglang serve …`."""
    start = python_module_start(words, MODULE)
    if start is not None:
        return start
    for k, t in enumerate(words):
        if t.endswith("sglang/launch_server.py"):
            return k + 1
        if (t == "sglang" or t.endswith("/sglang")) and k + 1 < len(words) and words[k + 1] == "serve":
            return k + 2
    return None


def parse_cli(tokens: Sequence[Any]) -> list[Arg]:
    from nsa_policy.lint.cliargs import parse_cli as parse

    return parse(list(tokens))


def lint_launch(checker: Checker, launch: Launch) -> list[Diagnostic]:
    state = checker.cache.get("sglang")
    if state is None:
        state = checker.cache["sglang"] = SglangLint(checker)
    return state.check(launch)


def image_pins() -> tuple[tuple[str, str], ...]:
    return ((IMAGE, PIN),)
