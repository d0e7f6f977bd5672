"""nsa-policy: decide, explain and check how a serving engine runs DeepSeek Sparse Attention."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public names load on first use (PEP 562): the engine plugins (engines/*/plugin.py) are imported
# by every sglang/vLLM process that has the package installed, and must not pay for the evaluator,
# the catalogs and the rules unless NSA_POLICY switches them on (docs/plugins.md: start-up cost).
_LAZY = {
    "resolve": "nsa_policy.api", "decide": "nsa_policy.api", "build_facts": "nsa_policy.api",
    "DeviceDiscoveryError": "nsa_policy.base.errors", "InputError": "nsa_policy.base.errors",
    "NsaPolicyError": "nsa_policy.base.errors", "PolicyError": "nsa_policy.base.errors",
    "RuleFileError": "nsa_policy.base.errors",
    "Decision": "nsa_policy.core.decision", "Finding": "nsa_policy.core.decision",
    "Provenance": "nsa_policy.core.decision", "TraceEntry": "nsa_policy.core.decision",
    "DeviceFacts": "nsa_policy.core.facts", "Environment": "nsa_policy.core.facts", "Facts": "nsa_policy.core.facts",
    "ModelFacts": "nsa_policy.core.facts", "ServingConfig": "nsa_policy.core.facts",
}

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.api import build_facts, decide, resolve
    from nsa_policy.base.errors import DeviceDiscoveryError, InputError, NsaPolicyError, PolicyError, RuleFileError
    from nsa_policy.core.decision import Decision, Finding, Provenance, TraceEntry
    from nsa_policy.core.facts import DeviceFacts, Environment, Facts, ModelFacts, ServingConfig


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'nsa_policy' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "resolve", "decide", "build_facts", "Decision", "Finding", "Provenance", "TraceEntry", "PolicyError",
    "InputError", "NsaPolicyError", "RuleFileError", "DeviceDiscoveryError", "DeviceFacts", "ModelFacts",
    "ServingConfig", "Environment", "Facts", "__version__",
]
