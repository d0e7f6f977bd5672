"""The sglang plugin: the policy inside sglang's own start-up (entry point group `sglang.srt.plugins`).

    pip install nsa-policy          # in the serving image
    NSA_POLICY=fill                 # audit | fill | enforce; unset = off

sglang's `load_plugins()` (launch_server, `sglang serve`, Engine, and again in its subprocesses)
calls `register()`. Where the seam is (read from the wheels):

- 0.5.20+: `arg_groups.resolution_hooks.register_resolution_hook("handle_model_specific_adjustments")`
  wraps the pipeline step in which DSA's KV dtype, backends and page size are resolved
  (`arg_groups/model_hook.py`). The hook decides, declares the decided values the user left unset
  with sglang's own `overrides.declare_resolution` (ServerArgs is an immutable record from 0.5.19),
  sets the threshold variable, then calls the built-in step: sglang's resolution and validation still
  run after it, and see the filled values as set.
- 0.5.12-0.5.18: no resolution hooks, and ServerArgs is a mutable dataclass whose `__post_init__`
  resolves. A `HookRegistry` BEFORE hook on `ServerArgs.__post_init__` writes the unset fields first
  (`startup.apply`, the same code `launch` uses), then sglang's own `__post_init__` runs.
- 0.5.19: neither fits as shipped (record + pipeline without resolution hooks): the plugin logs that
  and does nothing; `nsa-policy launch` is the way there.
- 0.5.10-0.5.11: no plugin system (sglang never calls this).

Per rank: sglang loads the plugins again in each scheduler subprocess (`run_scheduler_process`, one
per TP/PP rank, on its own GPU). There `register()` decides again from the inputs the starting process
exported, on this rank's GPU (`auto:<gpu_id>`, NVML), logs it with the shared decision id and the
rank, and compares it with the starting process's decision (plugin_common.check_rank); a disagreement
is logged, and in enforce a `HookRegistry` BEFORE hook on `Scheduler.__init__` refuses before the
model loads (load_plugins swallows what register() raises).

Modes (plugin_common): off does nothing at all (no hook is registered); audit decides, logs the
decision, what sglang resolved and every difference, and changes nothing; fill writes the decision
into the unset fields; enforce does what fill does and raises before the built-in step (so before any
weights load) when the decision has errors, with the policy's one-line explanation. audit and fill
never stop sglang: an error inside the plugin is logged and sglang runs as without it.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Mapping, Optional

from nsa_policy.integration import plugin_common as pc

LOGGER = logging.getLogger(__name__)  # nsa_policy.engines.sglang.plugin
STEP = "handle_model_specific_adjustments"
SOURCE = "nsa_policy.plugin"  # the declaration source sglang records for our writes
# decision output → sglang field (0.5.13+ spelling; 0.5.12 spells the backends nsa_*)
ENGINE_FIELDS = {"kv_cache_dtype": "kv_cache_dtype", "prefill_backend": "dsa_prefill_backend",
                 "decode_backend": "dsa_decode_backend", "page_size": "page_size"}

_registered: list[str] = []


def _quiet_logger() -> logging.Logger:
    """apply() logs its own record; the plugin logs one line of its own instead (audit writes a copy)."""
    quiet = logging.getLogger(f"{__name__}.apply")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    return quiet


def register() -> None:
    """The entry point: register the seam this sglang release offers. Never raises."""
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        return
    pc.guarded(LOGGER, "fill", "register", _register)  # registration problems never stop sglang
    scheduler = _scheduler_frame(sys._getframe(1))
    if scheduler is not None:
        try:
            pc.guarded(LOGGER, current, "rank check", lambda: _rank_check(scheduler, current))
        except pc.PluginRefused as exc:  # enforce: refuse where sglang lets an exception stop the rank
            _refuse_scheduler(exc)


def _register() -> None:
    if _registered:
        return
    try:
        from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook
    except ImportError:
        register_resolution_hook = None
    if register_resolution_hook is not None:
        register_resolution_hook(STEP)(resolution_hook)
        _registered.append("resolution_hook")
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.server_args import ServerArgs

    if hasattr(ServerArgs, "resolve_once"):  # 0.5.19: a record resolved by a pipeline without hooks
        LOGGER.warning("nsa-policy plugin: this sglang release has no resolution hook and an immutable "
                       "ServerArgs; the plugin does nothing here; use `nsa-policy launch -- ...`")
        return
    HookRegistry.register("sglang.srt.server_args.ServerArgs.__post_init__", post_init_hook, HookType.BEFORE)
    _registered.append("post_init")


# ---------------------------------------------------------------- shared by both seams

def _sglang_release() -> Optional[str]:
    return pc.engine_release("sglang")


def _fields_for_policy(view: Any) -> dict[str, Any]:
    """The fields apply() reads, as sglang's view shows them now (a plain dict: apply writes into it)."""
    from nsa_policy.engines.sglang.config import ALIAS_SWITCHES, ATTN_DP_NAMES, FIELD_ALIASES
    from nsa_policy.engines.sglang.startup import PARSER_DESTS, TARGETS
    from nsa_policy.inputs import CONFIG_FIELDS

    names = {"model_path", *CONFIG_FIELDS, *FIELD_ALIASES, *ATTN_DP_NAMES, *ALIAS_SWITCHES, *ALIAS_SWITCHES.values(),
             *PARSER_DESTS, *(a for attrs in TARGETS.values() for a in attrs)}
    out: dict[str, Any] = {}
    for name in sorted(names):
        try:
            out[name] = getattr(view, name)
        except AttributeError:
            continue
    return out


def decide(fields: dict[str, Any], model: Any, *, env: Optional[dict[str, str]] = None,
           sglang_version: Optional[str] = None) -> tuple[Any, Any]:
    """(Applied or None when rejected, Decision): what fill writes into `fields` (a dict the caller owns)
    and which threshold variable it sets. The same call in every mode; CI replays it on recorded fields."""
    from nsa_policy.engines.sglang.startup import StartupRejected, apply  # not nsa_policy.startup: all of it (cold start)

    env = dict(os.environ) if env is None else env
    try:
        applied = apply(fields, policy=pc.bundle(env), device=pc.device(env), model=model, env=env,
                        logger=_quiet_logger(), sglang_version=sglang_version or _sglang_release())
    except StartupRejected as exc:
        return None, exc.decision
    return applied, applied.decision


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    # None stays: an unset field present is what fill writes into
    return {k: v if v is None or isinstance(v, (bool, int, float, str)) else str(v) for k, v in fields.items()}


_READ: dict[str, Any] = {}  # what this process's last decision read, for its decision-log line


def _engine_values(read: Callable[[str], Any]) -> dict[str, Any]:
    from nsa_policy.engines.sglang.args import load_args

    out = {}
    for out_name, field in ENGINE_FIELDS.items():
        value = read(field)
        if value is None and field.startswith("dsa_"):  # 0.5.12.post1 and before spell them nsa_*
            value = read("nsa_" + field[len("dsa_"):])
        out[out_name] = value
    release = _sglang_release()
    var = load_args().env_var_read("dense_attn_kv_len_threshold", release) if release else None
    if var:
        raw = os.environ.get(var)
        out["dense_attn_kv_len_threshold"] = int(raw) if raw not in (None, "", "None") and raw.lstrip("-").isdigit() else raw
    return out


def _decided(decision: Any) -> dict[str, Any]:
    return {k: getattr(decision, k) for k in (*ENGINE_FIELDS, "dense_attn_kv_len_threshold")}


def _finish(decision: Any, applied: Any, current: pc.Mode, engine: dict[str, Any], timer: pc.Timer,
            engine_error: Optional[BaseException], seam: str, refused: Optional[str] = None) -> None:
    written = dict(applied.written) if applied is not None else {}
    env_set = dict(applied.env_set) if applied is not None else {}
    status = "rejected" if decision.errors else ("applied" if decision.applies else "not_applicable")
    diff = pc.differences(_decided(decision), engine) if decision.applies and not decision.errors else {}
    context = {"status": status, "seam": seam, "sglang": _sglang_release(),
               "written" if current != "audit" else "would_write": {k: str(v) for k, v in written.items()},
               "env_set" if current != "audit" else "would_set": env_set, "engine": engine,
               "differences": diff, "read": dict(_READ), "plugin_ms": timer.ms()}
    if refused is not None:
        context["refused"] = refused
    if engine_error is not None:
        context["engine_error"] = f"{type(engine_error).__name__}: {' '.join(str(engine_error).split())[:300]}"
    pc.log_decision(decision, engine="sglang", current=current, context=context, logger=LOGGER)
    if status == "rejected":
        line = pc.one_line(decision, flag_of)
    else:
        line = (f"nsa-policy {current} ({decision.policy} {decision.policy_digest}, {decision.device} "
                f"{decision.device_class}, sglang {_sglang_release()}): {status}; decision "
                + ", ".join(f"{k}={v}" for k, v in _decided(decision).items()))
        if written or env_set:
            line += ("; would write " if current == "audit" else "; wrote ") + ", ".join(
                f"{k}={v}" for k, v in {**written, **env_set}.items())
        if diff:
            line += "; sglang differs: " + ", ".join(f"{k} policy={v['policy']} sglang={v['engine']}" for k, v in diff.items())
    level = logging.ERROR if status == "rejected" else (logging.WARNING if diff or decision.warnings else logging.INFO)
    LOGGER.log(level, line + f" [decision_id {pc.decision_id(create=False)}]")


# ---------------------------------------------------------------- per rank: the scheduler subprocesses

SCHEDULER_ENTRY = "run_scheduler_process"  # sglang.srt.managers.scheduler: calls load_plugins() first
SCHEDULER_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"
_REFUSALS: list[pc.PluginRefused] = []


def _scheduler_frame(frame: Any, depth: int = 8) -> Optional[dict[str, Any]]:
    """run_scheduler_process's arguments (server_args, gpu_id, tp_rank, pp_rank, ...) when sglang's
    load_plugins() was called from it: register() takes no argument, and the rank's GPU is only there."""
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code.co_name == SCHEDULER_ENTRY and "gpu_id" in frame.f_locals:
            return dict(frame.f_locals)
        frame = frame.f_back
    return None


def _rank_of(where: dict[str, Any]) -> int:
    tp_rank = int(where.get("tp_rank") or 0)
    pp_rank = int(where.get("pp_rank") or 0)
    tp_size = int(getattr(where.get("server_args"), "tp_size", 1) or 1)
    return pp_rank * tp_size + tp_rank


def decide_from_inputs(inputs: Mapping[str, Any], device: str) -> Any:
    """The decision a rank makes from the starting process's exported inputs, on `device`."""
    env = {**(inputs.get("env") or {}), pc.BUNDLE_VAR: inputs.get("bundle") or pc.bundle(), pc.DEVICE_VAR: device}
    _, decision = decide(dict(inputs.get("fields") or {}), inputs.get("model"), env=env,
                         sglang_version=inputs.get("release"))
    return decision


def _rank_check(where: dict[str, Any], current: pc.Mode) -> Optional[str]:
    context: dict[str, Any] = {k: where.get(k) for k in ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank", "gpu_id") if k in where}
    return pc.check_rank(engine="sglang", rank=_rank_of(where), cuda_index=where.get("gpu_id"), current=current,
                         decide_on=decide_from_inputs, logger=LOGGER,
                         context={**context, "sglang": _sglang_release(), "process": SCHEDULER_ENTRY})


def _refuse_scheduler(refusal: pc.PluginRefused) -> None:
    """enforce: make the rank fail before its model loads. A BEFORE hook on Scheduler.__init__ raises
    inside run_scheduler_process's own error handling (sglang logs it and stops the server); where the
    hook cannot be registered, SystemExit (load_plugins catches only Exception) stops the rank here."""
    LOGGER.error("%s", refusal)
    _REFUSALS.append(refusal)
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        HookRegistry.register(SCHEDULER_INIT, refuse_scheduler_hook, HookType.BEFORE)
    except Exception as exc:
        raise SystemExit(f"{refusal} (Scheduler hook not registered: {type(exc).__name__}: {exc})") from None


def refuse_scheduler_hook(*args: Any, **kwargs: Any) -> None:
    """BEFORE Scheduler.__init__ (so before the model loads): raise the rank check's refusal."""
    if _REFUSALS:
        raise _REFUSALS[0]


# ---------------------------------------------------------------- 0.5.20+: the resolution hook

def resolution_hook(server_args: Any, previous: Callable[[Any], None]) -> None:
    """`fn(server_args, previous)` for handle_model_specific_adjustments (sglang 0.5.20+)."""
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        previous(server_args)
        return
    timer = pc.Timer()
    state = pc.guarded(LOGGER, current, "decide", lambda: _decide_record(server_args, current, timer))
    if state is not None and current != "audit":
        pc.guarded(LOGGER, current, "fill", lambda: _fill_record(server_args, state[0]))
    timer.stop()
    engine_error: Optional[BaseException] = None
    try:
        previous(server_args)
    except BaseException as exc:
        engine_error = exc
        raise
    finally:
        if state is not None:
            pc.guarded(LOGGER, "fill", "log", lambda: _finish(
                state[1], state[0], current, _engine_values(_record_reader(server_args)), timer, engine_error,
                "resolution_hook"))


def _record_reader(server_args: Any) -> Callable[[str], Any]:
    from sglang.srt.arg_groups.overrides import resolution_result

    return lambda field: resolution_result(server_args, field)


def flag_of(field: str, release: Optional[str] = None) -> str:
    """A policy field as the running sglang release spells its flag (--dsa-* from 0.5.13, --nsa-* before)."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    arg = next((a for a in reg.doc.arguments if a.field == field or a.name == field), None)
    release = release or _sglang_release()
    attr = reg.attribute_for(arg.name, release) if arg is not None and release else None
    return "--" + (attr or field).replace("_", "-")


def _refuse_if_rejected(decision: Any, current: pc.Mode, timer: pc.Timer, seam: str) -> None:
    """enforce: log the rejected decision, then stop the start-up with its one-line explanation."""
    if decision.errors and current == "enforce":
        line = pc.one_line(decision, flag_of)
        pc.guarded(LOGGER, "fill", "log", lambda: _finish(decision, None, current, {}, timer, None, seam, refused=line))
        raise pc.PluginRefused(line, decision)


def _decide_record(server_args: Any, current: pc.Mode, timer: pc.Timer) -> tuple[Any, Any]:
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view

    view = resolving_view(server_args)
    fields = _fields_for_policy(view)
    hf_config = model_config_of(server_args).hf_config
    model = hf_config.to_dict() if hasattr(hf_config, "to_dict") else hf_config
    _READ.clear()
    _READ.update(_jsonable(fields))
    inputs = _inputs(model, view)
    pc.decision_id(seed=_seed(inputs, view))  # here, in the process that resolves; its subprocesses inherit it
    applied, decision = decide(fields, model)
    _refuse_if_rejected(decision, current, timer, "resolution_hook")
    pc.export_view(decision, inputs=inputs)
    return applied, decision


RENDEZVOUS = ("dist_init_addr", "nnodes")  # the same on every node of one deployment


def _inputs(model: Any, view: Any) -> dict[str, Any]:
    """What a rank process needs to decide again as this one did (before fill writes anything)."""
    from nsa_policy.engines.sglang.env import variables

    env = {k: os.environ[k] for k in variables() if k in os.environ}
    return {"fields": dict(_READ), "model": model if isinstance(model, dict) else None, "env": env,
            "bundle": pc.bundle(), "release": _sglang_release()}


def _seed(inputs: dict[str, Any], view: Any) -> dict[str, Any]:
    rendezvous = {k: getattr(view, k, None) for k in RENDEZVOUS}
    rendezvous.update({k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT") if k in os.environ})
    return {"engine": "sglang", "release": inputs["release"], "read": inputs["fields"], "model": inputs["model"],
            "env": inputs["env"], "bundle": inputs["bundle"], "rendezvous": rendezvous}


def _fill_record(server_args: Any, applied: Any) -> None:
    """Declare the decided values with sglang's own declaration (last writer wins, raw input kept)."""
    if applied is None or not (applied.written or applied.env_set):
        return
    if applied.written:
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, SOURCE, **applied.written)
    os.environ.update(applied.env_set)


# ---------------------------------------------------------------- 0.5.12-0.5.18: ServerArgs.__post_init__

def post_init_hook(server_args: Any, *args: Any, **kwargs: Any) -> Any:
    """A HookRegistry BEFORE hook on ServerArgs.__post_init__: fill the unset fields on the dataclass
    before sglang's own __post_init__ resolves and validates them. Returns None (arguments unchanged)."""
    current = pc.mode_or_off(LOGGER)
    if current == "off":
        return None
    timer = pc.Timer()

    def run() -> None:
        fields = _fields_for_policy(server_args)
        _READ.clear()
        _READ.update(_jsonable(fields))
        inputs = _inputs(None, server_args)
        pc.decision_id(seed=_seed(inputs, server_args))
        applied, decision = decide(fields, None)
        _refuse_if_rejected(decision, current, timer, "post_init")
        pc.export_view(decision, inputs=inputs)
        if current != "audit" and applied is not None:
            for attr, value in applied.written.items():
                setattr(server_args, attr, value)
            os.environ.update(applied.env_set)
        # sglang resolves after this hook returns: what it decides is logged as "before its pass"
        _finish(decision, applied, current, _engine_values(lambda f: getattr(server_args, f, None)), timer, None,
                "post_init")

    pc.guarded(LOGGER, current, "post_init", run)
    return None
