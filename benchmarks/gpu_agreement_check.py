"""Rank agreement over a real process group: ensure_agreement with NCCL on GPUs (or gloo on CPU).

    python benchmarks/gpu_agreement_check.py --backend nccl --world 2 --out results.json
    python benchmarks/gpu_agreement_check.py --backend gloo --world 2 --device h200 --out results.json

Starts WORLD processes (one per GPU with NCCL: rank r uses cuda:r, set with torch.cuda.set_device
before init_process_group, as NCCL's object collectives need). Each rank:
  1. reads ITS OWN GPU through NVML (index = its CUDA device) — or takes --device — and runs
     nsa_policy.startup.apply on an sglang-shaped Namespace (DeepSeek-V3.2, tp = world);
  2. agree: ensure_agreement over the WORLD group; must pass with one digest on every rank;
     timed (first call, then the median of --repeats calls);
  3. disagree: the last rank resolves for --odd-device (b200: a node of another class) instead;
     every rank must raise DisagreementError, with the same message.
Prints a table and writes every rank's record plus the machine facts to --out. Exit 1 if a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DS = "deepseek-ai/DeepSeek-V3.2"
# Shared GPUs: NVLink multicast stays off (device README).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def worker(a: argparse.Namespace) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rec: dict = {"rank": rank}
    try:
        import torch
        import torch.distributed as dist

        from nsa_policy.catalog.store import load_catalog
        from nsa_policy.engines.sglang.startup import apply
        from nsa_policy.integration.distributed import DisagreementError, ensure_agreement

        device_arg: object = a.device
        if a.backend == "nccl":
            cuda_index = rank % torch.cuda.device_count()
            torch.cuda.set_device(cuda_index)  # before any object collective on NCCL
            rec["cuda_device"] = cuda_index
            rec["torch_device_name"] = torch.cuda.get_device_name(cuda_index)
            if a.device == "auto":
                from nsa_policy.integration.discovery import facts_from_nvml_reading, read_nvml

                reading = read_nvml(index=cuda_index)  # this rank's own GPU, not GPU 0
                rec["nvml"] = reading
                device_arg = facts_from_nvml_reading(reading, load_catalog())

        def decide(device):
            ns = argparse.Namespace(model_path=DS, kv_cache_dtype="auto", nsa_prefill_backend=None,
                                    nsa_decode_backend=None, page_size=None, tensor_parallel_size=world,
                                    data_parallel_size=1, enable_dp_attention=False)
            return apply(ns, device=device, env={}, logger=quiet)

        import logging

        quiet = logging.getLogger("agreement-check")
        quiet.addHandler(logging.NullHandler())  # the decision is in the record written below
        quiet.propagate = False

        t0 = time.perf_counter()
        dist.init_process_group(a.backend, timeout=timedelta(seconds=60))
        rec["init_s"] = round(time.perf_counter() - t0, 3)
        rec["backend"] = dist.get_backend()
        applied = decide(device_arg)
        rec["decision"] = {k: getattr(applied.decision, k) for k in
                           ("device", "device_class", "kv_cache_dtype", "prefill_backend", "decode_backend",
                            "page_size", "dense_attn_kv_len_threshold", "heads_per_rank")}
        rec["written"] = applied.written
        t0 = time.perf_counter()
        agreed = ensure_agreement(applied)
        rec["first_call_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            ensure_agreement(applied)
            times.append((time.perf_counter() - t0) * 1e3)
        rec["median_call_ms"] = round(statistics.median(times), 3)
        rec["agreed"] = agreed.model_dump(mode="json")
        odd = decide(a.odd_device) if rank == world - 1 else applied
        try:
            ensure_agreement(odd)
            rec["disagreement"] = None
        except DisagreementError as exc:
            rec["disagreement"] = {"message": str(exc), "fields": list(exc.fields), "groups": [list(g) for g in exc.groups]}
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        rec["error"] = traceback.format_exc()
    Path(a.rank_out.format(rank=rank)).write_text(json.dumps(rec, default=str))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_facts(backend: str) -> dict:
    facts = {"host": socket.gethostname(), "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "python": platform.python_version(), "platform": platform.platform()}
    try:
        import torch

        facts["torch"] = torch.__version__
        if backend == "nccl":
            facts["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # reported, not fatal: the ranks' records say what ran
        facts["torch_error"] = repr(exc)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        facts["nvidia_smi"] = out.stdout.strip().splitlines()
    except Exception:
        pass
    facts["rank_env"] = dict(SAFE_ENV)  # set for every rank, whatever the parent had
    return facts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--device", default="auto", help="auto: each rank reads its own GPU through NVML (nccl only)")
    p.add_argument("--odd-device", default="b200", help="what the last rank resolves for in the disagreement step")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--timeout", type=float, default=240.0)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "agreement_check.json"))
    p.add_argument("--rank-out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank_out:
        worker(a)
        return 0
    if a.backend == "gloo" and a.device == "auto":
        p.error("--device auto reads GPUs; with gloo give a device name (e.g. --device h200)")
    tmp = Path(tempfile.mkdtemp(prefix="agreement-"))
    env = {**os.environ, **SAFE_ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(a.world), "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if a.backend == "gloo" and sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, __file__, "--backend", a.backend, "--device", a.device, "--odd-device", a.odd_device,
           "--repeats", str(a.repeats), "--rank-out", str(tmp / "rank{rank}.json")]
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, cwd=REPO) for r in range(a.world)]
    deadline = time.monotonic() + a.timeout
    timed_out = False
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    ranks = []
    for r in range(a.world):
        f = tmp / f"rank{r}.json"
        ranks.append(json.loads(f.read_text()) if f.exists() else {"rank": r, "error": "no result (timed out or crashed)"})
    checks = {
        "no_rank_failed": all("error" not in r for r in ranks) and not timed_out,
        "all_agree_first": len({(r.get("agreed") or {}).get("digest") for r in ranks}) == 1
                           and all(r.get("agreed") for r in ranks),
        "every_rank_raised_on_odd_device": all(r.get("disagreement") for r in ranks),
        "same_message_on_every_rank": len({(r.get("disagreement") or {}).get("message") for r in ranks}) == 1,
    }
    result = {"script": "benchmarks/gpu_agreement_check.py", "argv": sys.argv[1:], "backend": a.backend,
              "world": a.world, "wall_s": round(time.perf_counter() - started, 2), "machine": machine_facts(a.backend),
              "checks": checks, "passed": all(checks.values()), "ranks": ranks}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"backend {a.backend}, {a.world} ranks, wall {result['wall_s']} s")
    print(f"{'rank':>4} {'device':<8} {'class':<6} {'kv':<9} {'prefill':<16} {'decode':<12} {'init s':>7} "
          f"{'1st ms':>8} {'med ms':>8}  digest")
    for r in ranks:
        d = r.get("decision") or {}
        print(f"{r['rank']:>4} {str(d.get('device')):<8} {str(d.get('device_class')):<6} {str(d.get('kv_cache_dtype')):<9} "
              f"{str(d.get('prefill_backend')):<16} {str(d.get('decode_backend')):<12} {r.get('init_s', '-'):>7} "
              f"{r.get('first_call_ms', '-'):>8} {r.get('median_call_ms', '-'):>8}  {(r.get('agreed') or {}).get('digest')}")
        if "error" in r:
            print(f"     error: {r['error']}")
    msg = (ranks[0].get("disagreement") or {}).get("message")
    if msg:
        print(f"disagreement message (identical on every rank: {checks['same_message_on_every_rank']}):")
        print(msg)
    print("checks: " + ", ".join(f"{k}={v}" for k, v in checks.items()))
    print(f"wrote {a.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
