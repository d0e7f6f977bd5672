"""sglang release names resolve to the newest compatibility bundle at or below them (issue 11)."""
from __future__ import annotations

import pytest

from nsa_policy.base.errors import InputError
from nsa_policy.base.versions import parse_version
from nsa_policy.core.bundle import get_bundle, list_bundles, release_bundle


def _release_bundles() -> list[tuple[object, str]]:
    return sorted((parse_version(b[len("sglang-"):]), b) for b in list_bundles()
                  if b.startswith("sglang-") and b[len("sglang-"):][:1].isdigit())


def test_shipped_names_resolve_to_themselves() -> None:
    for _, name in _release_bundles():
        assert release_bundle(name) == name
        assert get_bundle(name).name == name


@pytest.mark.parametrize("suffix", [".post1", ".post2"])
def test_post_releases_take_their_release(suffix: str) -> None:
    for _, name in _release_bundles():
        assert release_bundle(name + suffix) == name


def test_a_release_without_a_bundle_takes_the_newest_below() -> None:
    bundles = _release_bundles()
    newest_v, newest = bundles[-1]
    later = f"sglang-{newest_v.major}.{newest_v.minor}.{newest_v.micro + 1}"
    assert release_bundle(later) == newest
    bundle = get_bundle(later)
    assert bundle.name == newest  # the decision's `policy` names the bundle that answered
    for (v, name), (v_next, _) in zip(bundles, bundles[1:]):
        # a release strictly between two bundles is answered by the older one
        if v.micro + 1 < v_next.micro:
            assert release_bundle(f"sglang-{v.major}.{v.minor}.{v.micro + 1}") == name


def test_too_old_or_not_a_release() -> None:
    with pytest.raises(InputError, match="no compatibility bundle"):
        release_bundle("sglang-0.5.1")
    with pytest.raises(InputError, match="no compatibility bundle"):
        release_bundle("sglang-0.5.10rc0")
    assert release_bundle("default") is None
    assert release_bundle("sglang-pre-21783") is None
    with pytest.raises(InputError):
        get_bundle("sglang-latest")


def test_policies_lists_the_releases_each_bundle_answers_for() -> None:
    import json

    from typer.testing import CliRunner

    from nsa_policy.cli import app
    from nsa_policy.engines.sglang.args import load_args

    result = CliRunner().invoke(app, ["policies", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    listed = [rel for r in rows.values() for rel in r["releases"]]
    assert len(listed) == len(set(listed))  # each release answered by one bundle
    for _, name in _release_bundles():
        assert name[len("sglang-"):] in rows[name]["releases"]
        assert rows[name]["description"]
    for rel in load_args().releases:
        if parse_version(rel) >= parse_version("0.5.10"):
            assert rel in listed
    assert rows["default"]["releases"] == []
