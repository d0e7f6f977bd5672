"""The contract cases (../shared/spec/cases, read in place, never copied) and how a case becomes inputs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("NSA_POLICY_SHARED", REPO.parent / "shared"))
CASES_DIR = SHARED / "spec" / "cases"


def case_files() -> list[Path]:
    if not CASES_DIR.is_dir():
        pytest.fail(f"the contract cases folder {CASES_DIR} is missing: the tests read the worked cases from "
                    f"../shared/spec/cases (set NSA_POLICY_SHARED to the shared folder to point elsewhere)",
                    pytrace=False)
    files = sorted(CASES_DIR.glob("*.yaml"))
    if not files:
        pytest.fail(f"no case files in {CASES_DIR}", pytrace=False)
    return files


def load_cases() -> list[tuple[str, dict]]:
    """(policy, case) for every case of every file."""
    out = []
    for path in case_files():
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            out.append((doc["policy"], case))
    return out



CLI_FLAGS = {
    "kv_cache_dtype": "--kv-cache-dtype", "nsa_prefill_backend": "--nsa-prefill-backend",
    "nsa_decode_backend": "--nsa-decode-backend", "tp_size": "--tp-size", "dp_size": "--dp-size",
    "quantization": "--quantization", "page_size": "--page-size",
    "dense_attn_kv_len_threshold": "--dense-attn-kv-len-threshold",
    "speculative_algorithm": "--speculative-algorithm", "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_steps": "--speculative-num-steps", "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
}
BOOL_FLAGS = {"enable_dp_attention": "--enable-dp-attention", "enable_hisparse": "--enable-hisparse",
              "disable_radix_cache": "--disable-radix-cache"}


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
