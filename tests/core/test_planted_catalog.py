"""A new device class or a new backend is one catalog entry, and every surface knows it.

The rules are copied to a temporary folder; one device class (a copy of sm100 with capability 11.5, which
no real class has, plus one device of that class) and one backend (running bf16 on that class only) are planted in
rules/catalog, and the CLI runs against the copy (NSA_POLICY_RULES_DIR; rules_dir() is cached per
process, so each command runs in a subprocess). No code, and no rule file outside rules/catalog/,
is touched.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nsa_policy.base.paths import rules_dir

CLASS, CAPABILITY, DEVICE, PRODUCT = "sm115", (11, 5), "b400", "NVIDIA B400"
BACKEND, PACKAGE = "planted_sparse", "planted-kernels"
MODEL = "deepseek-ai/DeepSeek-V3.2"


def _plant(root: Path) -> None:
    """Add the two entries the way an operator would: by editing the catalog YAML only."""
    devices = root / "catalog" / "devices.yaml"
    doc = yaml.safe_load(devices.read_text(encoding="utf-8"))
    template = doc["classes"]["sm100"]
    doc["classes"][CLASS] = {**template, "compute_capability": list(CAPABILITY),
                             "description": "planted: a copy of sm100 with capability 11.5"}
    doc["devices"][DEVICE] = {"class": CLASS, "product": PRODUCT, "nvml_names": [PRODUCT],
                              "memory_gb": 288, "sm_count": 160}
    devices.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    backends = root / "catalog" / "backends.yaml"
    doc = yaml.safe_load(backends.read_text(encoding="utf-8"))
    doc["backends"][BACKEND] = {
        "description": "planted backend: bf16 sparse MLA on sm110",
        "package": PACKAGE,
        "phases": ["prefill", "decode"],
        "kv_layouts": {"bfloat16": "bf16-576"},
        "sglang_choice": {"since": "0.5.99"},
        "cells": [{"devices": [CLASS], "phases": ["prefill", "decode"], "kv": ["bfloat16"], "status": "supported"}],
        "elsewhere": f"{BACKEND} is built for {CLASS} only",
    }
    backends.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("planted") / "rules"
    shutil.copytree(rules_dir(), root, ignore=shutil.ignore_patterns("__pycache__"))
    _plant(root)
    return root


def _run(rules: Path, *args: str, cwd: Path | None = None, code: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NSA_POLICY_RULES_DIR": str(rules)}
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", "nsa_policy.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def _ok(proc: subprocess.CompletedProcess, codes: tuple[int, ...] = (0,)) -> str:
    assert proc.returncode in codes, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def test_devices_lists_the_class_and_the_device(planted: Path) -> None:
    out = _ok(_run(planted, "devices"))
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows[DEVICE][1] == CLASS and "11.5" in rows[DEVICE]
    assert rows[CLASS][1] == CLASS and "11.5" in rows[CLASS]


def test_backends_lists_the_backend_and_where_it_runs(planted: Path) -> None:
    out = _ok(_run(planted, "backends"))
    block = out[out.index(BACKEND):]
    assert re.search(rf"{CLASS}\s+prefill/bfloat16, decode/bfloat16", block), block[:400]


@pytest.mark.parametrize("device", [CLASS, DEVICE])
def test_resolve_by_capability_spec_and_by_name(planted: Path, device: str) -> None:
    out = _ok(_run(planted, "resolve", "--device", device, "--model", MODEL, "--kv-cache-dtype", "bfloat16",
                   "--nsa-prefill-backend", BACKEND, "--nsa-decode-backend", BACKEND, "--json"))
    decision = json.loads(out)
    assert decision["device_class"] == CLASS and decision["errors"] == []
    assert (decision["prefill_backend"], decision["decode_backend"]) == (BACKEND, BACKEND)
    assert decision["kv_cache_layout"] == "bf16-576"
    # the catalog's MHA gate (sm90, sm100-sm109) does not cover capability 11.5
    assert decision["runtime"]["mha_one_shot"] is False


def test_resolve_offers_the_new_backend_as_the_alternative_on_the_new_class(planted: Path) -> None:
    out = _ok(_run(planted, "resolve", "--device", DEVICE, "--model", MODEL, "--kv-cache-dtype", "bfloat16",
                   "--nsa-prefill-backend", "trtllm", "--json"), codes=(1,))
    errors = json.loads(out)["errors"]
    nsa101 = [e for e in errors if e["code"] == "NSA101"]
    assert nsa101 and BACKEND in nsa101[0]["alternatives"], errors


def test_unknown_backend_lists_the_new_backend(planted: Path) -> None:
    out = _ok(_run(planted, "resolve", "--device", "h200", "--model", MODEL,
                   "--nsa-prefill-backend", "no_such_backend", "--json"), codes=(1,))
    nsa002 = [e for e in json.loads(out)["errors"] if e["code"] == "NSA002"]
    assert nsa002 and BACKEND in nsa002[0]["alternatives"]


def test_an_unknown_class_names_the_new_one_among_the_valid(planted: Path) -> None:
    proc = _run(planted, "resolve", "--device", "sm111", "--model", MODEL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert CLASS in proc.stderr and DEVICE in proc.stderr


def test_matrix_has_a_column_and_a_row(planted: Path) -> None:
    out = _ok(_run(planted, "matrix"))
    header = next(line for line in out.splitlines() if line.startswith("| backend"))
    assert CLASS in header
    rows = [line for line in out.splitlines() if line.startswith(f"| `{BACKEND}`")]
    assert len(rows) == 2 and all("✅" in r for r in rows)


def test_lint_checks_a_launch_on_the_new_device_with_the_new_backend(planted: Path, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(f"python -m sglang.launch_server --model-path {MODEL} --kv-cache-dtype bfloat16 "
                      f"--nsa-prefill-backend {BACKEND} --nsa-decode-backend {BACKEND}\n", encoding="utf-8")
    report = json.loads(_ok(_run(planted, "lint", "--device", DEVICE, "--format", "json", str(script))))
    assert report["summary"]["launches"] == 1 and report["summary"]["errors"] == 0, report
    # elsewhere, the backend is refused with the catalog's own reason
    report = json.loads(_ok(_run(planted, "lint", "--device", "h200", "--format", "json", str(script)), codes=(1,)))
    messages = [d["message"] for d in report["diagnostics"] if d["code"] == "NSA101"]
    assert messages and all(f"{BACKEND} is built for {CLASS} only" in m for m in messages)


def test_check_enumerates_the_new_class_and_backend(planted: Path) -> None:
    # The exhaustive check runs over a space that holds the new class (a device of its own: no other
    # class decides alike) and the new backend as an explicit choice on each side.
    report = json.loads(_ok(_run(planted, "check", "--policy", "default", "--json"), codes=(0, 1)))
    (bundle,) = report["bundles"]
    dims = {b["block"]: b["dimensions"] for b in bundle["space"]}["backends"]
    assert CLASS in dims["device"]
    assert BACKEND in dims["prefill"] and BACKEND in dims["decode"]
    # What it finds, it finds on the new class only (the `default` bundle has no KV default for a
    # class its rules do not name); the shipped classes stay clean.
    for issue in bundle["issues"]:
        assert issue["example"]["input"]["device"] == CLASS, issue


def test_runtime_refusal_names_the_new_backend_and_class(planted: Path) -> None:
    pytest.importorskip("torch")
    code = ("from types import SimpleNamespace\n"
            "from nsa_policy.runtime.adapter import SparseMLAAdapter, OTHER_PACKAGES\n"
            "from nsa_policy.runtime.errors import AdapterConfigError\n"
            f"d = SimpleNamespace(errors=[], applies=True, prefill_backend={BACKEND!r}, decode_backend={BACKEND!r},\n"
            "    kv_cache_layout='bf16-576', page_size=64, index_topk=2048, heads_per_rank=128, device_class='sm110',\n"
            "    kv_cache_dtype='bfloat16')\n"
            "try:\n"
            f"    SparseMLAAdapter.from_decision(d, device='cpu', device_class={CLASS!r})\n"
            "except AdapterConfigError as e:\n"
            "    print(e)\n"
            f"print('OTHER', OTHER_PACKAGES.get({BACKEND!r}))\n")
    out = _ok(_run(planted, code=code))
    assert f"'{BACKEND}' on {CLASS}" in out and f"served by {PACKAGE}" in out
    assert f"OTHER {PACKAGE}" in out


def test_planner_reads_the_catalog_gate(planted: Path) -> None:
    code = ("from nsa_policy.runtime.planner import mha_one_shot_supported as m\n"
            f"print(m({CLASS!r}), m('sm100'), m('sm90'), m('sm120'))\n")
    assert _ok(_run(planted, code=code)).split() == ["False", "True", "True", "False"]


# ---------------------------------------------------------------- in-process: the catalog's own checks

def test_a_cell_naming_an_unknown_class_is_a_file_line_error(tmp_path: Path) -> None:
    from nsa_policy.base.errors import RuleFileError
    from nsa_policy.catalog.store import Catalog

    root = tmp_path / "catalog"
    shutil.copytree(rules_dir() / "catalog", root)
    text = (root / "backends.yaml").read_text(encoding="utf-8")
    (root / "backends.yaml").write_text(text.replace("devices: [sm90]", "devices: [sm91]", 1), encoding="utf-8")
    with pytest.raises(RuleFileError) as err:
        Catalog(root)
    message = str(err.value)
    assert "backends.yaml:" in message and "'sm91' is not a device class of devices.yaml" in message
    assert "\n" not in message and "sm90" in message  # one line, with the valid classes


def test_device_facts_from_outside_must_name_a_catalog_class() -> None:
    import nsa_policy
    from nsa_policy.core.facts import DeviceFacts

    stranger = DeviceFacts(name="x", device_class="sm111", vendor="nvidia", compute_capability=(11, 1))
    with pytest.raises(nsa_policy.InputError) as err:
        nsa_policy.resolve({}, device=stranger, model=MODEL)
    assert "device.device_class" in str(err.value) and "sm100" in str(err.value)


@pytest.mark.parametrize("policy, release", [("default", None), ("sglang-0.5.10", "0.5.10"),
                                             ("sglang-0.5.17", "0.5.17"), ("sglang-0.5.18", "0.5.18")])
def test_policy_and_planner_read_one_mha_gate(policy: str, release: str | None) -> None:
    # A bundle's runtime.mha_one_shot and the per-batch planner's gate agree on every catalog class
    # (a compat bundle: the gate of its sglang release).
    import nsa_policy
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.core.bundle import list_bundles
    from nsa_policy.runtime.planner import mha_one_shot_supported

    if policy not in list_bundles():
        pytest.skip(f"no {policy} bundle")
    catalog = load_catalog()
    for cls in catalog.device_classes:
        facts = nsa_policy.build_facts({}, device=cls, model=MODEL, env={}, packages={})
        decision = nsa_policy.decide(facts, policy)
        assert decision.runtime.mha_one_shot is mha_one_shot_supported(cls, release), (policy, cls)
        assert catalog.class_mha_one_shot(cls, release) is mha_one_shot_supported(cls, release), cls
    assert {mha_one_shot_supported(c, release) for c in catalog.device_classes} == {True, False}
