"""The vLLM plugin: the policy inside vLLM's own start-up (entry point group `vllm.general_plugins`).

    pip install nsa-policy          # in the serving image
    NSA_POLICY=fill                 # audit | fill | enforce; unset = off

vLLM calls `register()` (a zero-argument callable) from `load_general_plugins()`, in every process:
`EngineArgs.__post_init__` and `vllm serve` before parsing in process 0, then EngineCore, the workers
and the model-inspection subprocess. With NSA_POLICY unset it returns at once and patches nothing.
Otherwise it wraps `EngineArgs.create_engine_config` (vllm/engine/arg_utils.py), where the attention
backend, KV dtype and block size become the VllmConfig that process 0 then hands to the engine core
and the workers:

- audit: decides on a copy of the EngineArgs (`startup.apply_vllm`, the code `launch` shares), builds
  the config untouched, and logs the decision, what vLLM resolved and every difference;
- fill: `apply_vllm` writes the decision into the fields the user left unset before the config is
  built; vLLM's own checks in create_engine_config still run after it;
- enforce: fill, and refuses (raises before the config exists, so before any weights load) when the
  decision has errors, with the policy's one-line explanation.
audit and fill never stop vLLM: an error inside the plugin is logged and vLLM runs as without it.

Per rank: in the processes vLLM starts after process 0 decided (EngineCore, the workers), `register()`
finds process 0's exported decision and wraps `WorkerBase.__init__` (vllm/v1/worker/worker_base.py),
which every GPU worker runs before its device and model are set up: there it decides again from process
0's inputs on this worker's GPU (`auto:<local_rank>`, NVML), logs it with the shared decision id and the
rank, and compares (plugin_common.check_rank); a disagreement is logged, and refused in enforce.
"""
from __future__ import annotations

import copy
import functools
import logging
import os
from typing import Any, Mapping, Optional

from nsa_policy.integration import plugin_common as pc

LOGGER = logging.getLogger(__name__)  # nsa_policy.engines.vllm.plugin
MARK = "__nsa_policy_wrapped__"


def _quiet_logger() -> logging.Logger:
    quiet = logging.getLogger(f"{__name__}.apply")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    return quiet


def register() -> None:
    """The entry point. Never raises."""
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        return
    pc.guarded(LOGGER, "fill", "register", _wrap)
    if pc.parent_view() is not None:  # a process vLLM started after process 0 decided
        pc.guarded(LOGGER, "fill", "register rank check", _wrap_worker)


WORKER_BASE = "vllm.v1.worker.worker_base"


def _wrap_worker() -> None:
    import importlib
    import inspect

    base = importlib.import_module(WORKER_BASE).WorkerBase
    original = base.__init__
    if getattr(original, MARK, False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind_partial(self, *args, **kwargs).arguments
        worker_rank_check(bound.get("local_rank"), bound.get("rank"))
        original(self, *args, **kwargs)

    setattr(__init__, MARK, True)
    base.__init__ = __init__


def decide_from_inputs(inputs: Mapping[str, Any], device: str) -> Any:
    """The decision a worker makes from process 0's exported inputs, on `device`."""
    env = {pc.BUNDLE_VAR: inputs.get("bundle") or pc.bundle(), pc.DEVICE_VAR: device}
    _, decision = decide(dict(inputs.get("fields") or {}), env=env, model=inputs.get("model"))
    return decision


def worker_rank_check(local_rank: Any, rank: Any) -> Optional[str]:
    """At WorkerBase.__init__: this worker's decision against process 0's. Raises PluginRefused in
    enforce on a disagreement (or when it cannot decide); otherwise never raises."""
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        return None
    cuda_index = int(local_rank) if isinstance(local_rank, int) else None
    return pc.guarded(LOGGER, current, "rank check", lambda: pc.check_rank(
        engine="vllm", rank=int(rank) if isinstance(rank, int) else -2, cuda_index=cuda_index, current=current,
        decide_on=decide_from_inputs, logger=LOGGER,
        context={"local_rank": local_rank, "vllm": _vllm_release(), "process": "WorkerBase.__init__"}))


def _wrap() -> None:
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs.create_engine_config
    if getattr(original, MARK, False):
        return  # loaded twice in this process

    @functools.wraps(original)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        return wrapped_create_engine_config(original, self, *args, **kwargs)

    setattr(create_engine_config, MARK, True)
    EngineArgs.create_engine_config = create_engine_config


def _vllm_release() -> Optional[str]:
    return pc.engine_release("vllm")


_READ: dict[str, Any] = {}  # the EngineArgs fields this process's last decision read, for its log line
READ_FIELDS = ("model", "attention_backend", "kv_cache_dtype", "block_size", "tensor_parallel_size",
               "decode_context_parallel_size", "attention_config")


def _decide(engine_args: Any, current: pc.Mode) -> tuple[Any, Any]:
    """(Applied or None, Decision). audit decides on a shallow copy, so nothing of the user's changes."""
    target = copy.copy(engine_args) if current == "audit" else engine_args
    _READ.clear()
    for k in READ_FIELDS:
        v = getattr(engine_args, k, None)
        if k == "attention_config":  # only its backend choice is the policy's input
            chosen = getattr(v, "backend", None) if v is not None else None
            v = {"backend": getattr(chosen, "name", chosen)} if chosen is not None else None
        _READ[k] = v if v is None or isinstance(v, (bool, int, float, str, dict)) else getattr(v, "name", str(v))
    rendezvous = {k: getattr(engine_args, k, None) for k in RENDEZVOUS}
    rendezvous.update({k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT") if k in os.environ})
    inputs = {"fields": dict(_READ), "model": None, "bundle": pc.bundle(), "release": _vllm_release()}
    pc.decision_id(seed={"engine": "vllm", **inputs, "rendezvous": rendezvous})  # process 0; the rest inherit it
    applied, decision = decide(target)
    _INPUTS.clear()
    _INPUTS.update(inputs)
    return applied, decision


# the same on every node of one deployment (vLLM's multi-node and data-parallel rendezvous)
RENDEZVOUS = ("master_addr", "master_port", "nnodes", "data_parallel_address", "data_parallel_rpc_port",
              "data_parallel_size")
_INPUTS: dict[str, Any] = {}  # what process 0's last decision was made from, exported for the workers


def decide(engine_args: Any, env: Optional[dict[str, str]] = None, model: Any = None) -> tuple[Any, Any]:
    """(Applied or None when rejected, Decision): apply_vllm on `engine_args` (written in place unless
    rejected). The same call in every mode; CI replays it on recorded fields."""
    from nsa_policy.engines.vllm.startup import StartupRejected, apply_vllm  # only the vLLM part (cold start)

    try:
        applied = apply_vllm(engine_args, policy=pc.bundle(env), device=pc.device(env), model=model,
                             logger=_quiet_logger())
    except StartupRejected as exc:
        return None, exc.decision
    return applied, applied.decision


def _engine_values(config: Any) -> dict[str, Any]:
    """What vLLM put in the config: the backend it was told (None = its selector decides in the worker),
    the requested KV dtype and the block size (None = decided when the backend is known)."""
    backend = getattr(getattr(config, "attention_config", None), "backend", None)
    cache = getattr(config, "cache_config", None)
    return {"attention_backend": getattr(backend, "name", backend),
            "requested_kv_cache_dtype": getattr(cache, "cache_dtype", None),
            "page_size": getattr(cache, "block_size", None)}


def _decided(decision: Any) -> dict[str, Any]:
    return {k: getattr(decision, k) for k in ("attention_backend", "requested_kv_cache_dtype", "page_size")}


def wrapped_create_engine_config(original: Any, engine_args: Any, *args: Any, **kwargs: Any) -> Any:
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        return original(engine_args, *args, **kwargs)
    timer = pc.Timer()

    def decide() -> tuple[Any, Any]:
        applied, decision = _decide(engine_args, current)
        if decision.errors and current == "enforce":
            line = pc.one_line(decision)
            pc.guarded(LOGGER, "fill", "log", lambda: _finish(applied, decision, current, None, timer, None, refused=line))
            raise pc.PluginRefused(line, decision)
        pc.export_view(decision, inputs=_INPUTS)
        return applied, decision

    state = pc.guarded(LOGGER, current, "decide", decide)
    timer.stop()
    config = None
    error: Optional[BaseException] = None
    try:
        config = original(engine_args, *args, **kwargs)
        return config
    except BaseException as exc:
        error = exc
        raise
    finally:
        if state is not None:
            pc.guarded(LOGGER, "fill", "log", lambda: _finish(state[0], state[1], current, config, timer, error))


def _finish(applied: Any, decision: Any, current: pc.Mode, config: Any, timer: pc.Timer,
            error: Optional[BaseException], refused: Optional[str] = None) -> None:
    written = {k: getattr(v, "name", v) for k, v in (applied.written.items() if applied is not None else ())}
    status = "rejected" if decision.errors else ("applied" if decision.applies else "not_applicable")
    engine = _engine_values(config) if config is not None else {}
    diff = pc.differences(_decided(decision), engine) if status == "applied" else {}
    context = {"status": status, "seam": "EngineArgs.create_engine_config", "vllm": _vllm_release(), "read": dict(_READ),
               "written" if current != "audit" else "would_write": {k: str(v) for k, v in written.items()},
               "engine": {k: (str(v) if v is not None else None) for k, v in engine.items()},
               "differences": diff, "plugin_ms": timer.ms()}
    if refused is not None:
        context["refused"] = refused
    if error is not None:
        context["engine_error"] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    pc.log_decision(decision, engine="vllm", current=current, context=context, logger=LOGGER)
    if status == "rejected":
        line = pc.one_line(decision)
    else:
        line = (f"nsa-policy {current} ({decision.policy} {decision.policy_digest}, {decision.device} "
                f"{decision.device_class}, vllm {_vllm_release()}): {status}; decision "
                + ", ".join(f"{k}={v}" for k, v in _decided(decision).items()))
        if written:
            line += ("; would write " if current == "audit" else "; wrote ") + ", ".join(f"{k}={v}" for k, v in written.items())
        if diff:
            line += "; vLLM differs: " + ", ".join(f"{k} policy={v['policy']} vllm={v['engine']}" for k, v in diff.items())
    level = logging.ERROR if status == "rejected" else (logging.WARNING if diff or decision.warnings else logging.INFO)
    LOGGER.log(level, line + f" [decision_id {pc.decision_id(create=False)}]")
