"""Per-rank agreement with the real engines (runs INSIDE a side environment; issue 22).

    PYTHONPATH=<nsa-policy wheel target>:<sgenv pkgs>:<stubs>:<overlay> <python> rank_run.py sglang < cases.jsonl
    PYTHONPATH=<nsa-policy wheel target> <vllmenv python> rank_run.py vllm < cases.jsonl

Per case (mode, CUDA_VISIBLE_DEVICES, ranks): the starting process runs the engine's own start-up with
the plugin (sglang: load_plugins, parser, ServerArgs.from_cli_args, resolve_once, check_server_args;
vLLM: EngineArgs, whose __post_init__ runs load_general_plugins, and create_engine_config), so the plugin
decides and exports its decision. Then one process per rank is spawned (multiprocessing "spawn", as both
engines start them) running the engine's own rank entry:
- sglang: `sglang.srt.managers.scheduler.run_scheduler_process(server_args, port_args, gpu_id, tp_rank, ...)`,
  which calls load_plugins() and then builds the Scheduler (on this CPU host it fails after the plugin's
  check, loading the model; with enforce and a disagreement the plugin's hook refuses first);
- vLLM: `WorkerWrapperBase(rpc_rank, global_rank).init_worker([...])`, which calls load_general_plugins()
  and constructs the worker class the config names (the plugin checks in WorkerBase.__init__). vLLM's GPU
  worker module does not import on a CPU host (its Triton kernels), so the config names ProbeWorker
  below: a WorkerBase subclass whose constructor calls the real WorkerBase.__init__ as the GPU worker's does.
GPUs are read through NVML: tests/fixtures/fake_nvml (pynvml) replaying FAKE_NVML_NODE (the synthetic
mixed node: NVML 0 and 3 B200, 1 and 2 H200), in every process. Output per case: the decision-log lines
of every process, each rank's exit and the end of its stderr.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FAKE_NVML = os.path.join(ROOT, "tests", "fixtures", "fake_nvml")
NODE = os.path.join(ROOT, "tests", "fixtures", "nvml_mixed_node.json")


def _stderr_to(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    os.dup2(fd, 1)


# ---------------------------------------------------------------- sglang

def sglang_rank(server_args, port_args, gpu_id: int, tp_rank: int, err: str) -> None:
    _stderr_to(err)
    import logging

    logging.basicConfig(level=logging.INFO)
    from sglang.srt.managers.scheduler import run_scheduler_process

    reader, writer = mp.Pipe(duplex=False)
    run_scheduler_process(server_args, port_args, gpu_id, tp_rank, 0, None, writer)


def sglang_case(case: dict, log: str) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "sglang_oracle"))
    from _inrelease import build_parser, quiet_imports  # noqa: F401
    from policy_oracle import ConfigDirs, emulated
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import PortArgs, ServerArgs

    load_plugins()  # the launcher's own call (launch_server, before prepare_server_args); once per process
    parser = build_parser()
    configs = ConfigDirs()
    tp = case["tp"]
    with emulated(case["device"], False):
        ns = parser.parse_args(["--model-path", configs.get(case.get("model", "ds32"), {}), "--random-seed", "0",
                                "--tp-size", str(tp), *case.get("argv", [])])
        sa = ServerArgs.from_cli_args(ns)
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        sa.check_server_args()
    port_args = PortArgs.init_new(sa)
    ctx = mp.get_context("spawn")
    ranks = []
    for tp_rank in range(tp):
        err = f"{log}.rank{tp_rank}.err"
        p = ctx.Process(target=sglang_rank, args=(sa, port_args, tp_rank, tp_rank, err))
        p.start()
        ranks.append((tp_rank, p, err))
    return _collect(ranks)


# ---------------------------------------------------------------- vLLM

def _vllm_emulation(capability: tuple[int, int]) -> None:
    """As scripts/plugin_harness/vllm_run.py: compiled extensions stubbed, a CUDA platform object."""
    import types

    for m in ("vllm._C_stable_libtorch", "vllm._C", "vllm._flashmla_C", "vllm._flashmla_extension_C",
              "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C"):
        sys.modules[m] = types.ModuleType(m)
    import vllm.platforms as P
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    plat = cuda.NonNvmlCudaPlatform()
    P._current_platform = plat
    type(plat).get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(*capability))
    type(plat).device_count = classmethod(lambda cls: 8)
    import vllm._custom_ops as ops

    for n in ("cutlass_scaled_mm_supports_block_fp8", "cutlass_scaled_mm_supports_fp8",
              "cutlass_scaled_mm_supports_fp4", "cutlass_group_gemm_supported"):
        setattr(ops, n, lambda *a, **k: True)


def vllm_rank(cfg, local_rank: int, rank: int, capability, err: str) -> None:
    _stderr_to(err)
    import logging

    logging.basicConfig(level=logging.INFO)
    _vllm_emulation(capability)
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    w = WorkerWrapperBase(rpc_rank=rank, global_rank=rank)
    kwargs = [{} for _ in range(rank + 1)]
    kwargs[rank] = {"vllm_config": cfg, "local_rank": local_rank, "rank": rank,
                    "distributed_init_method": "tcp://127.0.0.1:29511", "is_driver_worker": rank == 0}
    w.init_worker(kwargs)
    print("WORKER CONSTRUCTED", flush=True)


def __getattr__(name: str):  # rank_run.ProbeWorker, made when vLLM's init_worker resolves it (vllm imported)
    if name != "ProbeWorker":
        raise AttributeError(name)
    from vllm.v1.worker.worker_base import WorkerBase

    class ProbeWorker(WorkerBase):
        def __init__(self, vllm_config, local_rank, rank, distributed_init_method, is_driver_worker=False):
            super().__init__(vllm_config=vllm_config, local_rank=local_rank, rank=rank,
                             distributed_init_method=distributed_init_method, is_driver_worker=is_driver_worker)

    globals()["ProbeWorker"] = ProbeWorker
    return ProbeWorker


def vllm_case(case: dict, log: str) -> dict:
    sys.path.insert(0, HERE)
    capability = {"sm90": (9, 0), "sm100": (10, 0)}[case["device"]]
    _vllm_emulation(capability)
    from vllm.engine.arg_utils import EngineArgs
    from vllm_run import model_dir

    root = tempfile.mkdtemp(prefix="vllm-rank-models-")
    tp = case["tp"]
    ea = EngineArgs(model=model_dir(root, case.get("model", "ds32")), skip_tokenizer_init=True,
                    tensor_parallel_size=tp, kv_cache_dtype=case.get("kv", "auto"))
    cfg = ea.create_engine_config()
    cfg.parallel_config.worker_cls = "rank_run.ProbeWorker"
    ctx = mp.get_context("spawn")
    ranks = []
    for rank in range(tp):
        err = f"{log}.rank{rank}.err"
        p = ctx.Process(target=vllm_rank, args=(cfg, rank, rank, capability, err))
        p.start()
        ranks.append((rank, p, err))
    return _collect(ranks)


# ---------------------------------------------------------------- shared

def _collect(ranks: list) -> dict:
    out = {}
    for rank, p, err in ranks:
        p.join(timeout=240)
        if p.is_alive():
            p.kill()
            p.join()
        try:
            text = open(err, errors="replace").read()
        except FileNotFoundError:
            text = ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        out[str(rank)] = {"exitcode": p.exitcode,
                          "refused_by_plugin": "PluginRefused" in text and "disagree on the DSA decision" in text,
                          "worker_constructed": "WORKER CONSTRUCTED" in text,
                          "plugin_lines": [ln[:400] for ln in lines if "nsa-policy" in ln][:6],
                          "stderr_tail": [ln[:300] for ln in lines[-4:]]}
    return out


def main() -> None:
    engine = sys.argv[1]
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)  # sglang's failing rank signals its parent
    os.environ["PYTHONPATH"] = os.pathsep.join([FAKE_NVML, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, FAKE_NVML)
    logdir = tempfile.mkdtemp(prefix="rank-harness-")
    for n, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        case = json.loads(line)
        log = os.path.join(logdir, f"{n}.jsonl")
        for key in [k for k in os.environ if k.startswith("NSA_POLICY")]:
            del os.environ[key]
        os.environ.update(NSA_POLICY=case["mode"], NSA_POLICY_DEVICE="auto", NSA_POLICY_LOG=log,
                          FAKE_NVML_NODE=NODE, CUDA_VISIBLE_DEVICES=case["cuda_visible_devices"])
        t0 = time.time()
        try:
            ranks = (sglang_case if engine == "sglang" else vllm_case)(case, log)
            error = None
        except BaseException as exc:  # the starting process refused (or the engine did)
            ranks, error = {}, {"type": type(exc).__name__, "message": " ".join(str(exc).split())[:600]}
        try:
            with open(log) as fh:
                entries = [json.loads(x) for x in fh if x.strip()]
        except FileNotFoundError:
            entries = []
        exported = json.loads(os.environ.get("NSA_POLICY_DECISION_VIEW") or "{}")
        inputs = exported.get("inputs") or {}
        if engine == "vllm" and inputs:  # process 0 exported the model's path (a temp dir here): its config, for the replay
            from vllm_run import MODELS

            inputs = {**inputs, "model": MODELS[case.get("model", "ds32")]}
        out = {"case": case, "error": error, "ranks": ranks, "wall_s": round(time.time() - t0, 1), "inputs": inputs,
               "parent_device": (exported.get("view") or {}).get("device"),
               "log": [{"origin": e["origin"], "device": e["decision"]["device"],
                        **{k: e["context"].get(k) for k in ("status", "mode", "rank", "decision_id", "agreement",
                                                           "digest", "parent_digest", "device_asked", "plugin_ms",
                                                           "gpu_id", "local_rank", "tp_rank")}} for e in entries]}
        sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
