"""sglang's own start-up with the nsa-policy plugin installed beside it (runs INSIDE a side environment).

    PYTHONPATH=<nsa-policy wheel target>:<sgenv>/pkgs/0.5.23:<sgenv>/stubs <sgenv>/venv-t5.19/bin/python \
        scripts/plugin_harness/sglang_run.py MODES < configs.jsonl > runs.jsonl

MODES: comma-separated, each one of off|audit|fill|enforce. The process calls sglang's real
`load_plugins()` once (with NSA_POLICY=audit set, so the plugin registers its seam; SGLANG_PLUGINS as
given by the caller: a value that excludes nsa_policy is the "not enabled" baseline), then per
configuration and mode runs the real entry path: the server parser → `ServerArgs.from_cli_args` →
`resolve_once()` → `check_server_args()`, device emulated as the differential oracle does it
(scripts/sglang_oracle/policy_oracle.py: `emulated`). Output per run: every ServerArgs field as sglang
resolved it (`overrides.resolution_result`, repr), the threshold variable, the declaration sources,
the refusal if any, and the decision-log line the plugin wrote (NSA_POLICY_LOG, one file per run).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "sglang_oracle"))
from _inrelease import build_parser, captured_stderr, quiet_imports, release  # noqa: E402
from policy_oracle import DEVICES, INPUT_ENV, ConfigDirs, clear_probe_caches, emulated, threshold_var  # noqa: E402

# emulated device class -> the catalog device whose product name the emulation reports
POLICY_DEVICE = {"sm80": "a100", "sm90": "h200", "sm100": "b200", "sm103": "b300", "sm120": "rtx-pro-6000",
                 "sm121": "gb10", "gfx942": "mi300x", "gfx950": "mi355x", "xpu": "max-1550"}
PLUGIN_ENV = ("NSA_POLICY", "NSA_POLICY_DEVICE", "NSA_POLICY_LOG", "NSA_POLICY_DECISION_ID", "NSA_POLICY_DECISION_VIEW")


def fields_of(sa) -> dict:
    """Every ServerArgs field as sglang resolved it: resolution_result over the record (0.5.19+), the
    dataclass's attributes before (its __post_init__ resolved them in place)."""
    try:
        from sglang.srt.arg_groups.arg_utils import record_fields
        from sglang.srt.arg_groups.overrides import resolution_result
    except ImportError:
        import dataclasses

        return {f.name: repr(getattr(sa, f.name, None)) for f in dataclasses.fields(sa)}
    return {f.name: repr(resolution_result(sa, f.name)) for f in record_fields(type(sa))}


def run(parser, configs, item, mode, logdir, n) -> dict:
    from sglang.srt.server_args import ServerArgs

    os.environ.clear()
    os.environ.update(BASE_ENV)
    os.environ.update({k: str(v) for k, v in (item.get("env") or {}).items()})
    log = os.path.join(logdir, f"{n}.jsonl")
    os.environ.update(NSA_POLICY=mode, NSA_POLICY_DEVICE=POLICY_DEVICE[item["device"]], NSA_POLICY_LOG=log)
    os.environ.update(item.get("plugin_env") or {})  # a fault injected into the plugin's own settings
    out = {"id": item["id"], "mode": mode, "release": release()}
    stage = "parse"
    sa = None
    t0 = time.perf_counter()
    try:
        path = configs.get(item.get("model", "ds32"), item.get("config") or {})
        with captured_stderr() as err:
            try:
                # a fixed seed: sglang draws a random one per start-up, which is not a resolved choice
                ns = parser.parse_args(["--model-path", path, "--random-seed", "0", *item.get("argv", [])])
            except SystemExit:
                lines = [ln for ln in err.getvalue().splitlines() if ": error: " in ln]
                raise ValueError("argparse: " + (lines[-1].split(": error: ", 1)[1] if lines else "exit")) from None
        stage = "from_cli_args"
        sa = ServerArgs.from_cli_args(ns)
        stage = "resolve_once"
        if hasattr(sa, "resolve_once"):  # 0.5.19+; before, from_cli_args' __post_init__ resolved
            sa.resolve_once()
        stage = "check_server_args"
        sa.check_server_args()
        # the config dir (model_path, tokenizer_path, served_model_name) differs per process: named, not compared
        fields = {k: v.replace(configs.root, "<models>") for k, v in fields_of(sa).items()}
        out.update(ok=True, stage="done", fields=fields, threshold=os.environ.get(threshold_var()),
                   sources=[s for s, _ in getattr(sa, "_resolved_overrides", ())], error=None)
    except BaseException as exc:  # sglang (or the plugin in enforce) refused the configuration
        out.update(ok=False, stage=stage, fields=None, threshold=None, sources=None,
                   error={"type": type(exc).__name__, "message": " ".join(str(exc).split())[:600]})
    out["ms"] = round((time.perf_counter() - t0) * 1000, 2)
    if mode == "fill":  # the model config the plugin read, for the CI replay (tests/plugins)
        try:
            from sglang.srt.arg_groups.overrides import model_config_of

            out["model_config"] = json.loads(json.dumps(model_config_of(sa).hf_config.to_dict(), default=str))
        except Exception:  # before 0.5.19 (the plugin reads model_path's config.json), or sglang refused first
            try:
                with open(os.path.join(configs.get(item.get("model", "ds32"), item.get("config") or {}),
                                       "config.json")) as fh:
                    out["model_config"] = json.load(fh)
            except OSError as exc:
                out["model_config_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        with open(log) as fh:
            out["log"] = [json.loads(line) for line in fh if line.strip()]
        os.unlink(log)
    except FileNotFoundError:
        out["log"] = []
    return out


BASE_ENV: dict = {}


def main() -> None:
    modes = sys.argv[1].split(",")
    quiet_imports()
    os.environ["NSA_POLICY"] = "audit"  # so that load_plugins() finds the plugin switched on
    from sglang.srt.plugins import load_plugins

    load_plugins()
    try:
        from sglang.srt.arg_groups import resolution_hooks

        hooks = sorted(getattr(resolution_hooks, "_HOOKS", {}))
    except ImportError:  # before 0.5.20
        from sglang.srt.plugins.hook_registry import HookRegistry

        hooks = sorted(getattr(HookRegistry, "_hooks", {}))
    sys.stderr.write(f"hooks registered: {hooks}\n")
    parser = build_parser()
    BASE_ENV.update({k: v for k, v in os.environ.items() if k not in INPUT_ENV and k not in PLUGIN_ENV})
    configs = ConfigDirs()
    logdir = tempfile.mkdtemp(prefix="plugin-harness-")
    items = [json.loads(line) for line in sys.stdin if line.strip()]
    groups: dict = {}
    for item in items:
        groups.setdefault((item["device"], bool(item.get("preshuffle", False))), []).append(item)
    n = 0
    for (device, preshuffle), group in groups.items():
        assert device in DEVICES, device
        clear_probe_caches()
        with emulated(device, preshuffle):
            for item in group:
                for mode in modes:
                    n += 1
                    sys.stdout.write(json.dumps(run(parser, configs, item, mode, logdir, n), sort_keys=True) + "\n")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
