"""A cold `nsa-policy resolve` reads only the bundle it is asked for and that bundle's ancestors
(issue 11, deliverable 6): start-up costs one `extends` chain however many bundles ship.

Each case runs the CLI in a fresh interpreter with an audit hook on `open`, and compares the bundle
folders whose files it opened with the chain read from the bundle.yaml files here (not the engine's).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import nsa_policy
from nsa_policy.base.paths import policy_dir
from nsa_policy.core.bundle import release_bundle

# Runs in the child: record every file opened, then run the CLI as `nsa-policy ARGS`.
CHILD = """
import json, os, sys
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.append(os.fsdecode(args[0]))
sys.addaudithook(hook)
out, sys.argv = sys.argv[1], ["nsa-policy"] + sys.argv[2:]
from nsa_policy.cli import main
try:
    main()
except SystemExit:
    pass
with open(out, "w") as f:
    json.dump(opened, f)
"""


def chain(bundle: str) -> set[str]:
    """The bundle and its ancestors, following `extends:` in the shipped bundle.yaml files."""
    found: set[str] = set()
    name: str | None = bundle
    while name is not None and name not in found:
        found.add(name)
        head = yaml.safe_load((policy_dir() / name / "bundle.yaml").read_text(encoding="utf-8"))
        name = head.get("extends")
    return found


def folders_read(tmp_path: Path, *args: str, snapshots: bool = False) -> set[str]:
    log = tmp_path / "opened.json"
    # the child imports the package this test imported (a checkout's or an installed one), so both
    # see the same rules folder; cwd is a bare folder, so nothing else there shadows it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(nsa_policy.__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    env.pop("NSA_POLICY_NO_SNAPSHOT", None)
    if not snapshots:  # parse the rules, as a first process (or a read-only install without a cache) does
        env["NSA_POLICY_NO_SNAPSHOT"] = "1"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(log), "resolve", *args, "--json"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["policy"]  # it did resolve
    root = policy_dir().resolve()
    read = set()
    for path in json.loads(log.read_text()):
        p = Path(path).resolve()
        if p.is_relative_to(root) and p != root:
            read.add(p.relative_to(root).parts[0])
    return read


@pytest.mark.parametrize("policy", ["default", "sglang-0.5.10", "sglang-0.5.23", "sglang-pre-21783"])
def test_cold_resolve_reads_only_the_bundle_and_its_ancestors(tmp_path: Path, policy: str) -> None:
    answering = release_bundle(policy) or policy  # sglang-0.5.23 is answered by the newest bundle at or below it
    expected = chain(answering)
    read = folders_read(tmp_path, "--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--policy", policy)
    assert read == expected
    shipped = {p.name for p in policy_dir().iterdir() if (p / "bundle.yaml").is_file()}
    if policy == "default":  # the point of the test: other bundles ship and were not read
        assert shipped - expected


@pytest.mark.parametrize("policy", ["default", "sglang-0.5.23"])
def test_a_cold_resolve_from_the_snapshots_reads_no_rule_file_at_all(tmp_path: Path, policy: str) -> None:
    args = ("--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--policy", policy)
    folders_read(tmp_path, *args, snapshots=True)  # writes the snapshots (the package folder, else ~/.cache)
    # the compiled bundle and the catalog come from their snapshots: the rule files are only stat'ed
    assert folders_read(tmp_path, *args, snapshots=True) == set()
