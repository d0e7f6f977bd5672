"""Output formats: text (grouped by file, with a summary), json, github (workflow annotations), sarif 2.1.0."""
from __future__ import annotations

import json
import os
import re
from itertools import groupby
from typing import Any

from nsa_policy.lint.runner import LintReport

FORMATS = ("text", "json", "github", "sarif")
LEVELS = ("info", "warning", "error")
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def summary(report: LintReport) -> dict:
    return {"errors": report.count("error"), "warnings": report.count("warning"), "notes": report.count("info"),
            "files_scanned": report.files_scanned, "launches": report.launches,
            "files_with_findings": len({d.loc.path for d in report.diagnostics}),
            "templates_skipped": report.templates_skipped, "unreadable": report.unreadable}


# Control characters (C0, DEL, C1) and the Unicode bidi controls: a linted file's text must not drive the
# reader's terminal (colours, cursor moves, a title change) or reorder what it shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """The text with each control character written as a visible escape (\\x1b, \\u202e)."""
    def esc(m: re.Match) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(esc, text)


def render_text(report: LintReport) -> str:
    lines: list[str] = []
    for _path, group in groupby(report.diagnostics, key=lambda d: d.loc.path):
        for d in group:
            lines.append(escape_controls(f"{d.loc.path}:{d.loc.line}:{d.loc.col}: {d.code} [{d.level}] {d.message}"))
            if d.fix:
                lines.append(escape_controls(f"    fix: {d.fix}"))
        lines.append("")
    s = summary(report)
    lines.append(f"{s['errors']} error(s), {s['warnings']} warning(s), {s['notes']} note(s) in "
                 f"{s['files_with_findings']} file(s); {s['files_scanned']} file(s) scanned, {s['launches']} launch(es) checked")
    if report.templates_skipped:
        lines.append(escape_controls(f"{len(report.templates_skipped)} Helm/Go template file(s) not parsed (lint the "
                                     f"output of `helm template` instead): " + ", ".join(report.templates_skipped)))
    return "\n".join(lines)


def render_json(report: LintReport) -> str:
    return json.dumps({"version": 1, "diagnostics": [d.to_json() for d in report.diagnostics],
                       "summary": summary(report)}, indent=2)


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    text = escape_controls(text)  # the workflow log is a terminal too
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def render_github(report: LintReport) -> str:
    kind = {"error": "error", "warning": "warning", "info": "notice"}
    out = []
    for d in report.diagnostics:
        msg = d.message + (f" — fix: {d.fix}" if d.fix else "")
        out.append(f"::{kind[d.level]} file={_gh_escape(d.loc.path, True)},line={d.loc.line},col={d.loc.col},"
                   f"title={_gh_escape(d.code, True)}::{_gh_escape(msg)}")
    s = summary(report)
    out.append(f"nsa-policy lint: {s['errors']} error(s), {s['warnings']} warning(s), {s['notes']} note(s); "
               f"{s['files_scanned']} file(s) scanned")
    return "\n".join(out)


def _camel(name: str) -> str:
    parts = name.split("-")
    return parts[0] + "".join(p.title() for p in parts[1:])


def render_sarif(report: LintReport) -> str:
    from nsa_policy import __version__
    from nsa_policy.catalog.codes import load_codes

    codes = load_codes().codes
    ids = sorted(codes)
    index = {c: i for i, c in enumerate(ids)}
    level = {"error": "error", "warning": "warning", "info": "note"}
    rules = []
    for code in ids:
        doc = codes[code]
        help_text = f"{doc.explanation}\n\nFix: {doc.fix}"
        md = f"**{doc.summary}**\n\n{doc.explanation}\n\n**Fix:** {doc.fix}"
        if doc.example:
            help_text += f"\n\nExample: {doc.example}"
            md += f"\n\n**Example:** `{doc.example}`"
        if doc.evidence:
            md += "\n\n**Evidence:** " + ", ".join(doc.evidence)
        rules.append({
            "id": code, "name": _camel(doc.name),
            "shortDescription": {"text": doc.summary},
            "fullDescription": {"text": doc.explanation},
            "help": {"text": help_text, "markdown": md},
            "defaultConfiguration": {"level": level[doc.level]},
            "properties": {"tags": ["nsa-policy", doc.name]},
        })
    results = []
    for d in report.diagnostics:
        if os.path.isabs(d.loc.path):
            from pathlib import Path

            uri = Path(d.loc.path).as_uri()
        else:
            uri = d.loc.path.replace(os.sep, "/")
            uri = uri[2:] if uri.startswith("./") else uri
        loc: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": uri},
                                                    "region": {"startLine": d.loc.line, "startColumn": d.loc.col}}}
        if not os.path.isabs(d.loc.path):
            loc["physicalLocation"]["artifactLocation"]["uriBaseId"] = "%SRCROOT%"
        text = d.message + (f" Fix: {d.fix}" if d.fix else "")
        res = {"ruleId": d.code, "ruleIndex": index[d.code], "level": level[d.level], "message": {"text": text},
               "locations": [loc]}
        if d.rule or d.alternatives:
            res["properties"] = {k: v for k, v in (("policyRule", d.rule), ("alternatives", list(d.alternatives))) if v}
        results.append(res)
    sarif = {
        "$schema": SARIF_SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "nsa-policy", "version": __version__, "semanticVersion": __version__,
                                "rules": rules}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": _srcroot()}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
    return json.dumps(sarif, indent=2)


def _srcroot() -> str:
    from pathlib import Path

    return Path(os.getcwd()).resolve().as_uri() + "/"


RENDERERS = {"text": render_text, "json": render_json, "github": render_github, "sarif": render_sarif}
