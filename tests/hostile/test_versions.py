"""Versions (PEP 440) and distribution names (PEP 503) as the packaging ecosystem defines them."""
from __future__ import annotations

import pytest

from nsa_policy.base.errors import InputError
from nsa_policy.base.versions import canonical_name, parse_version, version_ge


@pytest.mark.parametrize("have", ["0.6.7+cu130", "0.6.13rc1", "0.6.1a4", "0.6.13", "0.6.13.post1", "0.6.14.dev0"])
def test_pre_local_and_older_releases_are_below(have):
    assert not version_ge(have, "0.6.14")


@pytest.mark.parametrize("have", ["0.6.14", "0.6.14+cu130", "0.6.14.post1", "0.7.4", "1.0"])
def test_at_or_above(have):
    assert version_ge(have, "0.6.14")


def test_post_release_orders_after_its_release():
    assert version_ge("0.6.7.post2", "0.6.7") and not version_ge("0.6.7", "0.6.7.post2")


@pytest.mark.parametrize("name", ["flashinfer_python", "FlashInfer-Python", "flashinfer.python", "FLASHINFER__PYTHON"])
def test_pep503_names(name):
    assert canonical_name(name) == "flashinfer-python"


@pytest.mark.parametrize("bad", ["garbage", "", "=0.6.13", "0.6.x", None])
def test_not_a_version_is_an_input_error(bad):
    with pytest.raises(InputError) as info:
        parse_version(bad, field="--package flashinfer-python")
    assert "--package flashinfer-python" in str(info.value)
