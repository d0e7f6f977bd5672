"""The catalog is current with the sglang wheels it reproduces (issue 21, deliverable 4).

tests/data/sglang/freshness/<X>.json holds what scripts/sglang_oracle/freshness.py read from each wheel
(0.5.10-0.5.23): the --dsa-*-backend choices, the architectures of is_deepseek_dsa, the device checks the
DSA code names, and the ServerArgs attributes. CI checks the catalog against these committed lists; with
NSA_POLICY_SGLANG_WHEELS=<folder of wheels> the lists are re-read from the wheels and must equal the
committed ones (opt-in, skipped cleanly without them).
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from nsa_policy.catalog.store import load_catalog
from nsa_policy.engines.sglang.args import load_args

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "sglang" / "freshness"
PARSERS = REPO / "benchmarks" / "results" / "sglang-parsers"
RELEASES = sorted((p.stem for p in DATA.glob("*.json")), key=lambda r: tuple(int(x) for x in r.split(".")))


def _lists(release: str) -> dict:
    return json.loads((DATA / f"{release}.json").read_text())


def test_every_release_of_the_registry_has_lists() -> None:
    plain = [r for r in load_args().releases if "post" not in r]
    assert RELEASES == plain, f"freshness lists for {RELEASES}, registry releases {plain}"


@pytest.mark.parametrize("release", RELEASES)
def test_backend_choices_are_the_catalogs(release: str) -> None:
    cat = load_catalog()
    got = _lists(release)["backends"]
    assert set(got) == {"prefill", "decode"}
    for phase, names in got.items():
        unknown = set(names) - set(cat.backend_names)
        assert not unknown, f"{release} {phase}: not in backends.yaml: {unknown}"
        assert set(names) == set(cat.sglang_choices(release, phase)), (
            f"{release} {phase}: the wheel lists {sorted(names)}, backends.yaml sglang_choice says "
            f"{sorted(cat.sglang_choices(release, phase))}")


@pytest.mark.parametrize("release", RELEASES)
def test_text_reading_matches_the_real_parser_dump(release: str) -> None:
    """The wheel read as text gives the same choices as the release's own parser (dump_parser.py)."""
    dump = json.loads((PARSERS / f"{release}.json").read_text())
    by_dest = {a["dest"]: a for a in dump["actions"]}
    got = _lists(release)["backends"]
    for phase in ("prefill", "decode"):
        dest = next(d for d in (f"dsa_{phase}_backend", f"nsa_{phase}_backend") if d in by_dest)
        assert got[phase] == by_dest[dest]["choices"], (release, phase)


@pytest.mark.parametrize("release", RELEASES)
def test_dsa_architectures_are_catalogued(release: str) -> None:
    cat = load_catalog()
    archs = _lists(release)["dsa_architectures"]
    assert archs, release
    missing = [a for a in archs if a not in cat.arch_family]
    assert not missing, f"sglang {release} is_deepseek_dsa lists {missing}, which no family of models.yaml names"


@pytest.mark.parametrize("release", RELEASES)
def test_argument_attributes_the_policy_reads_exist(release: str) -> None:
    reg = load_args()
    have = set(_lists(release)["attributes"])
    missing = []
    for arg in reg.doc.arguments:
        attr = reg.attribute_for(arg.name, release)
        if attr is not None and not any(a.nsa_policy_only for a in arg.attributes if a.name == attr) and attr not in have:
            missing.append(f"{arg.name} ({attr})")
    assert not missing, f"rules/catalog/sglang/args.yaml says sglang {release} holds {missing}; its ServerArgs does not"


# A device check sglang's DSA code or its utils name → the (vendor, compute capability) a catalog class must have.
PROBE_CLASSES = {"gfx1250": ("amd", (12, 5)), "is_sm110_supported": ("nvidia", (11, 0)),
                 "is_sm100_supported": ("nvidia", (10, 0)), "is_sm120_supported": ("nvidia", (12, 0))}


def test_device_checks_of_the_dsa_code_have_classes() -> None:
    cat = load_catalog()
    probes = {p for r in RELEASES for p in _lists(r)["device_probes"]}
    assert {"gfx1250", "is_sm110_supported"} <= probes, probes  # 0.5.19+ and 0.5.22+ name them
    assert probes <= set(PROBE_CLASSES), f"a probe with no class mapping here: {probes - set(PROBE_CLASSES)}"
    have = {(spec.vendor, spec.compute_capability) for spec in cat.device_doc.classes.values()}
    missing = {p: PROBE_CLASSES[p] for p in probes if PROBE_CLASSES[p] not in have}
    assert not missing, f"devices.yaml has no class for {missing}"


WHEELS = os.environ.get("NSA_POLICY_SGLANG_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="set NSA_POLICY_SGLANG_WHEELS to a folder of sglang wheels (opt-in)")
@pytest.mark.parametrize("release", RELEASES)
def test_committed_lists_are_the_wheels(release: str) -> None:
    spec = importlib.util.spec_from_file_location("freshness", REPO / "scripts" / "sglang_oracle" / "freshness.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    wheel = next(iter(sorted(Path(str(WHEELS)).glob(f"sglang-{release}-*.whl"))), None)
    if wheel is None:
        pytest.skip(f"no sglang {release} wheel in {WHEELS}")
    assert mod.read_wheel(wheel) == _lists(release)
