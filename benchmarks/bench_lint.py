"""Lint throughput on a generated tree of 2,000 mixed files (target: >= 500 files/second).

The tree holds shell scripts, Dockerfiles, Kubernetes Deployments, Helm values, compose files,
TOML and JSON configs and .env files (equal shares), generated from templates with a fixed seed;
about a third carry a seeded mistake. Two measurements, each the median of several runs:
  - end to end: `nsa-policy lint TREE --format json` as a fresh process (start-up included);
  - in process: lint_paths(TREE) after a warm-up (the work per file alone).
Prints a table and writes benchmarks/results/lint.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "lint.json"
TARGET = 500.0
DEVICES = ["h200", "h100", "b200", "b300", "rtx-pro-6000", "mi300x", "gb200"]
GPU_LABELS = {"h200": "NVIDIA-H200", "h100": "NVIDIA-H100-80GB-HBM3", "b200": "NVIDIA-B200", "b300": "NVIDIA-B300-SXM6-AC",
              "rtx-pro-6000": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "mi300x": "mi300x", "gb200": "NVIDIA-GB200"}
MODELS = ["deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5", "zai-org/GLM-5.1-FP8", "deepseek-ai/DeepSeek-V3", "org/unknown-model"]
BACKENDS = ["flashmla_sparse", "flashmla_kv", "fa3", "trtllm", "tilelang", "flashinfer_sparse_mla", "flashmla-kv"]
KV = ["fp8_e4m3", "bfloat16", "auto", "fp8_e5m2"]


def _args(rng: random.Random) -> list[str]:
    out = ["--model-path", rng.choice(MODELS), "--tp-size", rng.choice(["4", "8"])]
    if rng.random() < 0.7:
        out += ["--kv-cache-dtype", rng.choice(KV)]
    if rng.random() < 0.6:
        out += ["--nsa-prefill-backend", rng.choice(BACKENDS)]
    if rng.random() < 0.5:
        out += ["--nsa-decode-backend", rng.choice(BACKENDS)]
    if rng.random() < 0.3:
        out += ["--dp-size", "8", "--enable-dp-attention"]
    if rng.random() < 0.15:
        out += ["--mem-fraction-statc", "0.8"]
    out += ["--host", "0.0.0.0", "--port", "30000", "--trust-remote-code"]
    return out


def _threshold(rng: random.Random) -> str:
    return rng.choice(["2048", "4096", "131072"])


def shell(rng):
    a = _args(rng)
    body = " \\\n  ".join(f"{a[i]} {a[i + 1]}" if i + 1 < len(a) and not a[i + 1].startswith("--") else a[i]
                          for i in range(len(a)) if a[i].startswith("--"))
    return ("run.sh", f"#!/usr/bin/env bash\n# nsa-policy: device={rng.choice(DEVICES)}\nset -euo pipefail\n"
                      f"PORT=${{PORT:-30000}}\nexport SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD={_threshold(rng)}\n"
                      f"python3 -m sglang.launch_server \\\n  {body}\n")


def dockerfile(rng):
    a = json.dumps(_args(rng))
    return ("Dockerfile", f"FROM lmsysorg/sglang:v0.5.10-cu129\n# nsa-policy: device={rng.choice(DEVICES)}\n"
                          f"ENV SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD={_threshold(rng)}\nEXPOSE 30000\n"
                          f'ENTRYPOINT ["python3", "-m", "sglang.launch_server"]\nCMD {a}\n')


def k8s(rng):
    dev = rng.choice(DEVICES)
    args = "\n".join(f"            - {json.dumps(x)}" for x in _args(rng))
    return ("deployment.yaml", f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: sglang
spec:
  replicas: 1
  template:
    spec:
      nodeSelector:
        nvidia.com/gpu.product: {GPU_LABELS[dev]}
      containers:
        - name: sglang
          image: lmsysorg/sglang:v0.5.10-cu129
          command: ["python3", "-m", "sglang.launch_server"]
          args:
{args}
          env:
            - name: SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD
              value: "{_threshold(rng)}"
          resources:
            limits: {{nvidia.com/gpu: 8}}
---
apiVersion: v1
kind: Service
metadata:
  name: sglang
spec:
  ports: [{{port: 30000}}]
""")


def helm(rng):
    a = _args(rng)
    keys = "\n".join(f"  {a[i][2:]}: {a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith('--') else 'true'}"
                     for i in range(len(a)) if a[i].startswith("--"))
    return ("values.yaml", f"# nsa-policy: device={rng.choice(DEVICES)}\nreplicaCount: 2\nimage:\n  repository: lmsysorg/sglang\n"
                           f"  tag: v0.5.10\nsglang:\n{keys}\nservice:\n  port: 30000\n")


def compose(rng):
    cmd = " ".join(_args(rng))
    return ("docker-compose.yaml", f"services:\n  sglang:\n    image: lmsysorg/sglang:v0.5.12\n"
                                   f"    # nsa-policy: device={rng.choice(DEVICES)}\n"
                                   f"    command: python3 -m sglang.launch_server {cmd}\n"
                                   f"    environment:\n      - SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD={_threshold(rng)}\n"
                                   f"    ports: [\"30000:30000\"]\n")


def toml(rng):
    a = _args(rng)
    lines = []
    for i in range(len(a)):
        if a[i].startswith("--"):
            v = a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith("--") else None
            lines.append(f"{a[i][2:]} = {json.dumps(v) if v is not None else 'true'}")
    return ("server.toml", f"# nsa-policy: device={rng.choice(DEVICES)}\n[server]\n" + "\n".join(dict.fromkeys(lines)) + "\n")


def jsonfile(rng):
    a = _args(rng)
    d = {"nsa-policy": {"device": rng.choice(DEVICES)}}
    for i in range(len(a)):
        if a[i].startswith("--"):
            v = a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith("--") else True
            d[a[i][2:].replace("-", "_")] = v
    return ("sglang.json", json.dumps(d, indent=2) + "\n")


def envfile(rng):
    return ("sglang.env", f"# generated\nSGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD={_threshold(rng)}\nLOG_LEVEL=info\n")


KINDS = [shell, dockerfile, k8s, helm, compose, toml, jsonfile, envfile]


def generate(root: Path, n: int, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for i in range(n):
        make = KINDS[i % len(KINDS)]
        name, text = make(rng)
        folder = root / f"svc{i // 40:03d}" / f"{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
        counts[make.__name__] = counts.get(make.__name__, 0) + 1
    return counts


def end_to_end(root: Path) -> tuple[float, dict]:
    exe = shutil.which("nsa-policy")
    argv = (([exe] if exe else [sys.executable, "-c", "from nsa_policy.cli import main; main()"])
            + ["lint", str(root), "--format", "json"])
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"lint exited {proc.returncode}: {proc.stderr}")
    return wall, json.loads(proc.stdout)["summary"]


def in_process(root: Path) -> float:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from nsa_policy.lint import lint_paths

    start = time.perf_counter()
    lint_paths([str(root)])
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-write", action="store_true", help="print only; do not write results/lint.json")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsa-lint-bench-") as tmp:
        root = Path(tmp) / "tree"
        counts = generate(root, opts.files)
        end_to_end(root)  # warm the page cache
        e2e = [end_to_end(root) for _ in range(opts.runs)]
        in_process(root)  # warm-up: imports, catalogs, bundle compile
        inproc = [in_process(root) for _ in range(opts.runs)]
    walls = [w for w, _ in e2e]
    summary = e2e[0][1]
    e2e_med, in_med = statistics.median(walls), statistics.median(inproc)
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "processor": _cpu_model()},
        "files": opts.files, "files_by_kind": counts, "runs": opts.runs,
        "lint_summary": {k: summary[k] for k in ("files_scanned", "launches", "errors", "warnings", "notes")},
        "end_to_end": {"median_wall_s": e2e_med, "files_per_s": opts.files / e2e_med, "walls_s": walls},
        "in_process": {"median_wall_s": in_med, "files_per_s": opts.files / in_med, "walls_s": inproc},
        "target_files_per_s": TARGET,
        "meets_target": opts.files / e2e_med >= TARGET,
    }
    print(f"{'measurement':<34}{'median s':>10}{'files/s':>10}")
    print(f"{'nsa-policy lint (fresh process)':<34}{e2e_med:>10.3f}{opts.files / e2e_med:>10.0f}")
    print(f"{'lint_paths() in process':<34}{in_med:>10.3f}{opts.files / in_med:>10.0f}")
    print(f"files {summary['files_scanned']}, launches {summary['launches']}, errors {summary['errors']}, "
          f"warnings {summary['warnings']}, notes {summary['notes']}; target >= {TARGET:.0f} files/s end to end: "
          f"{'met' if result['meets_target'] else 'NOT met'}")
    if not opts.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {RESULTS}")


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
