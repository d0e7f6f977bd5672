#!/usr/bin/env python3
"""Issue 21, deliverable 4: the lists each sglang wheel carries that the catalog must cover.

Read from each wheel as text (zip members parsed with `ast`; nothing installed, imported or executed):

- `backends`: the --nsa/--dsa-{prefill,decode}-backend argparse choices (server_args.py up to 0.5.19,
  arg_groups/fields/exec_.py from 0.5.20);
- `dsa_architectures`: the architectures of configs/model_config.py `is_deepseek_dsa` (`is_deepseek_nsa` to 0.5.12);
- `device_probes`: which device checks the DSA code paths name (`gfx1250`, `is_sm110_supported`,
  `is_sm100_supported`, `is_sm120_supported`), in layers/attention/dsa_backend.py (nsa_backend.py before
  0.5.13) and srt/utils/common.py;
- `attributes`: every ServerArgs attribute the release declares (server_args.py dataclass fields up to
  0.5.19, arg_groups/fields/*.py from 0.5.20), for the argument names the policy reads.

    python scripts/sglang_oracle/freshness.py --wheels /tmp/wheels --write   # tests/data/sglang/freshness/<X>.json

tests/check/test_catalog_freshness.py compares the committed lists with the catalog (CI, no wheels) and,
with NSA_POLICY_SGLANG_WHEELS set, re-reads the wheels and requires the committed lists to be current.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "sglang" / "freshness"
RELEASES = ("0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
            "0.5.20", "0.5.21", "0.5.22", "0.5.23")
PROBES = ("gfx1250", "is_sm110_supported", "is_sm100_supported", "is_sm120_supported")


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _module_lists(tree: ast.Module) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.List, ast.Tuple)):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = _strings(n.value)
    return out


def _choices_from_call(call: ast.Call, lists: dict[str, list[str]]) -> Optional[list[str]]:
    for kw in call.keywords:
        if kw.arg == "choices":
            if isinstance(kw.value, (ast.List, ast.Tuple)):
                return _strings(kw.value)
            if isinstance(kw.value, ast.Name) and kw.value.id in lists:
                return lists[kw.value.id]
    return None


def backends(files: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    sa = files.get("sglang/srt/server_args.py", "")
    tree = ast.parse(sa)
    lists = _module_lists(tree)
    for node in ast.walk(tree):  # parser.add_argument("--dsa-prefill-backend", ..., choices=X)
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            flag = node.args[0].value
            for phase in ("prefill", "decode"):
                if flag in (f"--nsa-{phase}-backend", f"--dsa-{phase}-backend"):
                    ch = _choices_from_call(node, lists)
                    if ch and phase not in found:
                        found[phase] = ch
    for path, text in files.items():  # 0.5.20+: dsa_prefill_backend: A[Optional[str], Arg(choices=[...])]
        if path.startswith("sglang/srt/arg_groups/fields/"):
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    for phase in ("prefill", "decode"):
                        if node.target.id == f"dsa_{phase}_backend":
                            for call in (c for c in ast.walk(node.annotation) if isinstance(c, ast.Call)):
                                ch = _choices_from_call(call, lists)
                                if ch:
                                    found[phase] = ch
    return found


def dsa_architectures(files: dict[str, str]) -> list[str]:
    tree = ast.parse(files["sglang/srt/configs/model_config.py"])
    # is_deepseek_nsa up to 0.5.12, is_deepseek_dsa from 0.5.13
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("is_deepseek_dsa", "is_deepseek_nsa"))
    return sorted({s for s in _strings(fn) if s.endswith(("ForCausalLM", "ForConditionalGeneration", "NextN"))})


PROBE_FILES = ("sglang/srt/layers/attention/dsa_backend.py", "sglang/srt/layers/attention/nsa_backend.py",
               "sglang/srt/utils/common.py")  # common.py defines the probes (is_sm110_supported from 0.5.22)


def device_probes(files: dict[str, str]) -> list[str]:
    text = "".join(files.get(p, "") for p in PROBE_FILES)
    return sorted(p for p in PROBES if p in text)


def attributes(files: dict[str, str]) -> list[str]:
    names: set[str] = set()
    for path, text in files.items():
        if path == "sglang/srt/server_args.py" or path.startswith("sglang/srt/arg_groups/fields/"):
            tree = ast.parse(text)
            for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
                for st in cls.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        names.add(st.target.id)
    return sorted(names)


def read_wheel(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as z:
        wanted = [n for n in z.namelist() if n in (
            "sglang/srt/server_args.py", "sglang/srt/configs/model_config.py", *PROBE_FILES)
            or (n.startswith("sglang/srt/arg_groups/fields/") and n.endswith(".py"))]
        files = {n: z.read(n).decode() for n in wanted}
    return {"wheel": wheel.name, "backends": backends(files), "dsa_architectures": dsa_architectures(files),
            "device_probes": device_probes(files), "attributes": attributes(files)}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, required=True)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    for rel in RELEASES:
        wheel = next(iter(sorted(args.wheels.glob(f"sglang-{rel}-*.whl"))), None)
        if wheel is None:
            print(f"{rel}: no wheel in {args.wheels}; skipped", file=sys.stderr)
            continue
        data = read_wheel(wheel)
        print(f"{rel}: prefill {len(data['backends'].get('prefill', []))} / decode {len(data['backends'].get('decode', []))} "
              f"backends, {len(data['dsa_architectures'])} DSA architectures, probes {data['device_probes']}, "
              f"{len(data['attributes'])} attributes")
        if args.write:
            OUT.mkdir(parents=True, exist_ok=True)
            (OUT / f"{rel}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
