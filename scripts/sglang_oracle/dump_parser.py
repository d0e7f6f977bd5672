"""Dump one sglang release's real server argument parser and its declared environment variables.

Runs INSIDE a release's side environment (see build_envs.sh / run.py):

    PYTHONPATH=/work/sgenv/pkgs/0.5.23:/work/sgenv/stubs /work/sgenv/venv-t5.19/bin/python \
        scripts/sglang_oracle/dump_parser.py > benchmarks/results/sglang-parsers/0.5.23.json

Every action of the parser that `prepare_server_args` builds (`ServerArgs.add_cli_args` on an
`argparse.ArgumentParser(prog="sglang serve")`; from 0.5.20 `add_cli_args` generates the options
from the field declarations in `arg_groups/fields/`), with option strings, dest, choices, nargs,
const, default, action class (Deprecated* actions and their extra attributes such as `new_flag`)
and the first line of the help. Environment variables: every `EnvField` declared on
`sglang.srt.environ.Envs` (kind, default, `deprecated_name` where the class has an alias), the
`_DEPRECATED_ENVS` registry where the release has one, and the calls of environ.py's
deprecation helpers (read from the source with `ast`). Output is sorted and carries no date, so a
re-run on the same release is byte-identical.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _inrelease import build_parser, clean_sglang_env, jsonable, quiet_imports, release  # noqa: E402

_STANDARD_ATTRS = {"option_strings", "dest", "nargs", "const", "default", "type", "choices", "required", "help",
                   "metavar", "container", "deprecated"}


def _first_line(text):
    if not text:
        return text
    if text == argparse.SUPPRESS:
        return "==SUPPRESS=="
    return " ".join(text.strip().split("\n")[0].split())


def _type_name(t):
    if t is None:
        return None
    return getattr(t, "__name__", None) or type(t).__name__


def action_record(a: argparse.Action) -> dict:
    cls = type(a)
    module = cls.__module__
    rec = {
        "option_strings": list(a.option_strings),
        "dest": a.dest,
        "action": cls.__name__ if module == "argparse" else f"{module}.{cls.__name__}",
        "nargs": jsonable(a.nargs),
        "const": jsonable(a.const),
        "default": jsonable(a.default),
        "type": _type_name(a.type),
        "choices": jsonable(list(a.choices)) if isinstance(a.choices, (list, tuple)) else jsonable(a.choices),
        "required": bool(a.required),
        "metavar": jsonable(a.metavar),
        "help": _first_line(a.help),
    }
    extra = {k: jsonable(v) for k, v in sorted(vars(a).items()) if k not in _STANDARD_ATTRS}
    if extra:
        rec["extra"] = extra
    rec["deprecated"] = cls.__name__.startswith("Deprecated")
    return rec


def env_records() -> dict:
    import sglang.srt.environ as environ

    base = environ.EnvField
    variables = []
    for name, value in vars(environ.Envs).items():
        if isinstance(value, base):
            rec = {"name": getattr(value, "name", name), "kind": type(value).__name__,
                   "default": jsonable(getattr(value, "default", None))}
            dep = getattr(value, "deprecated_name", None)
            if dep:
                rec["deprecated_name"] = dep
            variables.append(rec)
    variables.sort(key=lambda r: r["name"])
    registry = []
    for old, dep in sorted(getattr(environ, "_DEPRECATED_ENVS", {}).items()):
        registry.append({"name": old, "replacement": getattr(dep, "replacement", None),
                         "note": getattr(dep, "note", None)})
    # Calls such as _print_deprecated_env(new, old) in older releases: read from the source.
    calls = []
    with open(environ.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if "deprecat" in fn.lower() and node.args and all(
                    isinstance(x, ast.Constant) and isinstance(x.value, str) for x in node.args):
                calls.append({"function": fn, "args": [x.value for x in node.args], "line": node.lineno})
    calls.sort(key=lambda c: (c["line"], c["function"]))
    return {"source": "sglang/srt/environ.py", "variables": variables, "deprecated_registry": registry,
            "deprecation_calls": calls}


def main() -> None:
    clean_sglang_env()
    quiet_imports()
    parser = build_parser()
    actions = sorted((action_record(a) for a in parser._actions),
                     key=lambda r: (r["option_strings"][0] if r["option_strings"] else "", r["dest"]))
    import torch

    out = {
        "release": release(),
        "generated_by": "scripts/sglang_oracle/dump_parser.py",
        "runtime": {"python": platform.python_version(), "torch": torch.__version__},
        "parser": {"built_as": "argparse.ArgumentParser(prog='sglang serve'); ServerArgs.add_cli_args(parser)",
                   "prog": parser.prog, "allow_abbrev": parser.allow_abbrev,
                   "actions_count": len(actions),
                   "option_strings_count": sum(len(a["option_strings"]) for a in actions)},
        "actions": actions,
        "env": env_records(),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
