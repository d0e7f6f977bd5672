"""Rule tests as data, beside the rules (as OPA does): rules/policy/<bundle>/tests/*.yaml.

A test file holds `cases:`. Each case has a `name`, an `input` in the contract-case shape of
tests/cases/*.yaml (device; model, or arch + index_topk + num_attention_heads; serving fields;
`env:VAR`; `package:NAME`) and an `expect`: output values, `rejected`, finding codes (any level, or
by level), codes that must be absent, and rules that must fire. Format: docs/rule-tests.md.

A bundle's tests run against that bundle only: a bundle that extends another does not inherit its
parent's cases (it may change exactly what they pin down). An abstract bundle cannot be evaluated,
so its cases run against each concrete bundle beside it (same folder) that extends it, and testing
such a bundle runs them too. The bundle loader reads only
the top-level *.yaml of a bundle folder, so tests/ never becomes rules and never changes the digest.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nsa_policy.base.errors import InputError, NsaPolicyError, RuleFileError, closest
from nsa_policy.base.paths import policy_dir, rules_dir
from nsa_policy.base.schema_load import validate_doc
from nsa_policy.base.yaml_lines import LineDict, line_of, load_yaml
from nsa_policy.catalog.codes import load_codes
from nsa_policy.catalog.store import KV_DTYPES, load_catalog
from nsa_policy.core.bundle import (
    BUNDLE_FILE,
    BundleFile,
    bundle_path,
    concrete_bundles,
    get_bundle,
)
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Facts

TESTS_DIR = "tests"
FIRED = ("fired", "emitted")  # trace outcomes of a rule that took effect
# Finding-code lists of `expect`, and the level each one requires (None: any level).
CODE_KEYS = {"codes": None, "errors": "error", "warnings": "warning", "notes": "info", "absent_codes": None}
FLAG_KEYS = ("rejected", "warning_codes_nonempty")  # warning_codes_nonempty: the contract cases' spelling
# Every Decision field is an output a case may pin, except the findings, trace and echoed inputs.
OUTPUT_KEYS = tuple(k for k in Decision.model_fields if k not in ("warnings", "errors", "notes", "provenance",
                                                                  "trace", "inputs"))
EXPECT_KEYS = OUTPUT_KEYS + FLAG_KEYS + tuple(CODE_KEYS) + ("rules", "message_contains")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


class CaseSpec(_Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    input: dict[str, Any]
    expect: dict[str, Any] = Field(min_length=1, description="a case with nothing expected tests nothing")


class RuleTestFile(_Strict):
    description: str | None = None
    # A contract case file (tests/cases/*.yaml) names its policy and source; passed with --cases it
    # runs against the bundle under test whatever `policy` says (docs/rule-tests.md).
    policy: str | None = None
    source: str | None = None
    # Later shipped bundles that inherit the rules these cases test unchanged: the cases run against
    # them too, instead of a copy in each of their tests folders.
    also: list[str] = []
    cases: list[CaseSpec] = Field(min_length=1)


class Expectation(_Strict):
    outputs: dict[str, Any] = {}
    rejected: bool | None = None
    warning_codes_nonempty: bool | None = None
    codes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    absent_codes: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    # text some finding's message must contain: where the wording is the engine's own (its error message)
    message_contains: str | None = None


@dataclass(frozen=True)
class RuleTestCase:
    name: str
    file: str  # as shown: rules/policy/<bundle>/tests/x.yaml for shipped bundles
    line: int
    input: dict[str, Any]
    expect: Expectation

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class CaseResult:
    case: RuleTestCase
    bundle: str
    problems: tuple[str, ...]
    fired: frozenset[str]
    decision: Decision = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class RuleTestRun:
    """The cases of one tests folder (or --cases files) against one bundle."""

    policy: str  # what get_bundle takes: a shipped name or a folder
    bundle: str  # the bundle's name
    tests_of: str  # whose cases: the bundle itself, its abstract base, or "--cases"
    files: tuple[str, ...]
    cases: tuple[RuleTestCase, ...]


def _shown(path: Path) -> str:
    try:
        return "rules/" + str(path.resolve().relative_to(rules_dir().resolve()))
    except ValueError:
        return str(path)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _code_list(key: str, value: Any, err: Callable[[str], RuleFileError]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise err(f"{key}: a list of finding codes, e.g. [NSA101]")
    codes = load_codes().codes
    level = CODE_KEYS.get(key)
    for code in value:
        if code not in codes:
            near = closest(code, codes)
            raise err(f"{key}: unknown code {code!r}" + (f"; did you mean {near!r}?" if near else "")
                      + " (codes are listed in rules/codes.yaml)")
        if level is not None and codes[code].level != level:
            right = next(k for k, lv in CODE_KEYS.items() if lv == codes[code].level)
            raise err(f"{key}: {code} is a {codes[code].level}-level code; list it under `{right}`")
    return tuple(value)


def _expectation(data: LineDict, where: list[str | int], name: str, path: Path) -> Expectation:
    def err(msg: str, key: str | None = None) -> RuleFileError:
        loc = where + ([key] if key is not None else [])
        return RuleFileError(str(path), line_of(data, loc), f"case {name!r}: expect.{msg}")

    expect = data
    for part in where:
        expect = expect[part]
    out: dict[str, Any] = {"outputs": {}}
    catalog = load_catalog()
    for key, value in expect.items():
        def e(msg: str, _k: Any = key) -> RuleFileError:  # the error at this key's line
            return err(msg, _k)

        if key in OUTPUT_KEYS:
            if key in ("prefill_backend", "decode_backend") and value is not None and value not in catalog.backends:
                near = closest(value, catalog.backend_names)
                raise e(f"{key}: unknown backend {value!r}" + (f"; did you mean {near!r}?" if near else "")
                        + f"; valid: {', '.join(catalog.backend_names)}, null")
            if key == "kv_cache_dtype" and value is not None and value not in _kv_dtypes_any_engine():
                raise e(f"{key}: {value!r} is not a resolved KV dtype; valid: {', '.join(_kv_dtypes_any_engine())}, null")
            out["outputs"][key] = _plain(value)
        elif key in FLAG_KEYS:
            if not isinstance(value, bool):
                raise e(f"{key}: true or false, not {value!r}")
            out[key] = value
        elif key in CODE_KEYS:
            out[key] = _code_list(key, value, e)
        elif key == "rules":
            if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
                raise e("rules: a list of rule ids that must fire")
            out[key] = tuple(value)
        elif key == "message_contains":
            if not isinstance(value, str) or not value:
                raise e("message_contains: the text (a non-empty string) some finding's message must contain")
            out[key] = value
        else:
            near = closest(str(key), EXPECT_KEYS)
            raise e(f"{key}: unknown key" + (f"; did you mean {near!r}?" if near else "")
                    + f"; valid: {', '.join(EXPECT_KEYS)}")
    return Expectation(**out)


def load_test_file(path: Path) -> list[RuleTestCase]:
    """The cases of one file; a malformed file raises RuleFileError at file:line."""
    data = load_yaml(path)
    doc = validate_doc(RuleTestFile, data, path)
    cases: list[RuleTestCase] = []
    seen: dict[str, int] = {}
    for i, spec in enumerate(doc.cases):
        node = data["cases"][i]
        line = getattr(node, "line", None) or line_of(data, ["cases", i]) or 0
        if spec.name in seen:
            raise RuleFileError(str(path), line, f"case name {spec.name!r} already used at line {seen[spec.name]}")
        seen[spec.name] = line
        expect = _expectation(data, ["cases", i, "expect"], spec.name, path)
        cases.append(RuleTestCase(name=spec.name, file=_shown(path), line=line, input=_plain(dict(spec.input)),
                                  expect=expect))
    return cases


def bundle_test_files(folder: Path) -> list[Path]:
    """A bundle folder's test files: tests/*.yaml, in name order."""
    return sorted((folder / TESTS_DIR).glob("*.yaml"))


def shared_test_files(bundle: str) -> list[tuple[str, Path]]:
    """(owner bundle, file) of the shipped test files whose `also` names `bundle`."""
    return [(owner, path) for owner, path, also in _shared_index() if bundle in also]


@lru_cache(maxsize=1)
def _shared_index() -> tuple[tuple[str, Path, tuple[str, ...]], ...]:
    out = []
    for path in sorted(policy_dir().glob(f"*/{TESTS_DIR}/*.yaml")):
        data = load_yaml(path)
        also = data.get("also") if isinstance(data, dict) else None
        if also:
            unknown = [b for b in also if not (policy_dir() / str(b) / "bundle.yaml").is_file()]
            if unknown:
                raise RuleFileError(str(path), line_of(data, ["also"]) or 0,
                                    f"also: no shipped bundle {unknown[0]!r}")
            out.append((path.parent.parent.name, path, tuple(str(b) for b in also)))
    return tuple(out)


def load_files(paths: Sequence[Path]) -> list[RuleTestCase]:
    """Cases of several files; a name used twice across them is an error at the second one's line."""
    out: list[RuleTestCase] = []
    seen: dict[str, RuleTestCase] = {}
    for path in paths:
        for case in load_test_file(path):
            if case.name in seen:
                raise RuleFileError(str(path), case.line,
                                    f"case name {case.name!r} already used at {seen[case.name].where}")
            seen[case.name] = case
            out.append(case)
    return out


def expand_case_paths(items: Sequence[str], option: str = "--cases") -> list[Path]:
    """Files and folders (their *.yaml) named on the command line."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.yaml"))
            if not found:
                raise InputError(option, item, hint="the folder has no *.yaml test files")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(option, item, hint="no such file or folder")
    return out


def bundle_folder(policy: str) -> Path:
    """The folder of a bundle, found exactly as get_bundle finds it (engine.bundle.bundle_path)."""
    return bundle_path(policy, field="--policy")


def _head(folder: Path) -> BundleFile:
    path = folder / BUNDLE_FILE
    return validate_doc(BundleFile, load_yaml(path), path)


def _target(folder: Path) -> str:
    """What get_bundle takes for this folder: the shipped name, else the folder's absolute path (a
    relative "default" would name the shipped bundle, not the local folder)."""
    shipped = policy_dir() / folder.name
    return folder.name if (shipped / BUNDLE_FILE).is_file() and shipped.resolve() == folder.resolve() else str(folder.resolve())


def heirs(folder: Path) -> list[tuple[str, str]]:
    """(policy, name) of each concrete bundle beside an abstract one whose rules include its files."""
    here = folder.resolve()
    out = []
    for sibling in sorted(p for p in folder.parent.iterdir() if (p / BUNDLE_FILE).is_file()):
        if sibling.resolve() == here or _head(sibling).abstract:
            continue
        target = _target(sibling)
        bundle = get_bundle(target)
        if any(Path(f).resolve().parent == here for f in bundle.files):
            out.append((target, bundle.name))
    return out


def abstract_ancestors(folder: Path, policy: str) -> list[Path]:
    """The abstract bundles beside a concrete one that it extends, oldest first: their cases apply to it."""
    here = folder.resolve()
    out: list[Path] = []
    for f in get_bundle(policy).files:
        parent = Path(f).resolve().parent
        if parent != here and parent.parent == here.parent and parent not in out and _head(parent).abstract:
            out.append(parent)
    return out


def _runs(folder: Path, extra_paths: Sequence[Path]) -> list[RuleTestRun]:
    head = _head(folder)
    if head.abstract:
        targets = heirs(folder)
        if not targets:
            raise InputError("--policy", str(folder), hint="an abstract bundle, and no concrete bundle beside it extends it")
        groups = [(head.name, bundle_test_files(folder))]
    else:
        target = _target(folder)
        targets = [(target, get_bundle(target).name)]
        groups = [(_head(a).name, bundle_test_files(a)) for a in abstract_ancestors(folder, target)]
        groups.append((head.name, bundle_test_files(folder)))
        groups += [(owner, [path]) for owner, path in shared_test_files(head.name)]
    loaded = [(who, files, tuple(load_files(files))) for who, files in groups if files]
    if extra_paths:
        loaded.append(("--cases", list(extra_paths), tuple(c for p in extra_paths for c in load_test_file(p))))
    return [RuleTestRun(policy=target, bundle=name, tests_of=who, files=tuple(_shown(p) for p in files), cases=cases)
            for target, name in targets for who, files, cases in loaded]


def plan(policy: str, extra: Sequence[str] = ()) -> list[RuleTestRun]:
    """The runs `nsa-policy test --policy POLICY [--cases …]` makes: the bundle's own tests, those of
    the abstract bundles beside it that it extends, and the extra files (an abstract bundle's own tests
    run against each of its heirs instead)."""
    folder = bundle_folder(policy)
    runs = _runs(folder, expand_case_paths(extra))
    if not runs:
        raise InputError("--policy", policy,
                         hint=f"{folder / TESTS_DIR} has no *.yaml test files, and no --cases were given")
    return runs


def shipped_plan() -> list[RuleTestRun]:
    """The tests of every shipped concrete bundle (a bundle with none has no runs)."""
    return [run for name in concrete_bundles() for run in _runs(policy_dir() / name, ())]


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):  # so that `true` never equals 1
        return type(got) is type(want) and got == want
    return bool(got == want)


def compare(expect: Expectation, decision: Decision, rule_ids: Sequence[str]) -> list[str]:
    """What differs between a case's expectation and a decision: one line per mismatch."""
    problems = []
    got_outputs = decision.model_dump(mode="json", include=set(expect.outputs))
    for key, want in expect.outputs.items():
        if not _same(got_outputs[key], want):
            problems.append(f"{key}: expected {want!r}, got {got_outputs[key]!r}")
    by_level = {"errors": [f.code for f in decision.errors], "warnings": [f.code for f in decision.warnings],
                "notes": [f.code for f in decision.notes]}
    every = [c for codes in by_level.values() for c in codes]

    def shown(codes: Sequence[str]) -> str:
        return ", ".join(sorted(set(codes))) or "none"

    if expect.rejected is not None and decision.rejected != expect.rejected:
        problems.append(f"rejected: expected {str(expect.rejected).lower()}, got {str(decision.rejected).lower()} "
                        f"(errors: {shown(by_level['errors'])})")
    if expect.warning_codes_nonempty is not None and bool(decision.warnings) != expect.warning_codes_nonempty:
        problems.append(f"warning_codes_nonempty: expected {str(expect.warning_codes_nonempty).lower()}, "
                        f"got warnings: {shown(by_level['warnings'])}")
    for key in ("codes", "errors", "warnings", "notes"):
        have = every if key == "codes" else by_level[key]
        missing = [c for c in getattr(expect, key) if c not in have]
        if missing:
            problems.append(f"{key}: expected {', '.join(missing)}; got {shown(have)}")
    present = [c for c in expect.absent_codes if c in every]
    if present:
        by = {f.code: f.rule for f in decision.findings}
        problems.append("absent_codes: " + ", ".join(f"{c} was emitted (rule {by[c]})" for c in present))
    if expect.message_contains is not None and not any(expect.message_contains in f.message for f in decision.findings):
        problems.append(f"message_contains: no finding's message contains {expect.message_contains!r}; got "
                        + ("; ".join(f"{f.code} {f.message}" for f in decision.findings) or "no finding"))
    trace = {t.rule: t for t in decision.trace}
    for rid in expect.rules:
        entry = trace.get(rid)
        if rid not in rule_ids:
            near = closest(rid, rule_ids)
            problems.append(f"rules: {rid!r} is not a rule of policy {decision.policy!r}"
                            + (f"; did you mean {near!r}?" if near else ""))
        elif entry is None:
            problems.append(f"rules: expected {rid} to fire; it did not run (the decision stopped before its stage)")
        elif entry.outcome not in FIRED:
            problems.append(f"rules: expected {rid} to fire; got {entry.outcome}: {entry.why}")
    return problems


def _kv_dtypes_any_engine() -> tuple[str, ...]:
    """sglang's resolved KV dtypes, then vLLM's (a vllm-* bundle's decision holds vLLM's names)."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    extra = [k for k in load_vllm().argument("kv_cache_dtype").choices or () if k not in KV_DTYPES]
    return tuple(KV_DTYPES) + tuple(extra)


def facts_of(case: RuleTestCase, engine: str = "sglang") -> Facts:
    """The case's input as facts; input that cannot be evaluated is an error at the case's line.
    `engine`: the bundle's engine (a vllm-* bundle's cases use vLLM's argument names)."""
    from nsa_policy.verify.coverage import facts_from_case_input

    try:
        return facts_from_case_input(case.input, engine=engine)
    except NsaPolicyError as exc:
        raise RuleFileError(case.file, case.line, f"case {case.name!r}: input {exc}") from None


def run_case(case: RuleTestCase, policy: str) -> CaseResult:
    """Decide the case under one bundle and compare with what it expects."""
    from nsa_policy.api import decide

    decision = decide(facts_of(case, get_bundle(policy).engine), policy, trace=True)
    rule_ids = [r.id for r in get_bundle(policy).rules]
    fired = frozenset(t.rule for t in decision.trace if t.outcome in FIRED)
    return CaseResult(case=case, bundle=decision.policy, problems=tuple(compare(case.expect, decision, rule_ids)),
                      fired=fired, decision=decision)


@dataclass(frozen=True)
class RunResult:
    run: RuleTestRun
    results: tuple[CaseResult, ...]

    @property
    def passed(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed


def execute(runs: Sequence[RuleTestRun]) -> list[RunResult]:
    return [RunResult(run=run, results=tuple(run_case(c, run.policy) for c in run.cases)) for run in runs]


def not_fired(results: Sequence[RunResult]) -> dict[str, list[str]]:
    """Per bundle, in rule order: the rules no case run against it fired."""
    fired: dict[str, set[str]] = {}
    policy_of: dict[str, str] = {}
    for rr in results:
        policy_of.setdefault(rr.run.bundle, rr.run.policy)
        bucket = fired.setdefault(rr.run.bundle, set())
        for r in rr.results:
            bucket |= r.fired
    return {name: [r.id for r in get_bundle(policy_of[name]).rules if r.id not in fired[name]] for name in fired}


def report_json(results: Sequence[RunResult], coverage: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ok": all(rr.failed == 0 for rr in results),
        "passed": sum(rr.passed for rr in results), "failed": sum(rr.failed for rr in results),
        "runs": [{"bundle": rr.run.bundle, "policy": rr.run.policy, "tests_of": rr.run.tests_of,
                  "files": list(rr.run.files), "passed": rr.passed, "failed": rr.failed,
                  "cases": [{"name": r.case.name, "file": r.case.file, "line": r.case.line, "ok": r.ok,
                             "problems": list(r.problems)} for r in rr.results]} for rr in results],
    }
    if coverage:
        out["not_fired"] = not_fired(results)
    return out


def report_text(results: Sequence[RunResult], coverage: bool = False) -> str:
    lines = []
    for rr in results:
        for r in rr.results:
            if not r.ok:
                lines.append(f"FAIL {r.case.where} {r.case.name} [{rr.run.bundle}]: " + "; ".join(r.problems))
    for rr in results:
        if rr.run.tests_of == "--cases":
            whose = f" (--cases {', '.join(rr.run.files)})"
        else:
            whose = "" if rr.run.tests_of == rr.run.bundle else f" (tests of {rr.run.tests_of})"
        lines.append(f"{rr.run.bundle}{whose}: {rr.passed} passed, {rr.failed} failed")
    if coverage:
        for name, missing in not_fired(results).items():
            lines.append(f"{name}: rules no case fires: {', '.join(missing) if missing else 'none'}")
    passed, failed = sum(rr.passed for rr in results), sum(rr.failed for rr in results)
    lines.append(f"{'ok' if not failed else 'FAILED'}: {passed} passed, {failed} failed")
    return "\n".join(lines)


__all__ = [
    "TESTS_DIR",
    "CaseResult",
    "Expectation",
    "RuleTestCase",
    "RuleTestRun",
    "RunResult",
    "bundle_folder",
    "bundle_test_files",
    "compare",
    "execute",
    "facts_of",
    "heirs",
    "abstract_ancestors",
    "load_files",
    "load_test_file",
    "not_fired",
    "plan",
    "report_json",
    "report_text",
    "run_case",
    "shipped_plan",
]
