"""Memoised decisions are shared: no caller can change what another caller gets."""
from __future__ import annotations

import copy
import json
import pickle

import pytest

import nsa_policy


def _resolve():
    return nsa_policy.resolve({}, device="h200", model="deepseek-ai/DeepSeek-V3.2", env={},
                              packages={"flashinfer-python": "0.6.7.post2"})


@pytest.mark.parametrize("mutate", [
    lambda d: d.padded_heads.__setitem__("prefill", 999),
    lambda d: d.provenance.clear(),
    lambda d: d.provenance.pop("kv_cache_dtype"),
    lambda d: d.padded_heads.update({"decode": 1}),
    lambda d: d.inputs.env.packages.__setitem__("flashinfer-python", "9.9"),
    lambda d: d.inputs.env.variables.setdefault("SGLANG_USE_AITER", "1"),
])
def test_one_caller_cannot_change_anothers_result(mutate):
    first = _resolve()
    before = json.dumps(first.model_dump(mode="json"), sort_keys=True)
    with pytest.raises(TypeError):
        mutate(first)
    second = _resolve()
    assert json.dumps(second.model_dump(mode="json"), sort_keys=True) == before


def test_frozen_mappings_still_serialise_copy_and_pickle():
    d = _resolve()
    assert dict(d.padded_heads) == {"prefill": 128, "decode": 128}
    again = pickle.loads(pickle.dumps(d))
    assert again.model_dump() == d.model_dump()
    assert copy.deepcopy(d).model_dump() == d.model_dump()
    mine = dict(d.provenance)  # a caller who wants to edit takes a copy
    mine.clear()
    assert d.provenance
