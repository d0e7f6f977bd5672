"""nsa-policy: decide, explain and check how a serving engine runs DeepSeek Sparse Attention."""
from __future__ import annotations

__version__ = "0.1.0"

from nsa_policy.api import build_facts, decide, resolve
from nsa_policy.base.errors import DeviceDiscoveryError, InputError, NsaPolicyError, PolicyError, RuleFileError
from nsa_policy.core.decision import Decision, Finding, Provenance, TraceEntry
from nsa_policy.core.facts import DeviceFacts, Environment, Facts, ModelFacts, ServingConfig

__all__ = [
    "resolve", "decide", "build_facts", "Decision", "Finding", "Provenance", "TraceEntry", "PolicyError",
    "InputError", "NsaPolicyError", "RuleFileError", "DeviceDiscoveryError", "DeviceFacts", "ModelFacts",
    "ServingConfig", "Environment", "Facts", "__version__",
]
