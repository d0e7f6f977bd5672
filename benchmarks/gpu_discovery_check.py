"""On a GPU machine: `--device auto` through nsa_policy's own discovery (NVML via nvidia-ml-py), end to end.

Usage: python3 benchmarks/gpu_discovery_check.py OUT.json
Records NVML's reading, the DeviceFacts discovery built, and the decision resolve() made with
device="auto" (and the CLI's, when typer is importable there).
"""
from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(out_path: str) -> int:
    import nsa_policy
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.integration.discovery import discover, read_nvml

    record: dict = {"measured_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    record["nvml_reading"] = read_nvml()
    facts = discover(load_catalog())
    record["device_facts"] = facts.model_dump(mode="json")
    decision = nsa_policy.resolve({}, device="auto", model="deepseek-ai/DeepSeek-V3.2")
    record["decision"] = {k: v for k, v in decision.model_dump(mode="json").items() if k not in ("trace", "inputs")}
    checks = {
        "discovery_source_is_nvml": facts.source == "nvml",
        "catalog_entry_h200": facts.name == "h200",
        "class_sm90": facts.device_class == "sm90",
        "decision_sm90_bf16_flashmla_sparse_fa3": (decision.device_class, decision.kv_cache_dtype, decision.prefill_backend,
                                                   decision.decode_backend) == ("sm90", "bfloat16", "flashmla_sparse", "fa3"),
    }
    try:
        import typer  # noqa: F401
    except ImportError:
        record["cli"] = "typer not installed on this machine: CLI not run"
    else:
        cli = subprocess.run([sys.executable, "-c", "from nsa_policy.cli import main; main()", "resolve", "--model",
                              "deepseek-ai/DeepSeek-V3.2", "--json"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent.parent)
        record["cli"] = {"exit_code": cli.returncode, "stderr": cli.stderr[-2000:]}
        if cli.returncode == 0:
            out = json.loads(cli.stdout)
            checks["cli_auto_device_h200"] = out["device"] == "h200" and out["inputs"]["device"]["source"] == "nvml"
    record["checks"] = checks
    Path(out_path).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
