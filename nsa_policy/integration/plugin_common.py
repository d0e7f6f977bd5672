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
  NSA_POLICY_DECISION_ID  the id shared by the processes of one start-up; the first process that
                      decides sets it (uuid4) and its subprocesses inherit it; set it yourself to
                      share one id across nodes.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar

from nsa_policy.base.errors import InputError

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


def mode(env: Optional[Mapping[str, str]] = None) -> Mode:
    """The mode NSA_POLICY asks for. A value that is not a mode raises InputError naming it."""
    env = os.environ if env is None else env
    raw = str(env.get(MODE_VAR, "")).strip().lower()
    if raw in OFF_SPELLINGS:
        return "off"
    if raw in MODES:
        return raw
    raise InputError(MODE_VAR, env.get(MODE_VAR), valid=list(MODES))


def bundle(env: Optional[Mapping[str, str]] = None, default: str = "default") -> str:
    env = os.environ if env is None else env
    return str(env.get(BUNDLE_VAR, "")).strip() or default


def device(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return str(env.get(DEVICE_VAR, "")).strip() or "auto"


def decision_id(env: Optional[Mapping[str, str]] = None, *, create: bool = True) -> Optional[str]:
    """The start-up's decision id: inherited, or created here (and exported so that subprocesses share it)."""
    target = os.environ if env is None else env
    found = str(target.get(DECISION_ID_VAR, "")).strip()
    if found or not create:
        return found or None
    new = uuid.uuid4().hex
    if isinstance(target, dict) or target is os.environ:
        target[DECISION_ID_VAR] = new
    return new


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
    (None is returned). In enforce a refusal, and any failure to decide, stops the start-up."""
    try:
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


def export_view(decision: Decision, env: Optional[Mapping[str, str]] = None) -> None:
    """Leave this decision's agreement view for the subprocesses this process starts."""
    from nsa_policy.integration.distributed import rank_decision

    target = os.environ if env is None else env
    if isinstance(target, dict) or target is os.environ:
        target[VIEW_VAR] = rank_decision(decision, 0).model_dump_json()


def compare_with_parent(decision: Decision, rank: int, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """None when this rank's decision agrees with the one the starting process exported, else the
    agreement check's message (integration.distributed.disagreement_message)."""
    from nsa_policy.integration.distributed import RankDecision, disagreement_message, rank_decision

    env = os.environ if env is None else env
    raw = str(env.get(VIEW_VAR, "")).strip()
    if not raw:
        return None
    parent = RankDecision.model_validate_json(raw)
    mine = rank_decision(decision, rank)
    if mine.digest == parent.digest:
        return None
    return disagreement_message([parent, mine])


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
