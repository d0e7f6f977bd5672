"""Catalog commands: `devices`, `models`, `backends`, `policies` and `schema` (what nsa-policy knows)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from nsa_policy.base.errors import InputError, NsaPolicyError
from nsa_policy.commands._common import fail_usage


def register(app: typer.Typer) -> None:
    for command in (devices, models, backends, policies, schema):
        app.command(command.__name__)(command)


def schema(
    name: Optional[str] = typer.Argument(None, help="One of: device, model, config, decision, facts (default: all)."),
) -> None:
    """Print the JSON Schema of the facts and of the decision."""
    from pydantic import BaseModel

    from nsa_policy import Decision, DeviceFacts, Facts, ModelFacts, ServingConfig

    models: dict[str, type[BaseModel]] = {"device": DeviceFacts, "model": ModelFacts, "config": ServingConfig,
                                          "facts": Facts, "decision": Decision}
    if name is not None and name not in models:
        raise fail_usage(InputError("schema", name, list(models)))
    if name is not None:  # one schema is the schema itself, usable as is by a validator
        print(json.dumps(models[name].model_json_schema(), indent=2))
        return
    print(json.dumps({k: m.model_json_schema() for k, m in models.items()}, indent=2))


def devices(as_json: bool = typer.Option(False, "--json", help="Print the devices as one JSON array.")) -> None:
    """List the device catalog and the capability specs."""
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    rows = [{"name": n, **cat.device(n).model_dump(mode="json", exclude={"name"})} for n in cat.device_choices]
    if as_json:
        print(json.dumps(rows))
        return
    print(f"{'NAME':<14} {'CLASS':<7} {'VENDOR':<7} {'CC':<8} {'MEMORY':<9} PRODUCT (NVML name)")
    for r in rows:
        cc = ".".join(map(str, r["compute_capability"])) if r["compute_capability"] else "-"
        print(f"{r['name']:<14} {r['device_class']:<7} {r['vendor']:<7} {cc:<8} "
              f"{(str(r['memory_gb']) + ' GB') if r['memory_gb'] else '':<9} {r['product_name'] or '(capability spec)'}")


def models(as_json: bool = typer.Option(False, "--json", help="Print the models as one JSON array.")) -> None:
    """List the model catalog."""
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    rows = [cat.model(m).model_dump(mode="json") for m in cat.model_ids]
    if as_json:
        print(json.dumps(rows))
        return
    print(f"{'MODEL':<38} {'FAMILY':<14} {'ARCHITECTURE':<26} {'INDEX_TOPK':<10} HEADS")
    for r in rows:
        print(f"{r['model_id']:<38} {r['family']:<14} {r['architecture']:<26} "
              f"{r['index_topk']:<10} {r['num_attention_heads']}")


def backends(as_json: bool = typer.Option(False, "--json", help="Print the backends as one JSON array.")) -> None:
    """List the backends and where each runs (the capability matrix)."""
    from nsa_policy.catalog.store import KV_DTYPES, PHASES, load_catalog
    from nsa_policy.verify.matrix import sglang_span

    cat = load_catalog()
    rows: list[dict[str, Any]] = []
    for name, spec in cat.backends.items():
        where: dict[str, list[str]] = {}
        for cls in cat.device_doc.classes:
            for kv in KV_DTYPES:
                for phase in PHASES:
                    cap = cat.capability(name, cls, kv, phase)
                    if cap.runs:
                        where.setdefault(f"{cls}", []).append(f"{phase}/{kv}" + ("*" if cap.status == "degraded" else ""))
        # since which sglang release each phase's flag lists it: derived from the catalog's sglang_choice
        rows.append({"backend": name, "phases": spec.phases, "package": spec.package, "description": spec.description,
                     "sglang_since": {ph: sglang_span(name, ph) for ph in spec.phases}, "runs_on": where})
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['backend']:<22} {','.join(r['phases']):<15} {r['description']}")
        spans = {ph: span or "never" for ph, span in r["sglang_since"].items()}
        since = (next(iter(spans.values())) if len(set(spans.values())) == 1
                 else ", ".join(f"{ph} {span}" for ph, span in spans.items()))
        print(f"    sglang  {since}")
        for cls, cells in r["runs_on"].items():
            print(f"    {cls:<7} {', '.join(cells)}")
    print("(* = runs, degraded)")


def policies(as_json: bool = typer.Option(False, "--json", help="One JSON document."),
             show: Optional[str] = typer.Option(None, "--show", metavar="BUNDLE",
                                                help="Print the bundle compiled and flattened: every rule in "
                                                     "evaluation order, with the bundle it comes from.")) -> None:
    """List the shipped policy bundles, or show one compiled (--show)."""
    from nsa_policy import engines
    from nsa_policy.core.bundle import concrete_bundles, get_bundle, release_owners

    if show is not None:
        _show_bundle(show, as_json)
        return

    try:
        # Which releases each release bundle answers for (the newest bundle at or below each release).
        answers = release_owners()
        rows: list[dict[str, Any]] = []
        for name in concrete_bundles():
            b = get_bundle(name)
            rows.append({"name": b.name, "engine": b.engine, "digest": b.digest, "compat": b.compat,
                         "extends": list(b.chain[:-1]),
                         "rules": len(b.rules), "releases": answers.get(b.name, []), "description": b.description})
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        kind = "compat" if r["compat"] else "policy"
        print(f"{r['name']:<18} {kind:<6} {r['rules']:>3} rules  {r['digest']}  {r['description']}")
        if r["releases"]:
            print(f"{'':<18} answers for {engines.get(r['engine']).title} {', '.join(r['releases'])}")


def flattened(bundle: Any) -> dict[str, Any]:
    """A compiled bundle as data: its chain and every rule in evaluation order, each with the bundle
    (the folder) its file is in and its condition as written."""
    rules = []
    for rule in bundle.rules:
        row = rule.describe()
        path = rule.origin.rsplit(":", 1)[0]
        row["bundle"] = Path(path).parent.name
        row["file"] = f"{Path(path).parent.name}/{Path(path).name}:{rule.origin.rsplit(':', 1)[-1]}"
        row["when"] = rule.when
        rules.append(row)
    return {"name": bundle.name, "engine": bundle.engine, "digest": bundle.digest, "compat": bundle.compat,
            "chain": list(bundle.chain), "rules": rules}


def _show_bundle(name: str, as_json: bool) -> None:
    from nsa_policy.core.bundle import get_bundle

    try:
        data = flattened(get_bundle(name))
    except InputError as exc:  # named as the flag the user gave
        raise fail_usage(InputError("--show", exc.value, exc.valid, hint=exc.hint), as_json) from None
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    if as_json:
        print(json.dumps(data, default=str))
        return
    kind = "compat" if data["compat"] else "policy"
    print(f"{kind} {data['name']} ({data['digest']}) · engine {data['engine']} · chain {' → '.join(data['chain'])}")
    stage = None
    for r in data["rules"]:
        if r["stage"] != stage:
            stage = r["stage"]
            print(f"stage {stage}")
        does = ", ".join(f"{k}={v}" for k, v in r["sets"].items())
        if r["code"]:
            does = (does + "; " if does else "") + f"{r['level']} {r['code']}"
        when = json.dumps(r["when"], default=str, ensure_ascii=False) if r["when"] else "always"
        print(f"  {r['id']:<44} {r['file']}")
        print(f"      when {when}")
        print(f"      {'then ' + does if does else 'then nothing'}{' (overwrites)' if r['overwrite'] else ''}")
