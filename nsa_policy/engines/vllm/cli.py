"""`nsa-policy resolve --engine vllm`: vLLM's names, and vLLM's own decision beside the recommendation."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from nsa_policy.base.errors import DeviceDiscoveryError, NsaPolicyError
from nsa_policy.base.safe_io import check_output_path, write_atomic
from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, fail_usage


def resolve_cli(given: dict[str, Any], *, model: Optional[str], device: str, policy: str, as_json: bool,
                explain: bool, extra: dict[str, Any]) -> None:
    """resolve --engine vllm: vLLM's names (rules/catalog/vllm/args.yaml); `default` shows vLLM 0.33's own
    decision and the project's recommendation (vllm-default), one after the other."""
    from nsa_policy.api import build_facts, decide
    from nsa_policy.base.errors import InputError
    from nsa_policy.commands._render import render_explain, render_table

    names = {"kv_cache_dtype": "kv_cache_dtype", "tp_size": "tensor_parallel_size", "page_size": "block_size",
             "dcp_size": "decode_context_parallel_size"}
    # an sglang-only flag or --package is refused (the vLLM policy reads neither), never dropped
    used = extra.get("used") or {}
    unread = [(used.get(k, "--" + k.replace("_", "-")), v) for k, v in given.items() if k not in names]
    if extra.get("package"):
        unread.append(("--package", " ".join(extra["package"])))
    if unread:
        raise fail_usage(InputError(unread[0][0], unread[0][1],
                                    hint="an sglang-only option: the vLLM policy does not read it; valid with "
                                         "--engine vllm: --kv-cache-dtype, --tp-size, --page-size/--block-size, "
                                         "--dcp-size, --attention-backend"), as_json)
    config: dict[str, Any] = {names[k]: v for k, v in given.items() if k in names}
    for key in ("attention_backend", "block_size", "prefill_context_parallel_size", "indexer_kv_dtype"):
        if extra.get(key) is not None:
            config[key] = extra[key]
    policies = ["vllm-0.33", "default"] if policy == "default" else [policy]
    decisions = []
    try:
        facts = build_facts(config, device=device, model=model, env=os.environ, engine="vllm")
        decisions = [decide(facts, p) for p in policies]
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json) from None
    if as_json:
        print(json.dumps(decisions[-1].model_dump(mode="json")))
    else:
        for title, d in zip(("what vLLM 0.33 does", "what nsa-policy recommends") if len(decisions) == 2 else ("",),
                            decisions):
            if title:
                print(f"# {title}")
            print(render_explain(d) if explain else render_table(d))
    log = extra.get("log_decisions")
    if log:  # after printing (the path was checked before any work): a failing log must not lose the decision
        from nsa_policy.commands._common import fail_after_output
        from nsa_policy.integration.decision_log import append_decision

        try:
            append_decision(log, decisions[-1], origin="cli.resolve")
        except NsaPolicyError as exc:
            raise fail_after_output(exc) from None
    raise typer.Exit(EXIT_REJECTED if decisions[-1].errors else EXIT_OK)


def matrix_cli(out_dir: Optional[Path], policy: str, fmt: str, image: Optional[str]) -> bool:
    """`matrix --engine vllm`: vLLM's backends × device × KV dtype (markdown or JSON)."""
    import json

    from nsa_policy.base.errors import InputError, NsaPolicyError
    from nsa_policy.core.bundle import bundle_for_engine, get_bundle
    from nsa_policy.engines.vllm.matrix import render_vllm_markdown, vllm_matrix_data

    as_json = fmt == "json"
    try:
        if image is not None:
            raise InputError("--image", image, hint="the vLLM view is markdown only; drop --image")
        name = bundle_for_engine(policy, "vllm")
        if get_bundle(name).engine != "vllm":
            raise InputError("--policy", policy, valid=["default", "vllm-default", "vllm-0.33"],
                             hint="--engine vllm marks a vLLM bundle's picks")
        if out_dir is not None:
            check_output_path(out_dir, field="--out-dir", want_dir=True)
            path = out_dir / "matrix-vllm.md"
            write_atomic(path, render_vllm_markdown(vllm_matrix_data(name)), field="--out-dir")
            print(f"wrote {path}")
            raise typer.Exit(EXIT_OK)
        data = vllm_matrix_data(name)
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    print(json.dumps(data) if as_json else render_vllm_markdown(data), end="\n" if as_json else "")
    return True


def launch_cli(argv: list[str], *, policy: str, device: str, model: Optional[str], version: Optional[str],
               dry_run: bool, as_json: bool, log_decisions: Optional[str] = None) -> None:
    """`launch -- vllm serve …`: resolve with a vLLM bundle, add the flags the target vLLM release reads, exec."""
    import sys

    from nsa_policy.base.errors import PolicyError
    from nsa_policy.commands._common import exec_or_fail, log_quietly, rejected_exit
    from nsa_policy.commands._render import render_table
    from nsa_policy.engines.vllm.launch import plan_vllm_launch
    from nsa_policy.integration.decision_log import append_decision, check_log_path

    try:
        if log_decisions:  # before any work: a log that can never be appended to is bad input
            check_log_path(log_decisions)
        plan = plan_vllm_launch(argv, policy=policy, device=device, model=model, env=os.environ,
                                vllm_version=version)
    except PolicyError as exc:
        if log_decisions:
            log_quietly(log_decisions, exc.decision, origin="cli.launch")
        raise rejected_exit(exc, as_json) from None
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json) from None
    if log_decisions:
        try:
            append_decision(log_decisions, plan.decision, origin="cli.launch")
        except NsaPolicyError as exc:
            raise fail_usage(exc, as_json) from None
    print(f"nsa-policy launch: target {plan.release_why} ({plan.decision.policy})", file=sys.stderr)
    print(render_table(plan.decision), file=sys.stderr)
    print("nsa-policy launch: " + (("adding " + ", ".join(plan.added_flags)) if plan.added_flags else "no flag to add"),
          file=sys.stderr)
    for note in plan.notes:
        print(f"nsa-policy launch: note: {note}", file=sys.stderr)
    if dry_run:
        if as_json:
            print(json.dumps({"argv": plan.argv, "added_flags": plan.added_flags, "command": plan.shell_line(),
                              "engine": "vllm", "vllm": plan.release, "notes": plan.notes,
                              "decision": plan.decision.model_dump(mode="json")}))
        else:
            print(plan.shell_line())
        raise typer.Exit(EXIT_OK)
    exec_or_fail(plan.argv[0], lambda: os.execvp(plan.argv[0], plan.argv))  # pragma: no cover - replaces the process
