"""Lint files: find them, read each with the extractor for its kind, check every launch found.

One wrapper (`_guarded`) stands around every reader, parser and check of a file: a file that cannot
be read or parsed, or whose input no reader converts (a number of 5000 digits, nesting past the
limits, a YAML error of any PyYAML release), gives one NSA404 diagnostic at its file:line, and the
run goes on with the other files. Files a linted file names are read only inside the linted tree
(confine.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import yaml

from nsa_policy.base.errors import NsaPolicyError
from nsa_policy.base.safe_io import UnsafeInput, read_bytes
from nsa_policy.lint.confine import Reader
from nsa_policy.lint.discover import iter_files
from nsa_policy.lint.envfile import EnvSyntaxError, read_env_file, scan_env
from nsa_policy.lint.extract_dockerfile import scan_dockerfile
from nsa_policy.lint.extract_shell import scan_shell
from nsa_policy.lint.extract_structured import Structured
from nsa_policy.lint.launch_checks import Checker, LintOptions
from nsa_policy.lint.report import Diagnostic, FileScan, Hint, Location
from nsa_policy.lint.text import LineIndex, comment_hints, requirements_pins
from nsa_policy.lint.tree import ParseError, json_document, toml_document, yaml_documents

# What a reader or parser may raise on hostile input; anything else is a bug and is not hidden.
_INPUT_FAILURES = (ParseError, EnvSyntaxError, NsaPolicyError, RecursionError, ValueError, yaml.YAMLError)

# Structured files that mention none of these cannot hold an sglang launch or DSA setting; they are
# counted as scanned but not parsed (lint is not a YAML/JSON/TOML validator). A file with a backslash
# escape (YAML/JSON "\x73glang", "\u0073") may spell one in a way no text search sees: it is parsed.
# vLLM `--config` files name neither engine: their DSA-relevant keys mark them
_MARKERS = ("sglang", "vllm", "nsa", "dsa", "kv-cache", "kv_cache", "model-path", "model_path", "attention-backend",
            "attention_backend", "tensor-parallel-size", "tensor_parallel_size")


@dataclass
class LintReport:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files_scanned: int = 0
    launches: int = 0
    templates_skipped: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # every file read, so --output can never be one of them

    def count(self, level: str) -> int:
        return sum(1 for d in self.diagnostics if d.level == level)


def lint_paths(paths: list[str], opts: Optional[LintOptions] = None, excludes: tuple[str, ...] = (),
               use_gitignore: bool = True) -> LintReport:
    """Lint files and folders. Raises InputError for a bad --device/--policy or a missing path."""
    from nsa_policy.base.errors import InputError

    opts = opts or LintOptions()
    for p in paths:
        if not os.path.exists(p):
            raise InputError("path", p, hint="no such file or folder")
    reader = Reader(list(paths))
    checker = Checker(opts, reader)
    report = LintReport()
    for path, kind in iter_files(list(paths), list(excludes), use_gitignore):
        scan = scan_file(path, kind, report, reader)
        if scan is None:
            continue
        report.files_scanned += 1
        report.diagnostics += scan.diagnostics
        for launch in scan.launches:
            report.launches += 1
            report.diagnostics += checker.check(launch)  # guarded there: one launch never ends the run
    report.paths += [p for p in reader.read_paths if p not in report.paths]
    seen = set()
    unique = []
    for d in sorted(report.diagnostics, key=lambda d: (d.loc.path, d.loc.line, d.loc.col, d.code, d.message)):
        key = (d.loc, d.code, d.message)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    report.diagnostics = unique
    return report


def _unreadable(path: str, report: LintReport, message: str) -> FileScan:
    report.unreadable.append(path)
    scan = _unparsable(path, message)
    scan.unreadable = True
    return scan


def _why_unreadable(path: str) -> str:
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(mode):
        return "folder cannot be listed (permission denied)"
    return "not a regular file (a FIFO, device or socket); lint reads only files and folders"


def _unparsable(path: str, message: str, line: Optional[int] = None, col: Optional[int] = None) -> FileScan:
    from nsa_policy.catalog.codes import load_codes

    doc = load_codes().codes["NSA404"]
    scan = FileScan(path)
    scan.diagnostics.append(Diagnostic("NSA404", doc.level, message, Location(path, line or 1, col or 1), doc.fix))
    return scan


def scan_file(path: str, kind: str, report: LintReport, reader: Optional[Reader] = None) -> Optional[FileScan]:
    reader = reader if reader is not None else Reader([path])
    try:
        return _scan_file(path, kind, report, reader)
    except ParseError as exc:
        return _unparsable(path, str(exc), exc.line, exc.col)
    except EnvSyntaxError as exc:
        return _unparsable(path, f"not a valid env file: {exc}", exc.line, 1)
    except RecursionError:
        return _unparsable(path, "refused: nests deeper than lint reads")
    except _INPUT_FAILURES as exc:
        return _unparsable(path, f"cannot be read: {exc}", _line_of(exc))


def _line_of(exc: BaseException) -> Optional[int]:
    """The line an input error names in its value (`file:LINE`), if any."""
    import re

    value = getattr(exc, "value", None)
    m = re.search(r":(\d+)$", value) if isinstance(value, str) else None
    return int(m.group(1)) if m else None


def _scan_file(path: str, kind: str, report: LintReport, reader: Reader) -> Optional[FileScan]:
    if kind == "unreadable":  # a named path that is no file or folder, or a folder that cannot be listed
        return _unreadable(path, report, f"cannot read: {_why_unreadable(path)}")
    try:
        data = read_bytes(path, field="path")  # regular files only, size-capped; a FIFO never blocks
    except UnsafeInput as exc:
        return _unreadable(path, report, exc.hint or str(exc))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return _unparsable(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})", line)
    report.paths.append(path)
    if kind == "maybe-shell":
        first = text[:200].split("\n", 1)[0]
        if not (first.startswith("#!") and ("sh" in first.rsplit("/", 1)[-1])):
            return None
        kind = "shell"
    if kind == "unknown":  # a file named on the command line whose kind lint cannot tell
        return _unparsable(path, "lint cannot tell this file's kind from its name (expected a shell script, "
                                 "Dockerfile, YAML, JSON, TOML or .env file)")
    index = LineIndex(text)
    base_dir = os.path.dirname(os.path.abspath(path))
    scan = _extract(path, kind, text, index, base_dir, report, reader)
    if scan is None:
        return FileScan(path)
    hints, bad = comment_hints(text, index, path)
    hints += _dsa_spelling(scan)
    beside = requirements_pins(base_dir, path, reader)  # after the file's own: a tag or pin in the file wins
    for la in scan.launches:
        own = [h for h in hints if la.scope is None or not _installed(h)
               or any(a <= h.loc.line <= b for a, b in la.scope)]
        la.hints = own + beside + la.hints
    from nsa_policy.catalog.codes import load_codes

    doc = load_codes().codes["NSA407"]
    for key, value, loc in bad:
        scan.diagnostics.append(Diagnostic("NSA407", doc.level, f"'nsa-policy: {key}={value}': lint reads the keys "
                                           f"device, model, policy, sglang and vllm", loc, doc.fix))
    return scan


def _installed(h: Hint) -> bool:
    """A release read from what the file installs (image tag, pin), not from an explicit hint."""
    return h.source.startswith(("image tag ", "pin "))


def _extract(path: str, kind: str, text: str, index: LineIndex, base_dir: str, report: LintReport,
             reader: Reader) -> Optional[FileScan]:
    if kind == "shell":
        return scan_shell(path, text, index, base_dir, _dotenv(base_dir, path, reader), reader)
    if kind == "dockerfile":
        return scan_dockerfile(path, text, index)
    if kind == "env":
        return scan_env(path, text, index)
    lowered = text.lower()
    if not any(m in lowered for m in _MARKERS) and "nsa-policy" not in lowered and "\\" not in text:
        return None
    if kind == "yaml":
        try:
            docs = yaml_documents(text, index)
        except ParseError:
            if "{{" in text:  # a Helm/Go template: YAML only after `helm template`
                report.templates_skipped.append(path)
                return None
            raise
        kind_name = "yaml"
    elif kind == "json":
        docs = [json_document(text, index)]
        kind_name = "json"
    else:
        docs = [toml_document(text, index)]
        kind_name = "toml"
    ex = Structured(path, text, index, base_dir, kind_name, _dotenv(base_dir, path, reader), reader)
    scan = FileScan(path)
    for doc in docs:
        scan.launches += ex.document(doc)
    scan.diagnostics += ex.diagnostics
    from nsa_policy.catalog.codes import load_codes

    doc7 = load_codes().codes["NSA407"]
    for key, value, loc in ex.bad_hints:
        scan.diagnostics.append(Diagnostic("NSA407", doc7.level, f"nsa-policy annotation {key}={value!r}: lint reads "
                                           f"the keys device, model, policy, sglang and vllm", loc, doc7.fix))
    return scan


def _dsa_spelling(scan: FileScan) -> list[Hint]:
    """A --dsa-* flag or SGLANG_DSA_* variable anywhere in the file: the file targets the renamed sglang."""
    for la in scan.launches:
        for arg in la.args:
            if arg.name.startswith("dsa-"):
                return [Hint("dsa-spelling", arg.spelling, arg.loc, "the new spelling")]
        for name, ev in la.env.items():
            if name.startswith("SGLANG_DSA_"):
                return [Hint("dsa-spelling", name, ev.loc, "the new spelling")]
    return []


def _dotenv(base_dir: str, path: str, reader: Reader) -> dict:
    """Variables of a `.env` beside the file (compose reads it for interpolation; scripts often source it),
    when it is inside the linted tree (a link out of it is not followed)."""
    full = os.path.join(base_dir, ".env")
    if not reader.exists(full):
        return {}
    shown = full if os.path.isabs(path) else os.path.relpath(full)
    return read_env_file(full, shown, reader)


__all__ = ["LintReport", "lint_paths", "LintOptions"]
