"""The argument registry (rules/catalog/sglang/args.yaml): its release facts, the tables derived from
it, the generated docs, and agreement with the released wheels and with real parser dumps."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from nsa_policy.core.facts import ServingConfig
from nsa_policy.engines.sglang.args import load_args

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
DUMPS = REPO / "benchmarks" / "results" / "sglang-parsers"
WHEELS = Path(os.environ.get("NSA_POLICY_SGLANG_WHEELS", REPO.parent / "wheels"))
THRESHOLD = "dense_attn_kv_len_threshold"
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"

reg = load_args()


@pytest.mark.parametrize("release, prefill_flag, old_status, env", [
    ("0.5.10", "--nsa-prefill-backend", "canonical", NSA_ENV),
    ("0.5.12.post1", "--nsa-prefill-backend", "canonical", NSA_ENV),
    ("0.5.13", "--dsa-prefill-backend", "deprecated", DSA_ENV),
    ("0.5.19", "--dsa-prefill-backend", "deprecated", DSA_ENV),
    ("0.5.20", "--dsa-prefill-backend", "removed", DSA_ENV),
    ("0.5.23", "--dsa-prefill-backend", "removed", DSA_ENV),
])
def test_the_rename_and_the_threshold_variable_per_release(release, prefill_flag, old_status, env) -> None:
    # SGLANG-RELEASES.md §3.1 and §3.3, checked against the wheels (below)
    assert reg.spelling_for("dsa_prefill_backend", release) == prefill_flag
    assert reg.status("--nsa-prefill-backend", release) == old_status
    assert reg.accepts("--nsa-prefill-backend", release) == (old_status != "removed")
    assert reg.env_var_read(THRESHOLD, release) == env


def test_the_old_threshold_variable_is_ignored_from_0_5_13_and_gone_from_0_5_21() -> None:
    entry = next(e for e in reg.argument(THRESHOLD).env if e.name == NSA_ENV)
    assert [r for r in reg.releases if entry.ignored_by(reg._rel(r))] == [
        r for r in reg.releases if "0.5.13" <= r.split(".post")[0] <= "0.5.20"]
    assert NSA_ENV in reg.env_vars_ignored(THRESHOLD, "0.5.21")
    assert reg.env_vars_ignored(THRESHOLD, "0.5.12") == {DSA_ENV: "first read in sglang 0.5.13"}


def test_dp_attention_and_backend_choices_by_release() -> None:
    assert reg.status("--enable-dp-attention", "0.5.21") == "canonical"
    assert reg.status("--enable-dp-attention", "0.5.22") == "deprecated"
    assert reg.spelling_for("attn_dp_size", "0.5.21") is None and reg.spelling_for("attn_dp_size", "0.5.22") == "--attn-dp-size"
    sizes = {r: len(reg.choices("dsa_prefill_backend", r)) for r in ("0.5.10", "0.5.16", "0.5.17", "0.5.20", "0.5.22")}
    assert sizes == {"0.5.10": 7, "0.5.16": 8, "0.5.17": 9, "0.5.20": 10, "0.5.22": 12}
    assert "triton_sparse_mla" not in reg.choices("dsa_decode_backend", "0.5.23")
    assert "fp4_e2m1" in reg.choices("kv_cache_dtype", "0.5.20") and "fp4_e2m1" not in reg.choices("kv_cache_dtype", "0.5.21")


def test_parser_dests_and_attributes_follow_the_release() -> None:
    assert reg.parser_dest_for("tp_size", "0.5.13") == "tensor_parallel_size"
    assert reg.parser_dest_for("tp_size", "0.5.14") == "tp_size"
    assert reg.attribute_for("dsa_decode_backend", "0.5.12") == "nsa_decode_backend"
    assert reg.attribute_for("dsa_decode_backend", "0.5.13") == "dsa_decode_backend"


def test_target_release() -> None:
    unknown = reg.target(None, "no sglang in /usr/bin/python3")
    assert unknown.version == reg.newest and unknown.note and "--sglang-version" in unknown.note
    newer = reg.target("0.6.1", "--sglang-version")
    assert not newer.known and "newer" in newer.note
    assert reg.spelling_for("dsa_prefill_backend", "0.6.1") == "--dsa-prefill-backend"
    assert reg.target("0.5.23+cu129", "pip").version == "0.5.23"


def test_every_field_is_a_serving_config_field_and_every_flag_is_declared_once() -> None:
    for arg in reg.arguments.values():
        assert arg.field is None or arg.field in ServingConfig.model_fields, arg.name
        for sp in arg.spellings:
            assert reg.lookup(sp.flag) == (arg, sp)
    from nsa_policy.engines.vllm.catalog import load_vllm

    # ServingConfig holds both engines' arguments: each field is sglang's (sglang-args.yaml) or vLLM's
    # (vllm-args.yaml); `engine` says which engine they are for and is no argument of either
    fields = {a.field for a in reg.arguments.values() if a.field}
    vllm_fields = {a.field for a in load_vllm().args_doc.arguments}
    assert vllm_fields <= set(ServingConfig.model_fields)
    assert fields | vllm_fields == set(ServingConfig.model_fields) - {"engine"}, \
        "every ServingConfig field is declared in an engine's registry"


def test_derived_tables_come_from_the_registry() -> None:
    from nsa_policy.engines.sglang import startup
    from nsa_policy.engines.sglang.config import FIELD_ALIASES
    from nsa_policy.engines.sglang.flags import load_flags

    assert FIELD_ALIASES == reg.field_aliases()
    assert {"dsa_prefill_backend", "tensor_parallel_size", "tp"} <= set(FIELD_ALIASES)
    assert startup.TARGETS["prefill_backend"] == ("nsa_prefill_backend", "dsa_prefill_backend")
    assert startup.PARSER_DESTS == {"tensor_parallel_size": "tp_size", "data_parallel_size": "dp_size",
                                    "attention_context_parallel_size": "attn_cp_size"}  # 0.5.10-0.5.13.post1
    flags = load_flags()
    assert flags.dsa_spelling_since == "0.5.13"
    for arg in reg.arguments.values():
        for sp in arg.spellings:
            assert flags.get(sp.flag) is not None, sp.flag


def test_resolve_takes_every_spelling_of_every_argument_the_policy_reads() -> None:
    import typer.main

    from nsa_policy.cli import app

    command = typer.main.get_command(app).commands["resolve"]
    options = {opt for p in command.params for opt in p.opts if opt.startswith("--")}
    for arg in reg.arguments.values():
        if arg.field is not None or arg.name == "attn_dp_size":
            assert set(reg.cli_flags(arg.name)) <= options, arg.name


def test_generated_docs_are_fresh() -> None:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for path, text in gen.args_docs(DOCS).items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run python scripts/gen_docs.py --only args"


def _differ(arg, got, want) -> bool:
    """Choices the catalog owns are compared as sets (catalog order); the registry's own in sglang's order."""
    return set(got) != set(want) if arg.choices_from is not None else tuple(got) != tuple(want)


def _wheels() -> list[Path]:
    return sorted(WHEELS.glob("sglang-*.whl")) if WHEELS.is_dir() else []


@pytest.mark.skipif(not _wheels(), reason=f"no sglang wheels in {WHEELS} (pip download --no-deps sglang==X -d DIR; "
                                          "NSA_POLICY_SGLANG_WHEELS=DIR)")
@pytest.mark.parametrize("wheel", _wheels(), ids=lambda p: p.name.split("-")[1])
def test_registry_agrees_with_the_wheel(wheel: Path) -> None:
    """Every sglang spelling's status, dest and choices, and the threshold variables, as the wheel declares them."""
    from .sglang_wheel_flags import wheel_flags

    release = wheel.name.split("-")[1]
    data = wheel_flags(wheel)
    flags, problems = data["flags"], []
    for arg in reg.arguments.values():
        for sp in arg.spellings:
            got = flags.get(sp.flag)
            if sp.nsa_policy_only:
                if got is not None:
                    problems.append(f"{sp.flag} is marked nsa-policy only, but {release} declares it")
                continue
            status = reg.status(sp.flag, release)
            if status not in ("canonical", "deprecated"):
                if got is not None:
                    problems.append(f"{sp.flag}: registry says {status}, {release} declares it")
                continue
            if got is None:
                problems.append(f"{sp.flag}: registry says {status}, {release} lacks it")
                continue
            deprecated = "Deprecated" in str(got.get("action"))
            if deprecated != (status == "deprecated"):
                problems.append(f"{sp.flag}: registry says {status}, {release}'s action is {got.get('action')}")
            dest = sp.dest or reg.parser_dest_for(arg.name, release)
            if not deprecated and got["dest"] != dest:
                problems.append(f"{sp.flag}: dest {got['dest']} in {release}, registry {dest}")
            want = sp.choices or reg.choices(arg.name, release)
            if want is not None and got["choices"] is not None and _differ(arg, got["choices"], want):
                problems.append(f"{sp.flag}: choices {got['choices']} in {release}, registry {list(want)}")
    read = reg.env_var_read(THRESHOLD, release)
    if read not in data["env"]:
        problems.append(f"{release} does not declare {read}")
    aliased = f"deprecated_name='{NSA_ENV}'" in data["env"].get(read, "")
    ignored = any(e.ignored_by(reg._rel(release)) for e in reg.argument(THRESHOLD).env)
    if aliased != ignored:
        problems.append(f"{release}: old threshold name declared as alias: {aliased}; registry says ignored: {ignored}")
    assert problems == []


def _dumps() -> list[Path]:
    return sorted(DUMPS.glob("*.json")) if DUMPS.is_dir() else []


@pytest.mark.skipif(not _dumps(), reason=f"no parser dumps in {DUMPS}")
@pytest.mark.parametrize("dump", _dumps(), ids=lambda p: p.stem)
def test_registry_agrees_with_the_real_parser_dump(dump: Path) -> None:
    """Dumps of each release's own argparse parser (benchmarks/results/sglang-parsers/<release>.json)."""
    data = json.loads(dump.read_text(encoding="utf-8"))
    release = str(data.get("release") or data.get("sglang") or dump.stem)
    options = _dump_options(data)
    problems = []
    for arg in reg.arguments.values():
        for sp in arg.spellings:
            accepted = sp.flag in options
            if sp.nsa_policy_only:
                if accepted:
                    problems.append(f"{sp.flag} is nsa-policy only, but the {release} parser accepts it")
            elif accepted != reg.accepts(sp.flag, release):
                problems.append(f"{sp.flag}: the {release} parser {'accepts' if accepted else 'refuses'} it; "
                                f"registry says {reg.status(sp.flag, release)}")
            elif accepted:
                action, status = options[sp.flag], reg.status(sp.flag, release)
                if "deprecated" in action and bool(action["deprecated"]) != (status == "deprecated"):
                    problems.append(f"{sp.flag}: the {release} parser marks it deprecated={action['deprecated']}; "
                                    f"registry says {status}")
                dest = sp.dest or reg.parser_dest_for(arg.name, release)
                if status == "canonical" and action.get("dest") not in (None, dest):
                    problems.append(f"{sp.flag}: dest {action['dest']} in {release}, registry {dest}")
                want = sp.choices or reg.choices(arg.name, release)
                if want is not None and action.get("choices") is not None and _differ(arg, action["choices"], want):
                    problems.append(f"{sp.flag}: choices {action['choices']} in {release}, registry {list(want)}")
    assert problems == []


def _dump_options(data: dict) -> dict[str, dict]:
    """option string → its action record, from a parser dump (a list of actions or a mapping by option)."""
    actions = data.get("actions") or data.get("options") or data.get("arguments") or []
    if isinstance(actions, dict):
        return {k: (v if isinstance(v, dict) else {}) for k, v in actions.items()}
    out: dict[str, dict] = {}
    for action in actions:
        for opt in action.get("option_strings") or action.get("flags") or []:
            out[opt] = action
    return out
