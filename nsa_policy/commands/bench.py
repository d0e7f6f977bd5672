"""Command `bench`: which sparse-MLA backend is fastest on this GPU at the operator's operating points,
measured through the runtime adapter, against the default policy's choice (docs/bench.md)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, fail_usage

BATCHES, CONTEXTS, PREFILL = "1,8,32,128,512", "4k,32k,128k", "1k,4k,16k"


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def _stem(run: Any) -> str:
    dp = f"-dp{run.dp_size}" if run.enable_dp_attention else ""
    return f"{run.environment.device}-tp{run.tp_size}{dp}"


def _no_gpu() -> Optional[str]:
    """Why this machine cannot measure (None when it can). torch is imported here, in the run only."""
    try:
        import torch
    except ImportError:
        return "bench needs torch with CUDA (pip install 'nsa-policy[runtime]'); use --from-json FILE to report a recorded run"
    if not torch.cuda.is_available():
        return ("bench needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False); "
                "use --from-json FILE to report a recorded run")
    return None


def bench(
    model: Optional[str] = typer.Option(None, "--model", help="Catalog id, local directory or config.json."),
    device: str = typer.Option("auto", "--device", help="auto (NVML) or the catalog name of the GPU here."),
    tp_size: int = typer.Option(1, "--tp-size", min=1, help="Tensor parallel size (as resolve)."),
    dp_size: Optional[int] = typer.Option(None, "--dp-size", min=1, help="Data parallel size (as resolve)."),
    enable_dp_attention: bool = typer.Option(False, "--enable-dp-attention",
                                             help="Attention data parallel: heads per rank = the model's heads / (tp / dp)."),
    batch: Optional[str] = typer.Option(None, "--batch", help=f"Decode batch sizes, rows (default {BATCHES}; "
                                                               f"with --from-json: keep only these points)."),
    context: Optional[str] = typer.Option(None, "--context", help=f"Context lengths, KV tokens per request "
                                                                   f"(default {CONTEXTS})."),
    prefill_tokens: Optional[str] = typer.Option(None, "--prefill-tokens",
                                                 help=f"New tokens per prefill batch (default {PREFILL})."),
    kv_cache_dtype: str = typer.Option("bfloat16,fp8_e4m3", "--kv-cache-dtype", help="KV dtypes to measure."),
    phase: str = typer.Option("prefill,decode", "--phase", help="prefill, decode or both."),
    rounds: int = typer.Option(20, "--rounds", min=3, max=1000, help="Rounds taken in turns per point (median)."),
    pool_tokens: str = typer.Option("1m", "--pool-tokens", help="Tokens in one layer's KV pool (requests share "
                                                                "pages beyond it)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the JSON record, the table (.md) and the picture (.png)."),
    from_json: Optional[list[Path]] = typer.Option(None, "--from-json",
                                                   help="Report (and --write-bundle from) recorded runs instead of "
                                                        "measuring (repeatable; no GPU needed)."),
    write_bundle: Optional[Path] = typer.Option(None, "--write-bundle",
                                                help="Write a site bundle (extends default) to this folder."),
    threshold: float = typer.Option(0.10, "--threshold", help="A rule where the measured-fastest beats the "
                                                              "policy's choice by more than this fraction."),
    bundle_name: Optional[str] = typer.Option(None, "--bundle-name", help="The site bundle's name."),
) -> None:
    """Time every backend the catalog lets run on this GPU (and the installed kernels provide), side by
    side through the adapter; name the fastest per phase and operating point, the policy's choice and
    the gap; optionally write a site bundle that picks the measured-fastest."""
    from nsa_policy import InputError, NsaPolicyError
    from nsa_policy.runtime import bench_report as rep

    try:
        batches = rep.parse_sizes("--batch", batch or BATCHES)
        contexts = rep.parse_sizes("--context", context or CONTEXTS, hi=1 << 21)
        prefill = rep.parse_sizes("--prefill-tokens", prefill_tokens or PREFILL, hi=1 << 18)
        kv_dtypes = rep.parse_kv_dtypes(kv_cache_dtype)
        pool = rep.parse_sizes("--pool-tokens", pool_tokens, lo=1 << 16, hi=1 << 25)
        if len(pool) != 1:
            raise InputError("--pool-tokens", pool_tokens, hint="one size")
        phases = tuple(p for p in rep.PHASES if p in {x.strip() for x in phase.split(",")})
        bad = [x.strip() for x in phase.split(",") if x.strip() not in rep.PHASES]
        if bad or not phases:
            raise InputError("--phase", phase, list(rep.PHASES))
        if not 0 <= threshold < 10:
            raise InputError("--threshold", threshold, hint="a fraction in 0..10 (0.1 = 10 %)")
        if from_json:
            # the operating points asked for, out of the recorded ones (all of them by default)
            runs = [rep.select(rep.load_run(p), batches if batch else None, contexts if context else None,
                               prefill if prefill_tokens else None, phases) for p in from_json]
        else:
            if model is None:
                raise InputError("--model", None, hint="bench needs the model (or --from-json FILE)")
            why = _no_gpu()
            if why:
                print(f"nsa-policy: error: {why}", file=sys.stderr)
                raise typer.Exit(EXIT_USAGE)
            runs = [_measure(model, device, tp_size, dp_size, enable_dp_attention, batches, contexts, prefill,
                             kv_dtypes, phases, rounds, pool[0])]
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        hints = []
        for r in runs:
            print(rep.render_text(r))
            if out is not None and not from_json:
                (out / f"{_stem(r)}.json").write_text(r.model_dump_json(indent=1) + "\n")
                (out / f"{_stem(r)}.md").write_text(rep.render_markdown(r))
                hint = rep.plot([r], out / f"{_stem(r)}.png")
                if hint:
                    hints.append(hint)
        if out is not None and from_json:
            (out / "report.md").write_text("\n\n".join(rep.render_markdown(r) for r in runs))
            hint = rep.plot(runs, out / "report.png")
            if hint:
                hints.append(hint)
        for h in sorted(set(hints)):
            print(f"nsa-policy: note: {h}", file=sys.stderr)
        if write_bundle is not None:
            folder, chosen = rep.write_bundle(runs, write_bundle, name=bundle_name, threshold=threshold)
            print(f"bundle {folder}: {len(chosen)} rule(s) where the measured-fastest beats the policy by more "
                  f"than {threshold * 100:.0f} %" + "".join(
                      f"\n  {p.phase} {p.kv_cache_dtype} {runs[p.run_index].heads_per_rank} heads per rank: "
                      f"{p.backend} {p.speedup:.2f}x {p.policy_backend}" for p in chosen))
    except NsaPolicyError as exc:
        raise fail_usage(exc) from None
    except OSError as exc:
        raise fail_usage(InputError("--out/--write-bundle", str(exc.filename), hint=exc.strerror)) from None
    raise typer.Exit(EXIT_OK)


def _measure(model: str, device: str, tp_size: int, dp_size: Optional[int], dp_attention: bool,
             batches: list[int], contexts: list[int], prefill: list[int], kv_dtypes: list[str],
             phases: tuple[str, ...], rounds: int, pool_tokens: int) -> Any:
    import nsa_policy
    from nsa_policy import InputError, PolicyError
    from nsa_policy.progress import Progress
    from nsa_policy.runtime import bench as gpu
    from nsa_policy.runtime.device import as_device, detect_device_class

    decisions = {}
    for kv in kv_dtypes:
        cfg: dict[str, Any] = {"tp_size": tp_size, "kv_cache_dtype": kv}
        if dp_size is not None:
            cfg["dp_size"] = dp_size
        if dp_attention:
            cfg["enable_dp_attention"] = True
        try:
            decisions[kv] = nsa_policy.resolve(cfg, device=device, model=model, policy="default")
        except PolicyError as exc:
            codes = ", ".join(e.code for e in exc.decision.errors)
            print(f"nsa-policy: note: not measuring {kv} KV: the default policy rejects it here ({codes})",
                  file=sys.stderr)
    if not decisions:
        print("nsa-policy: error: the default policy rejects every requested KV dtype here", file=sys.stderr)
        raise typer.Exit(EXIT_REJECTED)
    first = next(iter(decisions.values()))
    if not first.applies:
        raise InputError("--model", model, hint="not a DSA model: there is no sparse attention to time")
    here = detect_device_class(as_device("cuda"))
    if first.device_class != here:
        raise InputError("--device", device, hint=f"the GPU here is {here}, the decision is for {first.device_class}; "
                                                  f"bench measures the local GPU (use --device auto)")
    spec = gpu.Spec(model=first.model or model, device=first.device or device, tp_size=tp_size, dp_size=dp_size,
                    enable_dp_attention=dp_attention, batches=batches, contexts=contexts, prefill_tokens=prefill,
                    kv_dtypes=list(decisions), decisions=decisions, rounds=rounds, phases=phases,
                    pool_tokens=pool_tokens)
    with Progress("bench", total=len(gpu.operating_points(spec))) as bar:
        spec.progress = bar.advance
        return gpu.run(spec, here)
