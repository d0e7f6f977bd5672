"""What the sglang and vLLM plugins share: the switch, the decision id, the never-crash guard, the log.

The plugins (nsa_policy/engines/sglang/plugin.py, nsa_policy/engines/vllm/plugin.py) run inside the
engine's own start-up. Both are off unless `NSA_POLICY` names a mode; every engine loads every
installed plugin when its own allow-list (SGLANG_PLUGINS, VLLM_PLUGINS) is unset, so an installed
plugin must do nothing by default.

Variables (read when the engine resolves its arguments, not at import):
  NSA_POLICY          off (default, also unset/empty) | audit | fill | enforce
  NSA_POLICY_BUNDLE   the policy bundle to resolve with (default: "default")
  NSA_POLICY_DEVICE   "auto" (default: this rank's GPU, as integration.discovery reads it) or a
                      catalog device name / capability spec (for a node NVML cannot read)
  NSA_POLICY_LOG      decision-log file each process appends its decision to (docs/decision-log.md)
  NSA_POLICY_DECISION_ID  the id shared by the processes of one start-up. Unset, the process that
                      decides derives it from the deployment (deployment_id: the engine, its release,
                      the policy inputs it read and the rendezvous address), so every node of one
                      multi-node deployment derives the same id; its subprocesses inherit it.
  NSA_POLICY_DECISION_VIEW  set by the plugin, not by the user: the deciding process's agreement view
                      and inputs, for the rank processes it starts (check_rank).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar

from nsa_policy.base.errors import InputError
from nsa_policy.base.gc_pause import paused

if TYPE_CHECKING:  # pragma: no cover - the models load only when a mode is on (start-up cost)
    from nsa_policy.core.decision import Decision

MODE_VAR = "NSA_POLICY"
BUNDLE_VAR = "NSA_POLICY_BUNDLE"
DEVICE_VAR = "NSA_POLICY_DEVICE"
LOG_VAR = "NSA_POLICY_LOG"
DECISION_ID_VAR = "NSA_POLICY_DECISION_ID"
# process 0's agreement view, for subprocesses that decide again on their own GPU
VIEW_VAR = "NSA_POLICY_DECISION_VIEW"

Mode = Literal["off", "audit", "fill", "enforce"]
MODES: tuple[Mode, ...] = ("off", "audit", "fill", "enforce")
OFF_SPELLINGS = ("", "off", "0", "false", "no", "none")

T = TypeVar("T")


class PluginRefused(RuntimeError):
    """enforce: the engine must not start. The message is the policy's one-line explanation."""

    def __init__(self, line: str, decision: Optional[Decision] = None):
        super().__init__(line)
        self.decision = decision


_RELEASES: dict[str, Optional[str]] = {}


def engine_release(dist: str) -> Optional[str]:
    """The installed release of the running engine `dist` (sglang, vllm), read once per process.

    The dist-info beside the package the process imported is read first: it is the release that runs
    (an earlier sys.path entry may hold another), and a directory listing costs a fraction of
    importlib.metadata.version, which parses every distribution on sys.path (about 1 ms per call in
    an engine's environment, and the plugin asks several times)."""
    if dist not in _RELEASES:
        _RELEASES[dist] = _installed_release(dist)
    return _RELEASES[dist]


def _installed_release(dist: str) -> Optional[str]:
    import sys

    module = sys.modules.get(dist)
    for folder in getattr(module, "__path__", None) or ():
        parent = os.path.dirname(os.path.abspath(folder))
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        prefix = dist + "-"
        found = [n[len(prefix):-len(".dist-info")] for n in names
                 if n.startswith(prefix) and n.endswith(".dist-info")]
        if len(found) == 1:
            return found[0]
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def mode(env: Optional[Mapping[str, str]] = None) -> Mode:
    """The mode NSA_POLICY asks for. A value that is not a mode raises InputError naming it."""
    env = os.environ if env is None else env
    raw = str(env.get(MODE_VAR, "")).strip().lower()
    if raw in OFF_SPELLINGS:
        return "off"
    if raw in MODES:
        return raw
    raise InputError(MODE_VAR, env.get(MODE_VAR), valid=list(MODES))


def mode_or_off(logger: Any) -> Mode:
    """mode(), or "off" when NSA_POLICY is not a mode: logged, and the engine starts as without the plugin."""
    try:
        return mode()
    except Exception as exc:  # noqa: BLE001 - a bad NSA_POLICY never stops the engine
        logger.error("nsa-policy plugin disabled: %s", exc)
        return "off"


def bundle(env: Optional[Mapping[str, str]] = None, default: str = "default") -> str:
    env = os.environ if env is None else env
    return str(env.get(BUNDLE_VAR, "")).strip() or default


def device(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return str(env.get(DEVICE_VAR, "")).strip() or "auto"


def decision_id(env: Optional[Mapping[str, str]] = None, *, create: bool = True,
                seed: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The start-up's decision id: the user's or the inherited one, else derived here from `seed`
    (deployment_id) and exported, so that subprocesses share it."""
    target = os.environ if env is None else env
    found = str(target.get(DECISION_ID_VAR, "")).strip()
    if found or not create:
        return found or None
    new = deployment_id(seed or {})
    if isinstance(target, dict) or target is os.environ:
        target[DECISION_ID_VAR] = new
    return new


# per-node arguments: equal deployments differ in these from node to node
PER_NODE = frozenset({"node_rank", "host", "port", "random_seed", "data_parallel_rank", "data_parallel_start_rank",
                      "data_parallel_rank_local", "headless"})


def deployment_id(seed: Mapping[str, Any]) -> str:
    """A decision id every node of one deployment derives alike, with no message between them: a hash of
    the engine, its release, the policy inputs read (normalised: sorted, JSON) and the rendezvous
    address (sglang --dist-init-addr/--nnodes, vLLM --master-addr/--data-parallel-address, MASTER_ADDR).
    Per-node arguments (PER_NODE) are left out. The same arguments on a restart give the same id:
    set NSA_POLICY_DECISION_ID (e.g. job name and attempt) to tell restarts apart."""
    def norm(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): norm(x) for k, x in v.items() if str(k) not in PER_NODE}
        if isinstance(v, (list, tuple)):
            return [norm(x) for x in v]
        return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)

    text = json.dumps(norm(seed), sort_keys=True, separators=(",", ":"))
    return "dep-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def rank_context(env: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """What the environment says about this process's place in the deployment (absent keys omitted)."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "CUDA_VISIBLE_DEVICES"):
        if str(env.get(key, "")).strip():
            out[key.lower()] = env[key]
    return out


def one_line(decision: Decision, flag: Optional[Callable[[str], str]] = None) -> str:
    """The policy's explanation on one line: the first error, its flags (`flag`: field → the engine's
    spelling of it) and what would be valid."""
    flag = flag or (lambda f: "--" + f.replace("_", "-"))
    if not decision.errors:
        return f"nsa-policy {decision.policy}: no error"
    err = decision.errors[0]
    text = f"nsa-policy refused to start ({decision.policy} {decision.policy_digest}, {decision.device} " \
           f"{decision.device_class}): {err.code}: {' '.join(err.message.split())}"
    if err.fields:
        text += " [at fault: " + ", ".join(flag(f) for f in err.fields) + "]"
    if err.alternatives:
        text += " [valid here: " + ", ".join(err.alternatives) + "]"
    if len(decision.errors) > 1:
        text += f" (+{len(decision.errors) - 1} more: " + ", ".join(e.code for e in decision.errors[1:]) + ")"
    return text


def guarded(logger: logging.Logger, current: Mode, what: str, fn: Callable[[], T]) -> Optional[T]:
    """Run fn. In audit/fill an error inside the plugin is logged and the engine goes on as without it
    (None is returned). In enforce a refusal, and any failure to decide, stops the start-up.
    The collector is paused over fn (base/gc_pause.py): a pass over the engine's heap is not the plugin's."""
    try:
        with paused():
            return fn()
    except PluginRefused:
        if current == "enforce":
            raise
        logger.exception("nsa-policy plugin (%s): unexpected refusal outside enforce; the engine continues unchanged", what)
        return None
    except Exception as exc:  # never crash the engine outside enforce
        if current == "enforce":
            raise PluginRefused(f"nsa-policy (enforce) could not decide, refusing to start: {what}: "
                                f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
        logger.error("nsa-policy plugin (%s) failed; the engine continues as without it: %s: %s",
                     what, type(exc).__name__, " ".join(str(exc).split()))
        return None


def log_decision(decision: Decision, *, engine: str, current: Mode, context: Mapping[str, Any],
                 env: Optional[Mapping[str, str]] = None, logger: Optional[logging.Logger] = None) -> None:
    """Append this process's decision to NSA_POLICY_LOG (when set), with the decision id and rank."""
    from nsa_policy.integration.decision_log import append_decision

    env = os.environ if env is None else env
    path = str(env.get(LOG_VAR, "")).strip()
    if not path:
        return
    full = {"engine": engine, "mode": current, "decision_id": decision_id(env, create=False), **rank_context(env),
            **dict(context)}
    try:
        append_decision(path, decision, origin=f"plugin.{engine}", context=full, include_trace=False)
    except Exception as exc:  # the log is evidence, not a reason to stop the engine
        (logger or logging.getLogger(__name__)).error(
            "nsa-policy plugin: decision not logged to %s=%s: %s", LOG_VAR, path, exc)


def export_view(decision: Decision, env: Optional[Mapping[str, str]] = None, *,
                inputs: Optional[Mapping[str, Any]] = None) -> None:
    """Leave this decision's agreement view, and the inputs it was made from (`inputs`: what the
    engine's check_rank needs to decide again), for the rank processes this process starts."""
    from nsa_policy.integration.distributed import rank_decision

    target = os.environ if env is None else env
    if isinstance(target, dict) or target is os.environ:
        target[VIEW_VAR] = json.dumps({"pid": os.getpid(), "view": rank_decision(decision, PARENT_RANK).model_dump(mode="json"),
                                       "inputs": dict(inputs or {})}, sort_keys=True, default=str)


PARENT_RANK = -1  # the deciding process in the agreement message ("the starting process"), not a rank
PARENT_NAMES = {PARENT_RANK: "the starting process"}


def parent_view(env: Optional[Mapping[str, str]] = None) -> Optional[dict[str, Any]]:
    """What the deciding process exported ({pid, view, inputs}), or None where it exported nothing."""
    env = os.environ if env is None else env
    raw = str(env.get(VIEW_VAR, "")).strip()
    if not raw:
        return None
    found = json.loads(raw)
    return found if isinstance(found, dict) and "view" in found else None


def compare_with_parent(decision: Decision, rank: int, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """None when this rank's decision agrees with the one the starting process exported, else the
    agreement check's message (integration.distributed.disagreement_message)."""
    from nsa_policy.integration.distributed import RankDecision, disagreement_message, rank_decision

    found = parent_view(env)
    if found is None:
        return None
    parent = RankDecision.model_validate(found["view"])
    mine = rank_decision(decision, rank)
    if mine.digest == parent.digest:
        return None
    return disagreement_message([parent, mine], names=PARENT_NAMES)


def rank_device(cuda_index: Optional[int], env: Optional[Mapping[str, str]] = None) -> str:
    """The device a rank process decides on: its own CUDA device through NVML (auto:N), or the
    NSA_POLICY_DEVICE the user named for every rank."""
    chosen = device(env)
    if chosen == "auto" and cuda_index is not None:
        return f"auto:{int(cuda_index)}"
    return chosen


def check_rank(*, engine: str, rank: int, cuda_index: Optional[int], current: Mode,
               decide_on: Callable[[Mapping[str, Any], str], Any], logger: logging.Logger,
               context: Optional[Mapping[str, Any]] = None, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """In a process the engine started for one rank (sglang's scheduler, vLLM's worker): decide again
    from the starting process's inputs on this rank's own GPU, log that decision (shared decision id,
    this rank), and compare it with the starting process's. Returns the disagreement message (logged
    as an error) or None; in enforce a disagreement raises PluginRefused with it. Nothing is done where
    the starting process exported no decision (plugin off there, or it could not decide).

    decide_on(inputs, device) -> Decision is the engine plugin's own decide() on the exported inputs."""
    env = os.environ if env is None else env
    found = parent_view(env)
    if found is None:
        return None
    timer = Timer()
    with paused():
        chosen = rank_device(cuda_index, env)
        decision = decide_on(found.get("inputs") or {}, chosen)
        message = compare_with_parent(decision, rank, env)
    timer.stop()
    from nsa_policy.integration.fleet import agreement_digest

    log_decision(decision, engine=engine, current=current, env=env, logger=logger, context={
        "status": "rank_check", "rank": rank, "cuda_index": cuda_index, "device_asked": chosen,
        "agreement": "disagrees" if message else "agrees", "digest": agreement_digest(decision),
        "parent_digest": found["view"].get("digest"), "parent_pid": found.get("pid"), "plugin_ms": timer.ms(),
        **dict(context or {})})
    if message is None:
        logger.info("nsa-policy %s rank %s (%s %s): agrees with the starting process (digest %s) [decision_id %s]",
                    current, rank, decision.device, decision.device_class, agreement_digest(decision),
                    decision_id(env, create=False))
        return None
    if current == "enforce":
        raise PluginRefused(message, decision)
    logger.error("%s\n  (NSA_POLICY=%s: reported, this rank starts; enforce refuses) [decision_id %s]",
                 message, current, decision_id(env, create=False))
    return message


def differences(decided: Mapping[str, Any], engine: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """field → {policy, engine} where the engine's resolved value is not the decision's. An engine value
    of None is not a difference: the engine decides that field later (vLLM's selector, in the worker)."""
    from nsa_policy.catalog.store import KV_DTYPE_ALIASES as same

    out: dict[str, dict[str, Any]] = {}
    for key, value in decided.items():
        theirs = engine.get(key)
        if value is None or theirs is None:
            continue
        if str(same.get(str(theirs), theirs)) != str(same.get(str(value), value)):
            out[key] = {"policy": value, "engine": theirs}
    return out


class Timer:
    """Milliseconds the plugin spent, kept in the decision-log context (the 50 ms budget, measured)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.end: Optional[float] = None

    def stop(self) -> None:
        """The plugin's own work is done (the engine's step that follows is not the plugin's cost)."""
        if self.end is None:
            self.end = time.perf_counter()

    def ms(self) -> float:
        return round(((self.end or time.perf_counter()) - self.start) * 1000, 3)
