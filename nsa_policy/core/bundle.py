"""Rule bundles: schema-checked YAML in rules/policy/<bundle>/, with `extends`, compiled once.

A bundle is bundle.yaml plus stage files. Stages run in a fixed order; inside a stage, rules run
in file order. A bundle that extends another inherits its rules; a rule with the same id replaces
the parent's in place, `drop` removes parent rules, and new rules go at the stage's end unless
they say `before:`/`after:` an id.

The compiled rule is the public interface between rules and their consumers (the evaluator, lint,
verify, render, docs). A `CompiledRule` says:

- what it is: `id`, `stage`, `description`, `origin` (file:line), `evidence`;
- what it reads: `reads` (fact paths of its condition), `all_reads` (also its finding's message,
  suggestion and alternatives, and the facts its values come from), `inputs` (which of device,
  model, config, env, packages its outcome depends on: `namespace.inputs_of`);
- what it can set: `outputs`, and `sets` as (output, `ValueSpec`) pairs; `ValueSpec.value(ns,
  catalog)` is the value it would set given a namespace;
- what it emits: `emit` (a `FindingSpec`: `code`, `level`, `message` template, `fields`,
  `alternatives` (kind, argument, facts read; see `engine.alternatives`), `suggest`), or None;
  `code` and `level` are shortcuts;
- its condition: `when` as written (for analyses), `check(ns)`/`explain(ns)` compiled;
- `overwrite`, `wins_over` and `reads_before`.

Consumers read these and nothing else: no message parsing, no fact-name slicing, no private helpers.
"""

import dataclasses
import hashlib
import re
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, NamedTuple, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nsa_policy.base.errors import InputError, NsaPolicyError, RuleFileError, closest
from nsa_policy.base.paths import policy_dir
from nsa_policy.base.schema_load import load_doc
from nsa_policy.base.yaml_lines import line_of
from nsa_policy.catalog.codes import CodeRegistry, load_codes
from nsa_policy.catalog.store import KV_DTYPES, Catalog, load_catalog
from nsa_policy.core.alternatives import ANY_PACKAGE, Alternatives, compile_alternatives
from nsa_policy.core.conditions import Check, ConditionError, Explain, compile_condition
from nsa_policy.core.decision import OUTPUT_FIELDS, Level, ProvenanceLabel
from nsa_policy.core.namespace import all_paths, inputs_of, known_path
from nsa_policy.engines import DEFAULT as DEFAULT_ENGINE

STAGES = ("input", "not_dsa", "kv_cache", "backends", "threshold", "page_size", "layout", "validate")
BUNDLE_FILE = "bundle.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


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
    label: Optional[ProvenanceLabel] = Field(default=None, description="the provenance label of the outputs it sets")
    emit: Optional[EmitSpec] = None
    evidence: list[str] = []
    before: Optional[str] = None
    after: Optional[str] = None
    wins_over: list[str] = Field(default=[], description=(
        "later rules of the same stage (ids or fnmatch patterns) this rule deliberately takes precedence over "
        "where both match; `nsa-policy check` reports any other order-dependent outputs"))
    reads_before: list[str] = Field(default=[], description=(
        "later rules (ids or fnmatch patterns) that change an output this rule reads after it has read it, as the "
        "engine itself reads the value at that step; `nsa-policy check` reports any other stale read"))


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
    engine: str = Field(default=DEFAULT_ENGINE, description="the serving engine its rules describe: a registered engine")

    @field_validator("engine", mode="after")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        from nsa_policy import engines

        if value not in engines.names():
            raise ValueError(f"not a registered engine; valid: {', '.join(engines.names())}")
        return value
    # An engine release applies its DSA start-up code only to the architectures on its own lists; a DSA
    # model outside them starts as a dense model there (no DSA setting applies). Inherited via extends.
    dsa_architectures: Optional[list[str]] = Field(
        default=None, description="architectures this engine release runs its DSA start-up defaults for "
                                  "(unset: every DSA architecture of the catalog)")
    family_only_architectures: Optional[list[str]] = Field(
        default=None, description="architectures that get only the model-family overrides (attention backend, "
                                  "page size), not the KV dtype, backend and threshold defaults")
    left_as_given: Optional[dict[str, list[str]]] = Field(
        default=None, description="device class -> the outputs this engine release leaves as the user gave them "
                                  "there (e.g. sglang 0.5.12-0.5.19 skip their DSA device block on XPU)")


# ---------------------------------------------------------------- what a rule sets

class ValueSpec:
    """What a rule sets an output to. `value(ns, catalog)` is that value given the facts and the
    outputs so far (None: nothing to set); `reads` the facts it depends on; `source` the
    provenance it gives ("model" when the model alone decides it, else "rule")."""

    __slots__ = ()
    reads: tuple[str, ...] = ()
    source: str = "rule"

    def value(self, ns: Mapping[str, Any], catalog: Catalog) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(ValueSpec):
    """A literal: `set: {page_size: 64}`."""

    literal: Any

    def value(self, ns: Mapping[str, Any], catalog: Catalog) -> Any:
        return self.literal

    def describe(self) -> str:
        return repr(self.literal)


@dataclass(frozen=True)
class FromFact(ValueSpec):
    """Another fact's value: `set: {index_topk: {fact: model.index_topk}}`."""

    fact: str
    reads: tuple[str, ...] = ()
    source: str = "rule"

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", (self.fact,))
        object.__setattr__(self, "source", "model" if inputs_of(self.fact) == {"model"} else "rule")

    def value(self, ns: Mapping[str, Any], catalog: Catalog) -> Any:
        return ns[self.fact]

    def describe(self) -> str:
        return f"the fact {self.fact}"


@dataclass(frozen=True)
class FirstValid(ValueSpec):
    """The first candidate backend the catalog runs here for this phase and the KV dtype decided so far."""

    phase: str
    candidates: tuple[str, ...]
    reads: tuple[str, ...] = ("out.kv_cache_dtype", "device.class", "model.index_topk", ANY_PACKAGE)

    def value(self, ns: Mapping[str, Any], catalog: Catalog) -> Any:
        kv = ns["out.kv_cache_dtype"]
        if kv is None:
            return None
        dev, topk, packages = ns["device.class"], ns["model.index_topk"], ns.packages  # type: ignore[attr-defined]
        for cand in self.candidates:
            if catalog.runs(cand, dev, kv, self.phase, topk, packages):
                return cand
        return None

    def describe(self) -> str:
        return f"the first {self.phase} backend that runs here of {', '.join(self.candidates)}"


class Assignment(NamedTuple):
    output: str
    value: ValueSpec


# ---------------------------------------------------------------- what a rule emits

# A message template, compiled: literal text, and (fact path,) or ("alternatives",) placeholders.
Template = tuple[Union[str, tuple[str]], ...]

@dataclass(frozen=True)
class FindingSpec:
    """A rule's compiled `emit`: the finding it adds when it fires."""

    code: str
    level: Level
    message: str  # the template, with {fact.path} and {alternatives} placeholders
    fields: tuple[str, ...]  # the input fields at fault
    alternatives: Optional[Alternatives]
    suggest: Optional[str]  # a fact whose value gets a "did you mean" among the alternatives
    reads: tuple[str, ...]  # facts of the message, the suggestion and the alternatives
    parts: Template = field(repr=False, compare=False, default=())  # the template, compiled

    def render(self, ns: Mapping[str, Any], alternatives: tuple[str, ...]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, tuple):
                name = part[0]
                if name == "alternatives":
                    out.append(", ".join(alternatives) if alternatives else _none(ns))
                else:
                    v = ns[name]
                    out.append("unset" if v is None else (f"{v:g}" if isinstance(v, float) else str(v)))
            else:
                out.append(part)
        text = "".join(out)
        if self.suggest:
            near = closest(ns[self.suggest], alternatives) if ns[self.suggest] is not None else None
            if near:
                text += f" (did you mean {near!r}?)"
        return text


def _none(ns: Mapping[str, Any]) -> str:
    """An empty alternatives list; where a release is targeted the list holds only what it accepts, so say so."""
    release = ns.get("input.release")
    if release is None:
        return "none"
    from nsa_policy import engines  # lazy: the registry loads the engines' packages

    return f"none that {engines.get(ns.get('config.engine')).title} {release} accepts"


@dataclass(frozen=True)
class CompiledRule:
    id: str
    stage: str
    description: str
    evidence: tuple[str, ...]
    origin: str  # file:line
    check: Check
    explain: Explain
    reads: tuple[str, ...]  # fact paths of the condition
    sets: tuple[Assignment, ...]
    overwrite: bool
    emit: Optional[FindingSpec]
    when: Optional[Mapping[str, Any]] = field(default=None, repr=False, compare=False)  # the condition as written
    label: Optional[str] = None  # the provenance label of the outputs it sets
    wins_over: tuple[str, ...] = ()
    reads_before: tuple[str, ...] = ()  # later rules that change what it read, by design (the engine's order)
    inputs: frozenset[str] = frozenset()  # which of device, model, config, env, packages its outcome depends on
    spec: Optional[RuleSpec] = field(default=None, repr=False, compare=False)  # the rule as written
    # The condition split for speed: top-level device.* tests (decided once per device) and the rest.
    device_check: Optional[Check] = field(default=None, repr=False, compare=False)
    rest_check: Optional[Check] = field(default=None, repr=False, compare=False)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The outputs it can set."""
        return tuple(a.output for a in self.sets)

    @property
    def code(self) -> Optional[str]:
        return self.emit.code if self.emit else None

    @property
    def level(self) -> Optional[Level]:
        return self.emit.level if self.emit else None

    @property
    def all_reads(self) -> tuple[str, ...]:
        """Every fact its outcome reads: the condition, the finding, and the values it sets."""
        more = [p for a in self.sets for p in a.value.reads] + list(self.emit.reads if self.emit else ())
        return tuple(dict.fromkeys(list(self.reads) + more))

    def describe(self) -> dict[str, Any]:
        """A plain, JSON-able summary (for docs and tools)."""
        alt = self.emit.alternatives if self.emit else None
        return {"id": self.id, "stage": self.stage, "origin": self.origin, "description": self.description,
                "reads": list(self.all_reads), "inputs": sorted(self.inputs),
                "sets": {a.output: a.value.describe() for a in self.sets}, "overwrite": self.overwrite,
                "code": self.code, "level": self.level,
                "alternatives": None if alt is None else {"kind": alt.kind, "arg": alt.arg},
                "evidence": list(self.evidence)}


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
    dsa_architectures: Optional[frozenset[str]] = None
    family_only_architectures: frozenset[str] = frozenset()
    left_as_given: Mapping[str, frozenset[str]] = field(default_factory=dict)
    engine: str = DEFAULT_ENGINE  # the serving engine its rules describe (bundle.yaml `engine`)

    def dsa_scope(self, family: Optional[str], architecture: Optional[str]) -> str:
        """'full', 'family_only' or 'none': how much of its DSA start-up code the engine runs for the model."""
        if family is None:
            return "none"
        if architecture in self.family_only_architectures:
            return "family_only"
        if self.dsa_architectures is None or architecture in self.dsa_architectures:
            return "full"
        return "none"

    @property
    def rules(self) -> list[CompiledRule]:
        return [r for s in STAGES for r in self.stages.get(s, ())]

    def rule(self, rule_id: str) -> CompiledRule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise InputError("rule", rule_id, [r.id for r in self.rules])


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_.\-<>]*)\}")


def _compile_message(text: str, err: Callable[[str], Exception]) -> Template:
    parts: list[Union[str, tuple[str]]] = []
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


def _compile_value(out: str, value: Any, err: Callable[[str], Exception]) -> ValueSpec:
    if isinstance(value, dict):
        if set(value) == {"fact"}:
            if not known_path(value["fact"]):
                raise err(f"set.{out}: unknown fact {value['fact']!r}")
            return FromFact(str(value["fact"]))
        kinds = _engine_value_kinds()
        if len(value) == 1 and next(iter(value)) in kinds:  # an engine's own value form
            name = next(iter(value))
            return kinds[name](out, value[name], err)
        if set(value) == {"first_valid"}:
            fv = value["first_valid"]
            if not (isinstance(fv, dict) and set(fv) == {"phase", "candidates"} and fv["phase"] in ("prefill", "decode")
                    and isinstance(fv["candidates"], list)):
                raise err(f"set.{out}: first_valid takes {{phase: prefill|decode, candidates: [backend, …]}}")
            return FirstValid(fv["phase"], tuple(fv["candidates"]))
        forms = ", ".join(f"{{{{{k}: …}}}}" for k in kinds)
        raise err(f"set.{out}: a value is a literal, {{fact: path}}, {{first_valid: …}}" + (f" or {forms}" if forms else ""))
    kind = _output_kind(out)
    # A literal must have the output's type (bool is not an int here): a string page size would
    # otherwise resolve with exit 0 and reach a launch command as `--page-size sixty-four`.
    if kind is not None and type(value) is not kind:
        raise err(f"set.{out}: {value!r} is a {type(value).__name__}; {out} takes a {kind.__name__}")
    return Fixed(value)


def _output_kind(out: str) -> Optional[type]:
    """int, str or bool: the type an output field of the Decision (or its runtime thresholds) holds."""
    from nsa_policy.core.decision import Decision, RuntimeThresholds

    for model in (Decision, RuntimeThresholds):
        field = model.model_fields.get(out)
        if field is None:
            continue
        args = [a for a in typing.get_args(field.annotation) if a is not type(None)] or [field.annotation]
        kinds = [a for a in args if a in (bool, int, str)]
        return kinds[0] if len(kinds) == 1 else None
    return None


def _bundle_roots() -> tuple[Path, ...]:
    """rules/policy, then each registered engine's own bundle folders (an out-of-tree engine's)."""
    from nsa_policy import engines

    return (policy_dir(), *(r for e in engines.every() for r in e.policy_roots))


def _shipped(name: str) -> Optional[Path]:
    for root in _bundle_roots():
        if (root / name / BUNDLE_FILE).is_file():
            return root / name
    return None


def list_bundles() -> list[str]:
    return sorted({p.name for root in _bundle_roots() if root.is_dir() for p in root.iterdir()
                   if (p / BUNDLE_FILE).is_file()})


def bundle_path(name_or_dir: str, field: str = "policy") -> Path:
    """The folder of a bundle: a shipped name, a folder, or an sglang release's bundle.

    A shipped bundle's bare name always means the shipped bundle: a folder of the same name in the
    working directory (say, one a pull request adds) must be named as a path (./default) to be used.
    """
    cand = _shipped(name_or_dir) if "/" not in name_or_dir and "\\" not in name_or_dir else None
    if cand is not None:
        return cand
    p = Path(name_or_dir)
    if (p / BUNDLE_FILE).is_file():
        return p
    if p.exists():
        raise InputError(field, name_or_dir, hint=f"folder has no {BUNDLE_FILE}")
    release = release_bundle(name_or_dir)
    shipped = _shipped(release) if release is not None else None
    if shipped is not None:
        return shipped
    raise InputError(field, name_or_dir, list_bundles(), hint="not a bundle name or folder")


def release_bundle(name: str) -> Optional[str]:
    """The shipped bundle that answers for the engine release `name` names (sglang-0.5.23, vllm-0.33.0):
    the newest <engine>-<version> bundle at or below it, as that engine names its releases.

    Only releases whose start-up policy changed ship a bundle, so `sglang-0.5.23` is answered by
    `sglang-0.5.22` and `sglang-0.5.10.post1` by `sglang-0.5.10`. None when `name` names no engine's
    release; an InputError when no bundle is that old. The bundle's own name (the decision's `policy`)
    shows which one answered."""
    from nsa_policy import engines

    owner = engines.owner_of_bundle(name)
    return owner.release_bundle(name) if owner is not None else None


def release_owners(engine_name: Optional[str] = None) -> dict[str, list[str]]:
    """bundle → the releases (of its engine's registry) it answers for (see release_bundle); one engine's
    bundles with `engine_name`."""
    from nsa_policy import engines

    owners: dict[str, list[str]] = {}
    for engine in engines.every() if engine_name is None else (engines.get(engine_name),):
        for release in engine.known_releases():
            try:
                owner = engine.release_bundle(f"{engine.name}-{release}")
            except NsaPolicyError:
                continue  # older than every release bundle
            if owner is not None:
                owners.setdefault(owner, []).append(release)
    return owners


def bundle_for_engine(policy: str, engine: str) -> str:
    """`default` names the project's recommendation for each engine (vLLM's is the vllm-default bundle)."""
    from nsa_policy import engines

    return engines.get(engine).bundle_for(policy)


# (the rule as written, its YAML node for line numbers, the file it is in)
_Entry = tuple[RuleSpec, Any, Path]


class _Loader:
    def __init__(self, catalog: Catalog, codes: CodeRegistry):
        self.catalog = catalog
        self.codes = codes

    def load(self, name_or_dir: str, seen: tuple[str, ...] = ()) -> tuple[BundleFile, dict[str, list[_Entry]], list[Path]]:
        """Return the bundle header, stage → ordered rule list of (RuleSpec, data, path), files read."""
        folder = bundle_path(name_or_dir)
        head_path = folder / BUNDLE_FILE
        head, _ = load_doc(BundleFile, head_path)
        key = str(folder.resolve())
        if key in seen:
            raise RuleFileError(str(head_path), None, f"extends cycle: {' → '.join(seen + (key,))}")
        if head.extends:
            parent_dir = folder.parent / head.extends
            ref = str(parent_dir) if (parent_dir / BUNDLE_FILE).is_file() else head.extends
            try:
                parent, stages, files = self.load(ref, seen + (key,))
            except InputError as exc:
                raise RuleFileError(str(head_path), None, f"extends: {exc}") from None
            inherited = {k: getattr(parent, k) for k in ("dsa_architectures", "family_only_architectures",
                                                         "left_as_given")
                         if getattr(head, k) is None and getattr(parent, k) is not None}
            head = head.model_copy(update=inherited)
        else:
            stages, files = {s: [] for s in STAGES}, []
        files = files + [head_path]
        for path in sorted(folder.glob("*.yaml")):
            if path.name == BUNDLE_FILE:
                continue
            doc, data = load_doc(StageFile, path)
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
        def err(msg: str, loc: tuple[Any, ...] = ()) -> RuleFileError:
            return RuleFileError(str(path), line_of(data, list(loc)) or getattr(data, "line", None),
                                 f"rule {rule.id!r}: {msg}")

        try:
            check, explain, reads = compile_condition(rule.when, ("when",))
            device_part = {k: v for k, v in (rule.when or {}).items() if inputs_of(str(k)) == {"device"}}
            rest_part = {k: v for k, v in (rule.when or {}).items() if k not in device_part}
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
            compiled = _compile_value(out, value, _at(err, ("set", out)))
            for engine in _engines():
                problem = engine.set_problem(out, compiled)
                if problem:
                    raise err(f"set.{out}: {problem}", ("set", out))
            for b in _literal_backends(out, compiled):
                if b not in self.catalog.backends:
                    raise err(f"set.{out}: unknown backend {b!r}; did you mean "
                              f"{closest(b, self.catalog.backend_names)!r}?", ("set", out))
            sets.append(Assignment(out, compiled))
        if rule.overwrite and not compat:
            raise err("overwrite: true is allowed only in compatibility bundles (compat: true)", ("overwrite",))
        if stage == "validate" and sets:
            raise err("validate rules only emit findings; they cannot set outputs", ("set",))
        if rule.label and not sets:
            raise err("label: labels the outputs a rule sets; this rule sets none", ("label",))
        finding = self.compile_emit(rule.emit, err) if rule.emit else None
        if not sets and not finding:
            raise err("a rule must `set` outputs or `emit` a finding")
        compiled_rule = CompiledRule(
            id=rule.id, stage=stage, description=rule.description, evidence=tuple(rule.evidence),
            origin=f"{_display(path)}:{getattr(data, 'line', '?')}", check=check, explain=explain,
            reads=tuple(reads), sets=tuple(sets), overwrite=rule.overwrite, emit=finding, when=rule.when,
            label=rule.label, wins_over=tuple(rule.wins_over), reads_before=tuple(rule.reads_before), spec=rule,
            device_check=device_check, rest_check=rest_check)
        inputs = set().union(*(inputs_of(p, overwrite=compat) for p in compiled_rule.all_reads))
        if stage == "not_dsa":
            inputs.add("model")  # that stage runs only for a model that is not DSA
        return dataclasses.replace(compiled_rule, inputs=frozenset(inputs))

    def compile_emit(self, emit: EmitSpec, err: Callable[..., RuleFileError]) -> FindingSpec:
        if emit.code not in self.codes.codes:
            raise err(f"emit.code {emit.code!r} is not in rules/codes.yaml; closest: "
                      f"{closest(emit.code, self.codes.codes)!r}", ("emit", "code"))
        parts = _compile_message(emit.message, lambda m: err(m, ("emit", "message")))
        alternatives, problem = compile_alternatives(emit.alternatives)
        if problem:
            raise err(problem, ("emit", "alternatives"))
        if emit.suggest and not known_path(emit.suggest):
            raise err(f"emit.suggest: unknown fact {emit.suggest!r}", ("emit", "suggest"))
        reads = [p[0] for p in parts if isinstance(p, tuple) and p[0] != "alternatives"]
        reads += [emit.suggest] if emit.suggest else []
        reads += list(alternatives.reads) if alternatives else []
        return FindingSpec(code=emit.code, level=self.codes.codes[emit.code].level, message=emit.message,
                           fields=tuple(emit.fields), alternatives=alternatives, suggest=emit.suggest,
                           reads=tuple(dict.fromkeys(reads)), parts=parts)


def _at(err: Callable[[str, tuple[Any, ...]], RuleFileError], loc: tuple[Any, ...]) -> Callable[[str], RuleFileError]:
    """The error function for one place in a rule."""
    def at(message: str) -> RuleFileError:
        return err(message, loc)
    return at


def _display(path: Path) -> str:
    """rules/policy/default/30-backends.yaml rather than an absolute path, when inside the shipped rules."""
    from nsa_policy.base.paths import real_path, rules_dir

    try:
        return "rules/" + str(real_path(path).relative_to(real_path(rules_dir())))
    except ValueError:
        return str(path)


def existing_from_same_file(entry: _Entry, path: Path) -> bool:
    return entry[2] == path


def _engines() -> tuple[Any, ...]:
    from nsa_policy import engines

    return engines.every()


def _engine_value_kinds() -> dict[str, Callable[..., ValueSpec]]:
    """The value forms each registered engine adds to `set` (vLLM's vllm_first_valid)."""
    return {k: f for e in _engines() for k, f in e.value_kinds().items()}


def _literal_backends(out: str, value: ValueSpec) -> list[str]:
    if out not in ("prefill_backend", "decode_backend"):
        return []
    if isinstance(value, Fixed) and isinstance(value.literal, str):
        return [value.literal]
    if isinstance(value, FirstValid):
        return list(value.candidates)
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
    known = set(catalog.arch_family)
    for key in ("dsa_architectures", "family_only_architectures"):
        unknown = sorted(set(getattr(head, key) or ()) - known)
        if unknown:
            raise RuleFileError(str(bundle_path(name_or_dir) / BUNDLE_FILE), None,
                                f"{key}: {unknown[0]!r} is not an architecture of the model catalog; "
                                f"closest: {closest(unknown[0], sorted(known))!r}")
    for cls, outs in (head.left_as_given or {}).items():
        bad = [o for o in outs if o not in OUTPUT_FIELDS]
        if cls not in catalog.device_doc.classes or bad:
            raise RuleFileError(str(bundle_path(name_or_dir) / BUNDLE_FILE), None,
                                f"left_as_given: {cls!r}: {bad or 'not a device class'}; valid classes: "
                                f"{', '.join(catalog.device_doc.classes)}; outputs: {', '.join(OUTPUT_FIELDS)}")
    return CompiledBundle(name=head.name, description=head.description, compat=head.compat, chain=chain,
                          digest=h.hexdigest()[:16], stages=compiled, files=tuple(str(f) for f in files),
                          source=head.source,
                          dsa_architectures=None if head.dsa_architectures is None else frozenset(head.dsa_architectures),
                          family_only_architectures=frozenset(head.family_only_architectures or ()),
                          left_as_given={k: frozenset(v) for k, v in (head.left_as_given or {}).items()},
                          engine=head.engine)


def _is_abstract(name: str) -> bool:
    path = bundle_path(name) / BUNDLE_FILE
    head, _ = load_doc(BundleFile, path)
    return head.abstract


def concrete_bundles() -> list[str]:
    return [b for b in list_bundles() if not _is_abstract(b)]


@lru_cache(maxsize=16)
def _cached(name_or_dir: str) -> CompiledBundle:
    from nsa_policy import engines
    from nsa_policy.base import snapshot

    # A shipped bundle compiles to the same objects every time: a fresh process loads them from
    # their snapshot. Not when an out-of-tree engine is registered: its rules and checks are input.
    plain = "/" not in name_or_dir and "\\" not in name_or_dir
    shipped = _shipped(name_or_dir) if plain else None
    if shipped is None and plain and not Path(name_or_dir).exists():
        release = release_bundle(name_or_dir)  # sglang-0.5.23 compiles to what sglang-0.5.22 does
        if release is not None and release != name_or_dir and _shipped(release) is not None:
            return _cached(release)
    if shipped is None or not snapshot.enabled(shipped / BUNDLE_FILE) or not engines.only_builtin():
        return compile_bundle(name_or_dir)
    return snapshot.cached_over_rules(f"bundle:{name_or_dir}", lambda: compile_bundle(name_or_dir))


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


__all__ = ["STAGES", "Assignment", "CompiledBundle", "CompiledRule", "FindingSpec", "FirstValid", "Fixed",
           "FromFact", "ValueSpec", "compile_bundle", "get_bundle", "list_bundles", "concrete_bundles",
           "release_bundle", "KV_DTYPES"]
