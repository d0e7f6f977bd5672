"""nsa-policy: decide, explain and check how a serving engine runs DeepSeek Sparse Attention."""
from __future__ import annotations

__version__ = "0.1.0"

from nsa_policy.api import build_facts, decide, resolve
from nsa_policy.engine.decision import Decision, Finding, Provenance, TraceEntry
from nsa_policy.engine.facts import DeviceFacts, Environment, Facts, ModelFacts, ServingConfig
from nsa_policy.errors import DeviceDiscoveryError, InputError, NsaPolicyError, PolicyError, RuleFileError

__all__ = [
    "resolve", "decide", "build_facts", "Decision", "Finding", "Provenance", "TraceEntry", "PolicyError",
    "InputError", "NsaPolicyError", "RuleFileError", "DeviceDiscoveryError", "DeviceFacts", "ModelFacts",
    "ServingConfig", "Environment", "Facts", "__version__",
]
