"""The nsa-policy command line (typer). Thin: parsing and printing; the work is in nsa_policy."""
from __future__ import annotations

import json
import os
from typing import List, Optional

import typer

from nsa_policy import __version__
from nsa_policy.errors import DeviceDiscoveryError, InputError, NsaPolicyError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Decide, explain and check how a serving engine runs DeepSeek Sparse Attention (DSA/NSA).")

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, fail_usage


def parse_packages(items: Optional[List[str]]) -> Optional[dict]:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, version = item.partition("=")
        if not sep or not name or not version:
            raise InputError("--package", item, hint="expected NAME=VERSION, e.g. flashinfer-python=0.6.7.post2")
        out[name.strip()] = version.strip()
    return out


def model_argument(model: Optional[str], arch: Optional[str], index_topk: Optional[int], heads: Optional[int]):
    if model and arch:
        raise InputError("--arch", arch, hint="give either --model or --arch, not both")
    if arch:
        cfg = {"architectures": [arch]}
        if index_topk is not None:
            cfg["index_topk"] = index_topk
        if heads is not None:
            cfg["num_attention_heads"] = heads
        return cfg
    if index_topk is not None or heads is not None:
        raise InputError("--index-topk", index_topk, hint="--index-topk/--num-attention-heads go with --arch")
    return model


def _version(value: bool) -> None:
    if value:
        print(f"nsa-policy {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


@app.command()
def resolve(
    device: str = typer.Option("auto", "--device", help="Catalog name (h200, b200…), capability spec (sm90…) or auto (NVML). "
                               "A comma list (h200,b200) checks a mixed fleet: does one decision serve every device?"),
    model: Optional[str] = typer.Option(None, "--model", "--model-path", help="Catalog model id, local directory or config.json."),
    arch: Optional[str] = typer.Option(None, "--arch", help="Architecture name, instead of --model."),
    index_topk: Optional[int] = typer.Option(None, "--index-topk", help="index_topk, with --arch."),
    num_attention_heads: Optional[int] = typer.Option(None, "--num-attention-heads", help="Attention heads, with --arch."),
    kv_cache_dtype: Optional[str] = typer.Option(None, "--kv-cache-dtype", help="auto, bfloat16, bf16, fp8_e4m3."),
    prefill_backend: Optional[str] = typer.Option(None, "--nsa-prefill-backend", "--dsa-prefill-backend"),
    decode_backend: Optional[str] = typer.Option(None, "--nsa-decode-backend", "--dsa-decode-backend"),
    tp_size: Optional[int] = typer.Option(None, "--tp-size", "--tp"),
    dp_size: Optional[int] = typer.Option(None, "--dp-size", "--dp"),
    enable_dp_attention: bool = typer.Option(False, "--enable-dp-attention"),
    quantization: Optional[str] = typer.Option(None, "--quantization"),
    enable_hisparse: bool = typer.Option(False, "--enable-hisparse"),
    disable_radix_cache: bool = typer.Option(False, "--disable-radix-cache"),
    page_size: Optional[int] = typer.Option(None, "--page-size"),
    threshold: Optional[int] = typer.Option(None, "--dense-attn-kv-len-threshold",
                                            help="Overrides the SGLANG_{NSA,DSA}_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD environment."),
    speculative_algorithm: Optional[str] = typer.Option(None, "--speculative-algorithm"),
    speculative_eagle_topk: Optional[int] = typer.Option(None, "--speculative-eagle-topk"),
    speculative_num_steps: Optional[int] = typer.Option(None, "--speculative-num-steps"),
    speculative_num_draft_tokens: Optional[int] = typer.Option(None, "--speculative-num-draft-tokens"),
    package: Optional[List[str]] = typer.Option(None, "--package", help="Installed kernel package NAME=VERSION (repeatable)."),
    policy: str = typer.Option("default", "--policy", help="Bundle name or rule folder."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object (the decision)."),
    explain: bool = typer.Option(False, "--explain", help="Say why for every output and every alternative passed over."),
    log_decisions: Optional[str] = typer.Option(None, "--log-decisions", help="Append each decision as one JSON line to this file (docs/decision-log.md)."),
) -> None:
    """Resolve the DSA serving decision for a device and model (or a mixed fleet: --device h200,b200)."""
    from nsa_policy.api import build_facts, decide

    config = {
        "kv_cache_dtype": kv_cache_dtype, "nsa_prefill_backend": prefill_backend, "nsa_decode_backend": decode_backend,
        "tp_size": tp_size, "dp_size": dp_size, "enable_dp_attention": enable_dp_attention or None,
        "quantization": quantization, "enable_hisparse": enable_hisparse or None,
        "disable_radix_cache": disable_radix_cache or None, "page_size": page_size,
        "dense_attn_kv_len_threshold": threshold, "speculative_algorithm": speculative_algorithm,
        "speculative_eagle_topk": speculative_eagle_topk, "speculative_num_steps": speculative_num_steps,
        "speculative_num_draft_tokens": speculative_num_draft_tokens,
        "model_path": model,
    }
    config = {k: v for k, v in config.items() if v is not None}
    if "," in device:
        _resolve_fleet(config, device, model_argument, (model, arch, index_topk, num_attention_heads), package,
                       policy, as_json, explain, log_decisions)
    try:
        facts = build_facts(config, device=device,
                            model=model_argument(model, arch, index_topk, num_attention_heads) or None,
                            env=os.environ, packages=parse_packages(package))
        decision = decide(facts, policy)
        if log_decisions:
            from nsa_policy.integration.decision_log import append_decision

            append_decision(log_decisions, decision, origin="cli.resolve")
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json)
    if as_json:
        print(json.dumps(decision.model_dump(mode="json")))
    else:
        from nsa_policy.commands._render import render_explain, render_table

        print(render_explain(decision) if explain else render_table(decision))
    raise typer.Exit(EXIT_REJECTED if decision.errors else EXIT_OK)


def _resolve_fleet(config, devices, model_argument, model_args, package, policy, as_json, explain, log_decisions):
    """`resolve --device h200,b200`: one decision per device, and whether one serves them all (exit 1 if not)."""
    from nsa_policy.integration.fleet import parse_device_list, resolve_fleet

    try:
        report = resolve_fleet(config, parse_device_list(devices), model=model_argument(*model_args) or None,
                               policy=policy, env=os.environ, packages=parse_packages(package))
        if log_decisions:
            from nsa_policy.integration.decision_log import append_decision

            for name in report.devices:
                append_decision(log_decisions, report.decisions[name], origin="cli.resolve",
                                context={"fleet": list(report.devices), "agrees": report.agrees})
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json)
    if as_json:
        print(json.dumps(report.model_dump(mode="json")))
    else:
        from nsa_policy.commands._render import render_explain, render_table

        for name in report.devices:
            print(render_explain(report.decisions[name]) if explain else render_table(report.decisions[name]))
            print()
        print("\n".join(report.summary_lines()))
    raise typer.Exit(EXIT_OK if report.agrees else EXIT_REJECTED)


@app.command()
def schema(
    name: Optional[str] = typer.Argument(None, help="One of: device, model, config, decision, facts (default: all)."),
) -> None:
    """Print the JSON Schema of the facts and of the decision."""
    from nsa_policy import Decision, DeviceFacts, Facts, ModelFacts, ServingConfig

    models = {"device": DeviceFacts, "model": ModelFacts, "config": ServingConfig, "facts": Facts, "decision": Decision}
    if name is not None and name not in models:
        raise fail_usage(InputError("schema", name, list(models)))
    chosen = {name: models[name]} if name else models
    print(json.dumps({k: m.model_json_schema() for k, m in chosen.items()}, indent=2))


@app.command()
def devices(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the device catalog and the capability specs."""
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    rows = [{"name": n, **cat.device(n).model_dump(mode="json", exclude={"name"})} for n in cat.device_choices]
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        cc = ".".join(map(str, r["compute_capability"])) if r["compute_capability"] else "-"
        print(f"{r['name']:<14} {r['device_class']:<7} {r['vendor']:<7} cc {cc:<5} "
              f"{(str(r['memory_gb']) + ' GB') if r['memory_gb'] else '':<9} {r['product_name'] or '(capability spec)'}")


@app.command()
def models(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the model catalog."""
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    rows = [cat.model(m).model_dump(mode="json") for m in cat.model_ids]
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['model_id']:<38} {r['family']:<14} {r['architecture']:<26} topk {r['index_topk']} heads {r['num_attention_heads']}")


@app.command()
def backends(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the backends and where each runs (the capability matrix)."""
    from nsa_policy.catalog.store import KV_DTYPES, PHASES, load_catalog

    cat = load_catalog()
    rows = []
    for name, spec in cat.backends.items():
        where = {}
        for cls in cat.device_doc.classes:
            for kv in KV_DTYPES:
                for phase in PHASES:
                    cap = cat.capability(name, cls, kv, phase)
                    if cap.runs:
                        where.setdefault(f"{cls}", []).append(f"{phase}/{kv}" + ("*" if cap.status == "degraded" else ""))
        rows.append({"backend": name, "phases": spec.phases, "package": spec.package, "description": spec.description,
                     "runs_on": where})
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['backend']:<22} {','.join(r['phases']):<15} {r['description']}")
        for cls, cells in r["runs_on"].items():
            print(f"    {cls:<7} {', '.join(cells)}")
    print("(* = runs, degraded)")


@app.command()
def policies(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the shipped policy bundles."""
    from nsa_policy.engine.bundle import concrete_bundles, get_bundle

    try:
        rows = []
        for name in concrete_bundles():
            b = get_bundle(name)
            rows.append({"name": b.name, "digest": b.digest, "compat": b.compat, "extends": list(b.chain[:-1]),
                         "rules": len(b.rules), "description": b.description})
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json)
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        kind = "compat" if r["compat"] else "policy"
        print(f"{r['name']:<18} {kind:<6} {r['rules']:>3} rules  {r['digest']}  {r['description']}")


def _register_extensions() -> None:
    """Commands that live in their own modules (lint, check, diff, matrix, launch, …)."""
    import importlib

    for mod in ("nsa_policy.commands",):
        try:
            module = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name == mod:
                continue
            raise
        module.register(app)


_register_extensions()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
