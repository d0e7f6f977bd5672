"""Rule bundles: schema-checked YAML in rules/policy/<bundle>/, with `extends`, compiled once.

A bundle is bundle.yaml plus stage files. Stages run in a fixed order; inside a stage, rules run
in file order. A bundle that extends another inherits its rules; a rule with the same id replaces
the parent's in place, `drop` removes parent rules, and new rules go at the stage's end unless
they say `before:`/`after:` an id.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from nsa_policy.catalog.store import KV_DTYPES, Catalog, load_catalog
from nsa_policy.catalog.codes import CodeRegistry, load_codes
from nsa_policy.engine.conditions import ConditionError, compile_condition
from nsa_policy.engine.decision import OUTPUT_FIELDS
from nsa_policy.errors import InputError, RuleFileError
from nsa_policy.engine.namespace import all_paths, known_path
from nsa_policy.catalog.paths import policy_dir
from nsa_policy.engine.schema_load import validate_doc
from nsa_policy.errors import closest
from nsa_policy.engine.yaml_lines import line_of, load_yaml

STAGES = ("input", "not_dsa", "kv_cache", "backends", "threshold", "page_size", "layout", "validate")
BUNDLE_FILE = "bundle.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmitSpec(_Strict):
    code: str
    message: str
    fields: list[str] = []
    alternatives: Optional[dict[str, Any]] = None
    suggest: Optional[str] = Field(default=None, description="fact path whose value gets a 'did you mean'")


class RuleSpec(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$")
    description: str
    when: Optional[dict[str, Any]] = None
    set: Optional[dict[str, Any]] = None
    overwrite: bool = False
    emit: Optional[EmitSpec] = None
    evidence: list[str] = []
    before: Optional[str] = None
    after: Optional[str] = None
    wins_over: list[str] = Field(default=[], description=(
        "later rules of the same stage (ids or fnmatch patterns) this rule deliberately takes precedence over "
        "where both match; `nsa-policy check` reports any other order-dependent outputs"))


class StageFile(_Strict):
    stage: Literal[STAGES]  # type: ignore[valid-type]
    drop: list[str] = []
    rules: list[RuleSpec] = []


class BundleFile(_Strict):
    name: str
    description: str
    extends: Optional[str] = None
    compat: bool = Field(default=False, description="compatibility bundles may overwrite outputs")
    abstract: bool = Field(default=False, description="a base that only other bundles extend")
    source: Optional[str] = None


@dataclass(frozen=True)
class CompiledRule:
    id: str
    stage: str
    description: str
    evidence: tuple[str, ...]
    origin: str  # file:line
    check: Callable
    explain: Callable
    reads: tuple[str, ...]
    sets: tuple[tuple[str, Any], ...]  # (output, value spec)
    overwrite: bool
    emit: Optional[EmitSpec]
    level: Optional[str]
    message_parts: tuple  # compiled template
    spec: RuleSpec = field(repr=False, compare=False)
    # The condition split for speed: top-level device.* tests (decided once per device) and the rest.
    device_check: Optional[Callable] = field(default=None, repr=False, compare=False)
    rest_check: Optional[Callable] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class CompiledBundle:
    name: str
    description: str
    compat: bool
    chain: tuple[str, ...]
    digest: str
    stages: dict[str, tuple[CompiledRule, ...]]
    files: tuple[str, ...]
    source: Optional[str]

    @property
    def rules(self) -> list[CompiledRule]:
        return [r for s in STAGES for r in self.stages.get(s, ())]

    def rule(self, rule_id: str) -> CompiledRule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise InputError("rule", rule_id, [r.id for r in self.rules])


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_.\-<>]*)\}")
ALTERNATIVE_KINDS = ("values", "backends", "kv_dtypes", "device_classes", "backends_or_kv_dtypes", "parallel",
                     "catalog_backends", "sglang_choices")


def _compile_message(text: str, err: Callable[[str], Exception]) -> tuple:
    parts: list[Any] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        parts.append(text[pos:m.start()])
        name = m.group(1)
        if name != "alternatives" and not known_path(name):
            raise err(f"message placeholder {{{name}}} is not a fact; did you mean "
                      f"{closest(name, all_paths())!r}?")
        parts.append((name,))
        pos = m.end()
    parts.append(text[pos:])
    return tuple(parts)


def _check_value_spec(out: str, value: Any, err: Callable[[str], Exception]) -> None:
    if isinstance(value, dict):
        if set(value) == {"fact"}:
            if not known_path(value["fact"]):
                raise err(f"set.{out}: unknown fact {value['fact']!r}")
            return
        if set(value) == {"first_valid"}:
            fv = value["first_valid"]
            if not (isinstance(fv, dict) and set(fv) == {"phase", "candidates"} and fv["phase"] in ("prefill", "decode")
                    and isinstance(fv["candidates"], list)):
                raise err(f"set.{out}: first_valid takes {{phase: prefill|decode, candidates: [backend, …]}}")
            return
        raise err(f"set.{out}: a value is a literal, {{fact: path}} or {{first_valid: …}}")


def list_bundles() -> list[str]:
    root = policy_dir()
    return sorted(p.name for p in root.iterdir() if (p / BUNDLE_FILE).is_file())


def _bundle_path(name_or_dir: str) -> Path:
    # A shipped bundle's bare name always means the shipped bundle: a folder of the same name in the
    # working directory (say, one a pull request adds) must be named as a path (./default) to be used.
    cand = policy_dir() / name_or_dir
    if "/" not in name_or_dir and "\\" not in name_or_dir and (cand / BUNDLE_FILE).is_file():
        return cand
    p = Path(name_or_dir)
    if (p / BUNDLE_FILE).is_file():
        return p
    if p.exists():
        raise InputError("policy", name_or_dir, hint=f"folder has no {BUNDLE_FILE}")
    release = release_bundle(name_or_dir)
    if release is not None:
        return policy_dir() / release
    raise InputError("policy", name_or_dir, [b for b in list_bundles()], hint="not a bundle name or folder")


# sglang-<PEP 440 release>: a compatibility bundle named after the sglang release it reproduces.
_RELEASE_NAME = re.compile(r"^sglang-(\d+(?:\.\d+)+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?)$")


def release_bundle(name: str) -> Optional[str]:
    """The shipped bundle that answers for sglang release `name`: the newest sglang-<version> bundle at or below it.

    Only releases whose start-up policy changed ship a bundle, so `sglang-0.5.23` is answered by
    `sglang-0.5.22` and `sglang-0.5.10.post1` by `sglang-0.5.10`. None when `name` is not of the form
    sglang-<version>; an InputError when no bundle is that old. The bundle's own name (the decision's
    `policy`) shows which one answered."""
    from nsa_policy.versions import parse_version

    m = _RELEASE_NAME.match(name.strip())
    if m is None:
        return None
    want = parse_version(m.group(1), field="policy")
    shipped = [(parse_version(r.group(1)), b) for b in list_bundles() if (r := _RELEASE_NAME.match(b))]
    below = [(v, b) for v, b in shipped if v <= want]
    if not below:
        oldest = min(shipped)[1] if shipped else None
        raise InputError("policy", name, list_bundles(),
                         hint=f"no compatibility bundle reproduces sglang {want} or older"
                              + (f"; the oldest release bundle is {oldest} (sglang-pre-21783 is 0.5.10rc0's policy)"
                                 if oldest else ""))
    return max(below)[1]


class _Loader:
    def __init__(self, catalog: Catalog, codes: CodeRegistry):
        self.catalog = catalog
        self.codes = codes

    def load(self, name_or_dir: str, seen: tuple[str, ...] = ()) -> tuple[BundleFile, dict, list[Path]]:
        """Return the bundle header, stage → ordered rule list of (RuleSpec, data, path), files read."""
        folder = _bundle_path(name_or_dir)
        head_path = folder / BUNDLE_FILE
        head = validate_doc(BundleFile, load_yaml(head_path), head_path)
        key = str(folder.resolve())
        if key in seen:
            raise RuleFileError(str(head_path), None, f"extends cycle: {' → '.join(seen + (key,))}")
        if head.extends:
            parent_dir = folder.parent / head.extends
            ref = str(parent_dir) if (parent_dir / BUNDLE_FILE).is_file() else head.extends
            try:
                _, stages, files = self.load(ref, seen + (key,))
            except InputError as exc:
                raise RuleFileError(str(head_path), None, f"extends: {exc}") from None
        else:
            stages, files = {s: [] for s in STAGES}, []
        files = files + [head_path]
        for path in sorted(folder.glob("*.yaml")):
            if path.name == BUNDLE_FILE:
                continue
            data = load_yaml(path)
            doc = validate_doc(StageFile, data, path)
            files.append(path)
            rules = stages[doc.stage]
            for rid in doc.drop:
                idx = next((i for i, (r, _, _) in enumerate(rules) if r.id == rid), None)
                if idx is None:
                    raise RuleFileError(str(path), line_of(data, ["drop"]),
                                        f"drop: no inherited rule {rid!r} in stage {doc.stage!r}")
                rules.pop(idx)
            for i, rule in enumerate(doc.rules):
                rdata = data["rules"][i]
                entry = (rule, rdata, path)
                existing = next((j for j, (r, _, _) in enumerate(rules) if r.id == rule.id), None)
                if existing is not None and existing_from_same_file(rules[existing], path):
                    raise RuleFileError(str(path), rdata.line, f"duplicate rule id {rule.id!r}")
                if existing is not None:
                    rules[existing] = entry
                elif rule.before or rule.after:
                    anchor = rule.before or rule.after
                    j = next((j for j, (r, _, _) in enumerate(rules) if r.id == anchor), None)
                    if j is None:
                        raise RuleFileError(str(path), rdata.line, f"before/after: no rule {anchor!r} in stage {doc.stage!r}")
                    rules.insert(j if rule.before else j + 1, entry)
                else:
                    rules.append(entry)
        return head, stages, files

    def compile_rule(self, stage: str, rule: RuleSpec, data: Any, path: Path, compat: bool) -> CompiledRule:
        def err(msg: str, loc: tuple = ()) -> RuleFileError:
            return RuleFileError(str(path), line_of(data, list(loc)) or getattr(data, "line", None),
                                 f"rule {rule.id!r}: {msg}")

        try:
            check, explain, reads = compile_condition(rule.when, ("when",))
            device_part = {k: v for k, v in (rule.when or {}).items() if str(k).startswith("device.")}
            rest_part = {k: v for k, v in (rule.when or {}).items() if not str(k).startswith("device.")}
            device_check = compile_condition(device_part)[0] if device_part else None
            rest_check = compile_condition(rest_part)[0] if rest_part else None
        except ConditionError as exc:
            raise err(str(exc), exc.path) from None
        for p in reads:
            if not known_path(p):
                raise err(f"unknown fact {p!r}; did you mean {closest(p, all_paths())!r}?", ("when",))
        sets = []
        for out, value in (rule.set or {}).items():
            if out not in OUTPUT_FIELDS:
                raise err(f"set: unknown output {out!r}; valid: {', '.join(OUTPUT_FIELDS)}", ("set", out))
            _check_value_spec(out, value, lambda m: err(m, ("set", out)))
            for b in _literal_backends(out, value):
                if b not in self.catalog.backends:
                    raise err(f"set.{out}: unknown backend {b!r}; did you mean "
                              f"{closest(b, self.catalog.backend_names)!r}?", ("set", out))
            sets.append((out, value))
        if rule.overwrite and not compat:
            raise err("overwrite: true is allowed only in compatibility bundles (compat: true)", ("overwrite",))
        if stage == "validate" and sets:
            raise err("validate rules only emit findings; they cannot set outputs", ("set",))
        level, parts = None, ()
        if rule.emit:
            if rule.emit.code not in self.codes.codes:
                raise err(f"emit.code {rule.emit.code!r} is not in rules/codes.yaml; closest: "
                          f"{closest(rule.emit.code, self.codes.codes)!r}", ("emit", "code"))
            level = self.codes.codes[rule.emit.code].level
            parts = _compile_message(rule.emit.message, lambda m: err(m, ("emit", "message")))
            alt = rule.emit.alternatives
            if alt is not None and (len(alt) != 1 or next(iter(alt)) not in ALTERNATIVE_KINDS):
                raise err(f"emit.alternatives takes one of {ALTERNATIVE_KINDS}", ("emit", "alternatives"))
            if rule.emit.suggest and not known_path(rule.emit.suggest):
                raise err(f"emit.suggest: unknown fact {rule.emit.suggest!r}", ("emit", "suggest"))
        if not sets and not rule.emit:
            raise err("a rule must `set` outputs or `emit` a finding")
        return CompiledRule(id=rule.id, stage=stage, description=rule.description, evidence=tuple(rule.evidence),
                            origin=f"{_display(path)}:{getattr(data, 'line', '?')}", check=check, explain=explain,
                            reads=tuple(reads), sets=tuple(sets), overwrite=rule.overwrite, emit=rule.emit,
                            level=level, message_parts=parts, spec=rule,
                            device_check=device_check, rest_check=rest_check)


def _display(path: Path) -> str:
    """rules/policy/default/30-backends.yaml rather than an absolute path, when inside the shipped rules."""
    from nsa_policy.catalog.paths import rules_dir

    try:
        return "rules/" + str(path.resolve().relative_to(rules_dir().resolve()))
    except ValueError:
        return str(path)


def existing_from_same_file(entry: tuple, path: Path) -> bool:
    return entry[2] == path


def _literal_backends(out: str, value: Any) -> list[str]:
    if out not in ("prefill_backend", "decode_backend"):
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict) and "first_valid" in value:
        return list(value["first_valid"].get("candidates", []))
    return []


def compile_bundle(name_or_dir: str, catalog: Optional[Catalog] = None, codes: Optional[CodeRegistry] = None) -> CompiledBundle:
    catalog = catalog or load_catalog()
    codes = codes or load_codes()
    loader = _Loader(catalog, codes)
    head, stages, files = loader.load(name_or_dir)
    if head.abstract:
        raise InputError("policy", name_or_dir, [b for b in list_bundles() if not _is_abstract(b)],
                         hint="an abstract base; pick a concrete bundle")
    compiled: dict[str, tuple[CompiledRule, ...]] = {}
    ids: dict[str, str] = {}
    for stage in STAGES:
        out = []
        for rule, data, path in stages[stage]:
            if rule.id in ids:
                raise RuleFileError(str(path), getattr(data, "line", None),
                                    f"rule id {rule.id!r} already used in stage {ids[rule.id]!r}")
            ids[rule.id] = stage
            out.append(loader.compile_rule(stage, rule, data, path, head.compat))
        compiled[stage] = tuple(out)
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    chain = tuple(dict.fromkeys(str(f.parent.name) for f in files))
    return CompiledBundle(name=head.name, description=head.description, compat=head.compat, chain=chain,
                          digest=h.hexdigest()[:16], stages=compiled, files=tuple(str(f) for f in files),
                          source=head.source)


def _is_abstract(name: str) -> bool:
    head = validate_doc(BundleFile, load_yaml(policy_dir() / name / BUNDLE_FILE), policy_dir() / name / BUNDLE_FILE)
    return head.abstract


def concrete_bundles() -> list[str]:
    return [b for b in list_bundles() if not _is_abstract(b)]


@lru_cache(maxsize=16)
def _cached(name_or_dir: str) -> CompiledBundle:
    return compile_bundle(name_or_dir)


_BY_ARG: dict[str, CompiledBundle] = {}


def get_bundle(name_or_dir: str) -> CompiledBundle:
    """Compile once per bundle (by name, or by resolved folder path)."""
    hit = _BY_ARG.get(name_or_dir)
    if hit is not None:
        return hit
    _BY_ARG[name_or_dir] = bundle = _get_bundle(name_or_dir)
    return bundle


def _get_bundle(name_or_dir: str) -> CompiledBundle:
    p = Path(name_or_dir)
    key = str(p.resolve()) if (p / BUNDLE_FILE).is_file() else name_or_dir
    return _cached(key)


__all__ = ["STAGES", "CompiledBundle", "CompiledRule", "compile_bundle", "get_bundle", "list_bundles",
           "concrete_bundles", "release_bundle", "KV_DTYPES"]
