"""`nsa-policy resolve`: the DSA serving decision for a device and model (or a mixed fleet).

The serving flags are generated from the argument registry (rules/catalog/sglang/args.yaml): every
spelling any sglang release accepts for an argument the policy reads, plus nsa-policy's own
(--tp, --dp, --dense-attn-kv-len-threshold).
"""
from __future__ import annotations

import inspect
import json
import os
import sys
from typing import Any, Callable, Optional

import typer

from nsa_policy.base.errors import DeviceDiscoveryError, InputError, NsaPolicyError
from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, fail_after_output, fail_usage

_TYPES = {"str": Optional[str], "int": Optional[int], "bool": bool}
_HELP = {"dense_attn_kv_len_threshold": "Overrides the SGLANG_{NSA,DSA}_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD environment."}


def parse_packages(items: Optional[list[str]]) -> Optional[dict[str, str]]:
    """--package NAME=VERSION (or NAME==VERSION): a known distribution (PEP 503 name) at a PEP 440 version."""
    from nsa_policy.base.versions import canonical_name, parse_version
    from nsa_policy.inputs import PACKAGES

    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        name, sep, version = item.partition("=")
        version = version[1:] if version.startswith("=") else version  # pip's NAME==VERSION
        if not sep or not name.strip() or not version.strip():
            raise InputError("--package", item, hint="expected NAME=VERSION, e.g. flashinfer-python=0.6.7.post2")
        dist = canonical_name(name)
        if dist not in PACKAGES:
            raise InputError("--package", name.strip(), list(PACKAGES), hint="not a package the policy reads")
        parse_version(version.strip(), field=f"--package {dist}")
        if dist in out and out[dist] != version.strip():
            raise InputError("--package", item, hint=f"conflicts with {dist}={out[dist]}")
        out[dist] = version.strip()
    return out


def model_argument(model: Optional[str], arch: Optional[str], index_topk: Optional[int],
                   heads: Optional[int]) -> Any:
    if model and arch:
        raise InputError("--arch", arch, hint="give either --model or --arch, not both")
    if arch:
        cfg: dict[str, Any] = {"architectures": [arch]}
        if index_topk is not None:
            cfg["index_topk"] = index_topk
        if heads is not None:
            cfg["num_attention_heads"] = heads
        return cfg
    if index_topk is not None or heads is not None:
        raise InputError("--index-topk", index_topk, hint="--index-topk/--num-attention-heads go with --arch")
    return model


def _serving_args() -> list[tuple[str, tuple[str, ...]]]:
    """(registry argument, its flags) for each argument the policy reads (the model is --model, above)."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    # --attention-backend is one option of the command for both engines (resolve routes it)
    return [(arg.name, reg.cli_flags(arg.name)) for arg in reg.arguments.values()
            if (arg.field is not None or arg.name == "attn_dp_size") and arg.field not in ("model_path", "attention_backend")]


def serving_options() -> list[inspect.Parameter]:
    """One typer option per spelling of each argument the policy reads, from the registry: two spellings
    of one argument with different values are a usage error, not "the last one wins"."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    params = []
    for name, flags in _serving_args():
        arg = reg.argument(name)
        default: Any = False if arg.type == "bool" else None
        help_text = _HELP.get(name, arg.help) + (f" Also: {', '.join(flags[1:])}." if len(flags) > 1 else "")
        for i, flag in enumerate(flags):
            params.append(inspect.Parameter(f"{name}__{i}", inspect.Parameter.KEYWORD_ONLY, annotation=_TYPES[arg.type],
                                            default=typer.Option(default, flag, help=help_text, hidden=i > 0)))
    return params


def serving_config(serving: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(argument → value, argument → the flag it was given with) from the per-spelling options."""
    config: dict[str, Any] = {}
    used: dict[str, str] = {}
    for name, flags in _serving_args():
        # bool switches: False means "not given" (unset), as sglang's store_true defaults
        given = [(flag, serving.get(f"{name}__{i}")) for i, flag in enumerate(flags)]
        given = [(flag, value) for flag, value in given if value is not None and value is not False]
        if not given:
            continue
        first_flag, first = given[0]
        for flag, value in given[1:]:
            if value != first:
                raise InputError(flag, value, hint=f"conflicts with {first_flag} {first}: one argument, two values")
        config[name] = first
        used[name] = first_flag
    return config, used


def _name_the_flags_used(decision: Any, used: dict[str, str]) -> Any:
    """Provenance of a user-set output names the flag as given (--dsa-prefill-backend, not the field's name)."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    provenance = dict(decision.provenance)
    for name, flag in used.items():
        out = reg.argument(name).output
        p = provenance.get(out) if out else None
        if p is not None and p.source == "user" and p.detail != flag:
            provenance[out] = p.model_copy(update={"detail": flag})
    return decision.model_copy(update={"provenance": provenance}) if provenance != decision.provenance else decision


def resolve(
    device: str = typer.Option("auto", "--device", help="Catalog name (h200…), capability spec (sm90…), auto (the rank's GPU: "
                               "LOCAL_RANK through CUDA_VISIBLE_DEVICES, read by NVML) or auto:N (CUDA device N). "
                               "A comma list (h200,b200) checks a mixed fleet: does one decision serve every device?"),
    model: Optional[str] = typer.Option(None, "--model", "--model-path",
                                        help="Catalog model id, local directory or config.json."),
    arch: Optional[str] = typer.Option(None, "--arch", help="Architecture name, instead of --model."),
    index_topk: Optional[int] = typer.Option(None, "--index-topk", help="index_topk, with --arch."),
    num_attention_heads: Optional[int] = typer.Option(None, "--num-attention-heads", help="Attention heads, with --arch."),
    package: Optional[list[str]] = typer.Option(None, "--package", help="Installed kernel package NAME=VERSION (repeatable)."),
    policy: str = typer.Option("default", "--policy", help="Bundle name or rule folder."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object (the decision)."),
    explain: bool = typer.Option(False, "--explain", help="Say why for every output and every alternative passed over."),
    log_decisions: Optional[str] = typer.Option(
        None, "--log-decisions", help="Append each decision as one JSON line to this file (docs/decision-log.md)."),
    engine: Optional[str] = typer.Option(
        None, "--engine", help="sglang or vllm (default: the policy's; vllm-0.33 is vLLM). With vllm and the default "
        "policy, prints what vLLM 0.33 does (vllm-0.33) and what nsa-policy recommends (vllm-default)."),
    attention_backend: Optional[str] = typer.Option(
        None, "--attention-backend", help="A forced attention backend, in the engine's names: sglang's (dsa, "
        "flashinfer, …; it sets dsa itself for a DSA model when this is unset) or vLLM's (FLASHMLA_SPARSE, …)."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="vLLM only: the KV-cache block size."),
    prefill_context_parallel_size: Optional[int] = typer.Option(
        None, "--prefill-context-parallel-size", help="vLLM only: prefill context-parallel ranks (-pcp)."),
    indexer_kv_dtype: Optional[str] = typer.Option(
        None, "--indexer-kv-dtype", help="vLLM only: the DSA indexer's K cache (-ac.indexer_kv_dtype: auto, mxfp4)."),
    **serving: Any,
) -> None:
    """Resolve the DSA serving decision for a device and model (or a mixed fleet: --device h200,b200)."""
    from nsa_policy.api import build_facts, decide, engine_for
    from nsa_policy.base.auto_device import is_auto

    try:
        given, used = serving_config(serving)
        eng = engine_for(policy, engine)
        if log_decisions:  # before any work: a bad log path, or one of the inputs (the model's config.json)
            _check_log_target(log_decisions, model)
    except (InputError, NsaPolicyError) as exc:
        raise fail_usage(exc, as_json) from None
    from nsa_policy import engines

    flags = {"attention_backend": attention_backend, "block_size": block_size,
             "prefill_context_parallel_size": prefill_context_parallel_size, "indexer_kv_dtype": indexer_kv_dtype}
    # an engine with its own view of `resolve` (vLLM: its names, its release beside the recommendation) prints it
    engines.get(eng).resolve_cli(given, model=model, device=device, policy=policy, as_json=as_json, explain=explain,
                                 extra={**flags, "log_decisions": log_decisions, "package": package, "used": used})
    chosen = engines.get(eng)
    if attention_backend is not None and chosen.judges_spellings:  # sglang's own --attention-backend
        given["attention_backend"], used["attention_backend"] = attention_backend, "--attention-backend"
        flags.pop("attention_backend")
    for key, value in flags.items():  # flags of another engine's view: an error, never silently dropped
        if value is not None:
            raise fail_usage(InputError("--" + key.replace("_", "-"), value,
                                        hint=f"a vLLM flag (--engine vllm); the policy {policy!r} is {chosen.title}'s"),
                             as_json)
    # keyed by the flag as given, so the facts know the spelling: a release bundle judges it (refused,
    # deprecated) as that release's parser would; an engine that judges no spellings gets the fields
    config: dict[str, Any] = ({used[name]: value for name, value in given.items()} if chosen.judges_spellings
                              else {**given, "engine": eng})
    if model is not None:
        config["model_path"] = model
    if "," in device:
        _resolve_fleet(config, device, (model, arch, index_topk, num_attention_heads), package,
                       policy, as_json, explain, log_decisions)
    if is_auto(device):  # only --device auto reads the node (and imports discovery)
        _resolve_mixed_node(config, device, (model, arch, index_topk, num_attention_heads), package,
                            policy, as_json, explain, log_decisions)
    try:
        if log_decisions:  # a log path that can never be appended to is bad input: refuse before any work
            from nsa_policy.integration.decision_log import check_log_path

            check_log_path(log_decisions)
        facts = build_facts(config, device=device,
                            model=model_argument(model, arch, index_topk, num_attention_heads) or None,
                            env=os.environ, packages=parse_packages(package))
        decision = _name_the_flags_used(decide(facts, policy), used)
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json) from None
    if as_json:
        print(json.dumps(decision.model_dump(mode="json")))
    else:
        from nsa_policy.commands._render import render_explain, render_table

        print(render_explain(decision, policy) if explain else render_table(decision, policy))
    if log_decisions:  # after printing: a failing log must not lose the decision
        from nsa_policy.integration.decision_log import append_decision

        try:
            append_decision(log_decisions, decision, origin="cli.resolve")
        except NsaPolicyError as exc:
            raise fail_after_output(exc) from None
    raise typer.Exit(EXIT_REJECTED if decision.errors else EXIT_OK)


def _check_log_target(log: str, model: Optional[str]) -> None:
    """--log-decisions: appendable (decision_log.check_log_path), and not a file the command reads."""
    from nsa_policy.base.safe_io import check_output_path
    from nsa_policy.integration.decision_log import check_log_path

    check_log_path(log)
    inputs = []
    if model and os.path.isdir(model):
        inputs.append(os.path.join(model, "config.json"))
    elif model and os.path.isfile(model):
        inputs.append(model)
    check_output_path(log, field="--log-decisions", inputs=inputs)


def _resolve_mixed_node(config: dict[str, Any], device: str, model_args: tuple[Any, ...],
                        package: Optional[list[str]], policy: str, as_json: bool, explain: bool,
                        log_decisions: Optional[str]) -> None:
    """`--device auto` on a node of several GPU products: say so (stderr); with no rank chosen, resolve each."""
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.integration.discovery import mixed_node

    try:
        notes, devices = mixed_node(load_catalog(), device)
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if devices:
        _resolve_fleet(config, devices, model_args, package, policy, as_json, explain, log_decisions)


def _resolve_fleet(config: dict[str, Any], devices: Any, model_args: tuple[Any, ...], package: Optional[list[str]],
                   policy: str, as_json: bool, explain: bool, log_decisions: Optional[str]) -> None:
    """`resolve --device h200,b200`: one decision per device, and whether one serves them all (exit 1 if not).

    devices: the comma list as given, or DeviceFacts read on this node (then packages default to the installed ones).
    """
    from nsa_policy.inputs import installed_packages
    from nsa_policy.integration.fleet import parse_device_list, resolve_fleet

    try:
        if log_decisions:
            from nsa_policy.integration.decision_log import check_log_path

            check_log_path(log_decisions)
        local = not isinstance(devices, str)
        packages = parse_packages(package)
        report = resolve_fleet(config, devices if local else parse_device_list(devices),
                               model=model_argument(*model_args) or None, policy=policy, env=os.environ,
                               packages=installed_packages() if local and packages is None else packages)
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json) from None
    if as_json:
        print(json.dumps(report.model_dump(mode="json")))
    else:
        from nsa_policy.commands._render import render_explain, render_table

        for name in report.devices:
            print(render_explain(report.decisions[name]) if explain else render_table(report.decisions[name]))
            print()
        print("\n".join(report.summary_lines()))
    if log_decisions:
        from nsa_policy.integration.decision_log import append_decision

        try:
            for name in report.devices:
                append_decision(log_decisions, report.decisions[name], origin="cli.resolve",
                                context={"fleet": list(report.devices), "agrees": report.agrees})
        except NsaPolicyError as exc:
            raise fail_after_output(exc) from None
    raise typer.Exit(EXIT_OK if report.agrees else EXIT_REJECTED)


def _with_serving_options(func: Callable[..., None]) -> Callable[..., None]:
    """`func` with the registry's serving options in place of its **serving."""
    sig = inspect.signature(func)
    fixed = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    func.__signature__ = sig.replace(parameters=[*fixed, *serving_options()])  # type: ignore[attr-defined]
    return func


def register(app: typer.Typer) -> None:
    app.command("resolve")(_with_serving_options(resolve))
