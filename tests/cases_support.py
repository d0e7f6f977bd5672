"""The contract cases and how a case becomes inputs.

The repository carries its own copy in tests/cases, so a plain clone passes. When the shared
spec folder sits beside the checkout (../shared/spec/cases, or NSA_POLICY_SHARED), its cases are
read as well: a case there that the copy lacks is run too, and a case of the same name must agree.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
VENDORED_DIR = REPO / "tests" / "cases"
SHARED = Path(os.environ.get("NSA_POLICY_SHARED", REPO.parent / "shared"))
CASES_DIR = SHARED / "spec" / "cases"


# Shared cases the released wheels disprove (the wheel's code wins): the vendored copy carries the
# corrected case and the shared one is not compared with it. (policy, name) → the wheel's evidence.
_TP_DEFAULT = ("sglang 0.5.10 server_args.py: tp_size defaults to 1 and ServerArgs._handle_data_parallelism asserts "
               "tp_size % dp_size == 0 with DP attention, so --dp-size 8 --enable-dp-attention alone is refused; "
               "the expected outputs are those of --tp-size 8")
ERRATA: dict[tuple[str, str], str] = {
    ("sglang-0.5.10", "b200-deepseek-fp8-dp8"): _TP_DEFAULT,
    ("sglang-0.5.10", "b200-bf16-user-prefill-trtllm"): _TP_DEFAULT,
}


def case_files() -> list[Path]:
    """The vendored case files, then those of the shared folder when it is present."""
    files = sorted(VENDORED_DIR.glob("*.yaml"))
    if not files:
        pytest.fail(f"no case files in {VENDORED_DIR}", pytrace=False)
    if CASES_DIR.is_dir():
        files += sorted(CASES_DIR.glob("*.yaml"))
    return files


def load_cases() -> list[tuple[str, dict]]:
    """(policy, case) for every case of every file; a case in both copies is run once."""
    out: list[tuple[str, dict]] = []
    seen: dict[tuple[str, str], dict] = {}
    for path in case_files():
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for case in doc["cases"]:
            key = (doc["policy"], case["name"])
            if key in seen:
                if seen[key] != case and key not in ERRATA:
                    pytest.fail(f"case {key} differs between tests/cases and {path}: refresh the vendored copy",
                                pytrace=False)
                continue
            seen[key] = case
            out.append((doc["policy"], case))
    return out


def _cli_flags() -> tuple[dict[str, str], dict[str, str]]:
    """Case input key (a ServingConfig field or one of its aliases) → resolve's flag, from the argument
    registry: valued, switches."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    valued, switches = {}, {}
    for arg in reg.arguments.values():
        if arg.field is None or arg.field == "model_path":
            continue
        (switches if arg.type == "bool" else valued)[arg.field] = reg.cli_flags(arg.name)[0]
    # the case vocabulary's other names for a field (nsa_prefill_backend for prefill_backend)
    for alias, field in reg.field_aliases().items():
        for table in (valued, switches):
            if field in table:
                table.setdefault(alias, table[field])
    return valued, switches


CLI_FLAGS, BOOL_FLAGS = _cli_flags()


def split(case_input: dict) -> tuple[str, Any, dict, dict]:
    """(device, model, config mapping, env) for the library."""
    inp = dict(case_input)
    env = {k[4:]: str(inp.pop(k)) for k in list(inp) if k.startswith("env:")}
    device = inp.pop("device")
    model = inp.pop("model", None)
    if model is None:
        model = {"architectures": [inp.pop("arch")]}
        for key in ("index_topk", "num_attention_heads"):
            if key in inp:
                model[key] = inp.pop(key)
    return device, model, inp, env


def cli_args(case_input: dict, policy: str) -> tuple[list[str], dict]:
    inp = dict(case_input)
    env = {k[4:]: str(inp.pop(k)) for k in list(inp) if k.startswith("env:")}
    args = ["resolve", "--json", "--policy", policy, "--device", str(inp.pop("device"))]
    if "model" in inp:
        args += ["--model", inp.pop("model")]
    else:
        args += ["--arch", inp.pop("arch")]
        if "index_topk" in inp:
            args += ["--index-topk", str(inp.pop("index_topk"))]
        if "num_attention_heads" in inp:
            args += ["--num-attention-heads", str(inp.pop("num_attention_heads"))]
    for key, value in inp.items():
        if key in BOOL_FLAGS:
            if value:
                args.append(BOOL_FLAGS[key])
        else:
            args += [CLI_FLAGS[key], str(value)]
    return args, env


def check_expectations(expect: dict, decision: dict, exit_code: int | None = None) -> list[str]:
    """Compare a decision (as JSON) with a case's `expect`; return the mismatches."""
    problems = []
    for key, want in expect.items():
        if key == "rejected":
            got = bool(decision["errors"])
            if exit_code is not None and want and exit_code != 1:
                problems.append(f"rejected case exited {exit_code}, expected 1")
        elif key == "applies":
            got = decision["applies"]
        elif key == "warning_codes_nonempty":
            got = bool(decision["warnings"])
        else:
            got = decision[key]
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    if exit_code is not None and not expect.get("rejected") and exit_code != 0:
        problems.append(f"exit code {exit_code} for a case that is not rejected; errors: {decision['errors']}")
    return problems
