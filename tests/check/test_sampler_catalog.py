"""The differential sampler draws every catalog model, each with the config.json the catalog describes.

benchmarks/sglang_release_sample.py's CATALOG_CONFIGS gives each catalog model an oracle config
(scripts/sglang_oracle/policy_oracle.py's BASES plus overrides) that sglang's real pipeline loads. A model added
to rules/catalog/models.yaml without one would never be drawn (GLM-5.2, 5.3 and 5.3-Flash were not, issue 21),
and a config that drifts from the catalog entry would test another model.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from nsa_policy.catalog.store import load_catalog

REPO = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


SAMPLER = _load("sglang_release_sample", REPO / "benchmarks" / "sglang_release_sample.py")
ORACLE = _load("policy_oracle", REPO / "scripts" / "sglang_oracle" / "policy_oracle.py")
CATALOG = load_catalog()


def test_every_catalog_model_has_an_oracle_config() -> None:
    assert set(SAMPLER.CATALOG_CONFIGS) == set(CATALOG.model_ids)
    assert set(SAMPLER.SAMPLE_MODELS) < set(CATALOG.model_ids)


@pytest.mark.parametrize("model_id", sorted(load_catalog().model_ids))
def test_the_oracle_config_is_the_catalog_model(model_id: str) -> None:
    base, overrides = SAMPLER.CATALOG_CONFIGS[model_id]
    config = {**ORACLE.BASES[base], **overrides}
    theirs = CATALOG.model_from_config(config, source="oracle config", model_id=model_id)
    mine = CATALOG.model(model_id)
    for field in ("architecture", "family", "index_topk", "num_attention_heads", "index_kpool", "index_topk_freq",
                  "learnable_sink"):
        assert getattr(theirs, field) == getattr(mine, field), (model_id, field)
    # a config without qk_rope_head_dim takes transformers' default (the family's): only a stated one must match
    if "qk_rope_head_dim" in config:
        assert config["qk_rope_head_dim"] == mine.qk_rope_head_dim, model_id


def test_the_catalog_draw_covers_every_catalog_model_and_keeps_the_recorded_draw() -> None:
    # seeded: the same inputs every time, every model among 2,000 of them
    release = "0.5.23"
    a = list(SAMPLER.sample(release, 2000, 21, catalog_only=True))
    assert a == list(SAMPLER.sample(release, 2000, 21, catalog_only=True))
    assert {i.get("catalog_model") for i in a} == set(CATALOG.model_ids)
    assert a[0]["id"] == 2_000_001
    # the plain draw never leaves SAMPLE_MODELS for its catalog models (the recorded 100,000-input runs replay)
    b = list(SAMPLER.sample(release, 2000, 21))
    assert {i.get("catalog_model") for i in b} - {None} <= set(SAMPLER.SAMPLE_MODELS)
