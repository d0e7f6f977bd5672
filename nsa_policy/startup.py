"""The stable start-up API: the one documented path for a server's start-up code.

    from nsa_policy.startup import apply, ensure_agreement, append_decision
    apply(server_args)                      # sglang: fill what the user left unset, refuse a rejected decision
    apply_vllm(engine_args)                 # vLLM's EngineArgs
    ensure_agreement(decision, group)       # every rank decided the same
    resolve_fleet(config, ["h200", "b200"]) # one configuration over a mixed fleet

Everything here is re-exported from the modules that own it; those paths may move, this one does not.
"""
from __future__ import annotations

from nsa_policy.engines.sglang.startup import Applied, StartupRejected, apply, explain_rejection
from nsa_policy.engines.vllm.startup import apply_vllm
from nsa_policy.integration.decision_log import (
    DecisionLogEntry,
    DecisionLogHandler,
    append_decision,
    iter_decision_log,
    read_decision_log,
)
from nsa_policy.integration.distributed import Agreement, DisagreementError, ensure_agreement
from nsa_policy.integration.fleet import FleetReport, resolve_fleet

__all__ = [
    "apply", "apply_vllm", "Applied", "StartupRejected", "explain_rejection",
    "ensure_agreement", "Agreement", "DisagreementError",
    "resolve_fleet", "FleetReport",
    "append_decision", "read_decision_log", "iter_decision_log", "DecisionLogEntry", "DecisionLogHandler",
]
