"""Shared, expensive results for the check tests: each bundle is evaluated over the space once per session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def shipped_reports():
    from nsa_policy.verify.exhaustive import check_bundle, checked_bundles

    # the bundles `check` checks: every registered engine's
    return {name: check_bundle(name) for name in checked_bundles()}


@pytest.fixture(scope="session")
def sglang_diff():
    from nsa_policy.core.bundle import get_bundle
    from nsa_policy.verify.diff import diff_space

    return diff_space(get_bundle("sglang-pre-21783"), get_bundle("sglang-0.5.10"))
