"""Wheel build hook: ship the parsed rules (nsa_policy/_rules_snapshot.pickle, see nsa_policy/base/rules_snapshot.py).

The plugins decide in every engine process they run in, each starting cold; parsing the rule YAML with
line numbers is a third of that first decision. The snapshot is built from this checkout's rules/ with
the package's own loader, so it holds exactly what load_yaml would return for each file's bytes.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class RulesSnapshotHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        sys.path.insert(0, self.root)
        try:
            from nsa_policy.base.rules_snapshot import build
            from nsa_policy.base.yaml_lines import parse_yaml
        finally:
            sys.path.remove(self.root)
        rules = Path(self.root) / "rules"
        parsed = {path.relative_to(rules).as_posix(): (path.read_bytes(), parse_yaml(path))
                  for path in sorted(rules.rglob("*.yaml"))}
        fd, self._snapshot = tempfile.mkstemp(suffix=".pickle")
        with os.fdopen(fd, "wb") as fh:
            fh.write(build(parsed))
        build_data["force_include"][self._snapshot] = "nsa_policy/_rules_snapshot.pickle"

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        snapshot = getattr(self, "_snapshot", None)
        if snapshot and os.path.exists(snapshot):
            os.unlink(snapshot)
