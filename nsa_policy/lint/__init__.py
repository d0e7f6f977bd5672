"""`nsa-policy lint`: find sglang launches in shell scripts, Dockerfiles, Kubernetes/Helm/compose YAML,
JSON/TOML config and .env files, and check each with the policy, at the line of the offending flag."""
from __future__ import annotations

from nsa_policy.lint.launch_checks import LintOptions
from nsa_policy.lint.runner import LintReport, lint_paths

__all__ = ["LintOptions", "LintReport", "lint_paths"]
