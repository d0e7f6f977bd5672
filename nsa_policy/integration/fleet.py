"""Does one DSA decision serve every device of a fleet? Offline, and the comparison ranks share.

Two decisions "agree" when everything a serving rank must share with its peers is equal: the
outputs (kv dtype, backends, page size, threshold, layout, planner constants, heads per rank), the
model, and whether the policy applied or rejected. Where the decision came from (provenance,
trace, the device's name, the policy's digest, the time) is left out: an H100 and an H200 that
run the same kernels agree. `nsa_policy.distributed` gathers the same view over torch.distributed.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Optional, Sequence

from pydantic import Field

from nsa_policy.base.errors import InputError
from nsa_policy.core.decision import AGREED_FIELDS, Decision, of_engine
from nsa_policy.core.facts import Frozen

# What every rank of one deployment must share, in the order differences are reported: the Decision
# fields tagged `agreed` (nsa_policy.core.decision), errors as their codes.
AGREEMENT_FIELDS = AGREED_FIELDS


def agreement_view(decision: Decision) -> dict[str, Any]:
    """The part of a decision peers must share, as plain JSON values."""
    # another engine's fields are not this decision's: an sglang view (and digest) has no vLLM-only keys
    fields = of_engine(AGREEMENT_FIELDS, decision.engine)
    dumped = decision.model_dump(mode="json", include=set(fields) - {"error_codes"})
    dumped["error_codes"] = sorted({e.code for e in decision.errors})
    return {name: dumped[name] for name in fields}


def agreement_digest(decision: Decision) -> str:
    """sha256 of the agreement view, first 16 hex digits: equal digests = one decision serves both."""
    return view_digest(agreement_view(decision))


def view_digest(view: Mapping[str, Any]) -> str:
    text = json.dumps(view, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_fields(views: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The agreement fields whose values are not all equal, in AGREEMENT_FIELDS order."""
    return tuple(f for f in AGREEMENT_FIELDS
                 if len({json.dumps(v.get(f), sort_keys=True) for v in views}) > 1)


def describe_split(members: Sequence[tuple[str, Mapping[str, Any]]], fields: Iterable[str]) -> list[str]:
    """One line per differing field: each distinct value and the members (labels) holding it."""
    lines = []
    for field in fields:
        by_value: dict[str, list[str]] = {}
        for label, view in members:
            by_value.setdefault(json.dumps(view.get(field), sort_keys=True), []).append(label)
        parts = [f"{value} on {', '.join(labels)}" for value, labels in by_value.items()]
        lines.append(f"{field}: " + "; ".join(parts))
    return lines


class FleetReport(Frozen):
    """One configuration resolved on several devices."""

    devices: tuple[str, ...]
    decisions: dict[str, Decision]
    digests: dict[str, str] = Field(description="device → agreement digest")
    agrees: bool = Field(description="one decision serves every listed device, and none rejects")
    split_fields: tuple[str, ...] = Field(description="the fields whose values differ between devices")
    rejected: tuple[str, ...] = Field(default=(), description="devices whose decision the policy rejected")
    groups: tuple[tuple[str, ...], ...] = Field(default=(), description="devices that share one decision")

    def summary_lines(self) -> list[str]:
        views = [(d, agreement_view(self.decisions[d])) for d in self.devices]
        if self.agrees:
            return [f"one decision serves all {len(self.devices)} devices ({', '.join(self.devices)}); "
                    f"agreement digest {self.digests[self.devices[0]]}"]
        lines = []
        if self.split_fields:
            lines.append(f"no single decision serves {', '.join(self.devices)}: "
                         f"{len(self.groups)} distinct decisions, split by {', '.join(self.split_fields)}")
            lines.extend("  " + line for line in describe_split(views, self.split_fields))
        if self.rejected:
            lines.append(f"rejected on: {', '.join(self.rejected)}")
        return lines


def parse_device_list(text: str) -> tuple[str, ...]:
    """'h200,b200' → ('h200', 'b200'); empty items and repeats are errors, not silently dropped."""
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise InputError("--device", text, hint="an empty name in the comma-separated device list")
    seen = set()
    for item in items:
        if item.lower() in seen:
            raise InputError("--device", text, hint=f"{item!r} is listed twice")
        seen.add(item.lower())
    return tuple(items)


def resolve_fleet(config: Any, devices: Sequence[Any], *, model: Any = None, policy: str = "default",
                  env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
                  trace: bool = True) -> FleetReport:
    """Resolve one configuration on every device; never raises on rejection (see `.rejected`)."""
    from nsa_policy.api import build_facts, decide

    if not devices:
        raise InputError("devices", devices, hint="list at least one device")
    decisions: dict[str, Decision] = {}
    for device in devices:
        facts = build_facts(config, device=device, model=model, env=env, packages=packages)
        label = device if isinstance(device, str) else facts.device.name
        decisions[label] = decide(facts, policy, trace=trace)
    labels = tuple(decisions)
    views = [agreement_view(decisions[d]) for d in labels]
    digests = {d: view_digest(v) for d, v in zip(labels, views)}
    groups: dict[str, list[str]] = {}
    for d in labels:
        groups.setdefault(digests[d], []).append(d)
    rejected = tuple(d for d in labels if decisions[d].errors)
    split = split_fields(views)
    return FleetReport(devices=labels, decisions=decisions, digests=digests, agrees=not split and not rejected,
                       split_fields=split, rejected=rejected, groups=tuple(tuple(g) for g in groups.values()))
