"""Every rank of a deployment must run the same DSA decision; check it over torch.distributed.

Ranks that disagree (a node pool mixing H200 and B200, one host with another nsa-policy rule set)
do not fail at start-up: they deadlock or corrupt a collective much later. `ensure_agreement`
gathers each rank's agreement view (see `nsa_policy.fleet`) over the EXISTING process group and
raises on every rank, with the same message, when they differ.

torch is imported inside the function only: the policy path never imports it.

With NCCL the object collectives stage their bytes on `torch.cuda.current_device()`, so the caller
must have called `torch.cuda.set_device(local_rank)` before (as every NCCL program must); otherwise
all ranks of a node use GPU 0 and the gather hangs or fails. gloo needs nothing.
"""

import socket
from typing import Any, Mapping, Optional

from pydantic import Field

from nsa_policy.base.errors import NsaPolicyError
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Frozen
from nsa_policy.integration.fleet import agreement_view, describe_split, split_fields, view_digest


class AgreementError(NsaPolicyError):
    """ensure_agreement could not run (no process group, torch.distributed unavailable)."""


class DisagreementError(NsaPolicyError):
    """Ranks resolved different DSA decisions. The same message is raised on every rank."""

    def __init__(self, message: str, *, fields: tuple[str, ...], groups: tuple[tuple[int, ...], ...],
                 devices: dict[int, str]):
        super().__init__(message)
        self.fields = fields
        self.groups = groups
        self.devices = devices


class RankDecision(Frozen):
    """What one rank contributes to the gather (small, picklable, no torch types)."""

    rank: int
    host: str
    device: str
    device_class: str
    product_name: Optional[str] = None
    policy: str
    policy_digest: str
    digest: str
    view: dict[str, Any]

    @property
    def label(self) -> str:
        product = f", {self.product_name}" if self.product_name and self.product_name != self.device else ""
        return f"{self.device} {self.device_class}{product} on {self.host}"


class Agreement(Frozen):
    """Returned when every rank agrees."""

    digest: str = Field(description="the agreement digest every rank holds")
    world_size: int
    devices: dict[int, str] = Field(description="rank → device name, as each rank resolved it")


def rank_decision(decision: Decision, rank: int, host: Optional[str] = None) -> RankDecision:
    view = agreement_view(decision)
    facts = decision.inputs
    product = facts.device.product_name if facts is not None else None
    return RankDecision(rank=rank, host=host or socket.gethostname(), device=decision.device,
                        device_class=decision.device_class, product_name=product,
                        policy=decision.policy, policy_digest=decision.policy_digest, digest=view_digest(view),
                        view=view)


def _ranks(ranks: list[int], names: Optional[Mapping[int, str]] = None) -> str:
    named = [names[r] for r in ranks if names and r in names]
    plain = [r for r in ranks if not (names and r in names)]
    text = (("rank " if len(plain) == 1 else "ranks ") + ", ".join(map(str, plain))) if plain else ""
    return ", ".join([*named, text] if text else named)


def disagreement_message(records: list[RankDecision], names: Optional[Mapping[int, str]] = None) -> str:
    """The one message every rank raises: the decisions, their ranks and devices, the fields that split them.
    names: a label for a record that is not a rank (the plugins' starting process)."""
    records = sorted(records, key=lambda r: r.rank)
    groups: dict[str, list[RankDecision]] = {}
    for r in records:
        groups.setdefault(r.digest, []).append(r)
    who = "processes" if names and any(r.rank in names for r in records) else "ranks"
    lines = [f"nsa-policy: the {len(records)} {who} disagree on the DSA decision "
             f"({len(groups)} distinct decisions); refusing to serve with mismatched attention settings"]
    for n, (digest, members) in enumerate(groups.items(), start=1):
        devices = sorted({m.label for m in members})
        lines.append(f"  decision {n} (digest {digest}) on {_ranks([m.rank for m in members], names)}: {'; '.join(devices)}")
    fields = split_fields([r.view for r in records])
    lines.append("  fields that differ:")
    split = [(_ranks([r.rank for r in g], names), g[0].view) for g in groups.values()]
    lines.extend("    " + line for line in describe_split(split, fields))
    policies = {(r.policy, r.policy_digest) for r in records}
    if len(policies) > 1:
        lines.append("  policies differ too: " + "; ".join(
            f"{name} ({digest}) on {_ranks([r.rank for r in records if (r.policy, r.policy_digest) == (name, digest)], names)}"
            for name, digest in sorted(policies)))
    devices_seen = list(dict.fromkeys(r.device for r in records))  # rank order, each once
    lines.append(f"  check offline with: nsa-policy resolve --device {','.join(devices_seen)} …; "
                 "serve one device class per deployment, or set the differing fields explicitly to values valid on every device")
    return "\n".join(lines)


def ensure_agreement(decision: Any, group: Any = None) -> Agreement:
    """Gather every rank's decision over torch.distributed and raise DisagreementError if they differ.

    decision: a Decision, or anything with a `.decision` (what `startup.apply` returns).
    group: a torch.distributed process group; None = the default (WORLD) group. The group must exist
    (`init_process_group` was called); with NCCL call `torch.cuda.set_device(local_rank)` first.
    Collective: every rank of the group must call it. Returns an Agreement when all agree.
    """
    decision = getattr(decision, "decision", decision)
    if not isinstance(decision, Decision):
        raise AgreementError(f"ensure_agreement needs a Decision (or startup.apply's result), got {type(decision).__name__}")
    try:
        import torch.distributed as dist  # noqa: PLC0415 - deliberate: only here, never on the policy path
    except ImportError as exc:
        raise AgreementError(f"ensure_agreement needs torch ({exc}); a single-process server has nothing to agree on") from None
    if not dist.is_available():
        raise AgreementError("this torch build has no torch.distributed support")
    if not dist.is_initialized():
        raise AgreementError("no torch.distributed process group: call torch.distributed.init_process_group(...) "
                             "before ensure_agreement (with NCCL, also torch.cuda.set_device(local_rank))")
    world = dist.get_world_size(group)
    mine = rank_decision(decision, dist.get_rank())
    gathered: list[Any] = [None] * world
    # Pickled plain dicts, not pydantic objects: peers may run another pydantic build.
    try:
        dist.all_gather_object(gathered, mine.model_dump(mode="json"), group=group)
    except RuntimeError as exc:  # torch's object collectives need NumPy ("Numpy is not available"), a live group
        raise AgreementError(f"torch.distributed could not gather the ranks' decisions ({exc}); its object "
                             "collectives need NumPy installed (pip install numpy) and every rank of the group "
                             "calling ensure_agreement") from None
    records = [RankDecision.model_validate(g) for g in gathered]
    digests = {r.digest for r in records}
    devices = {r.rank: r.device for r in records}
    if len(digests) == 1:
        return Agreement(digest=mine.digest, world_size=world, devices=devices)
    by_digest: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: r.rank):
        by_digest.setdefault(r.digest, []).append(r.rank)
    raise DisagreementError(disagreement_message(records), fields=split_fields([r.view for r in records]),
                            groups=tuple(tuple(v) for v in by_digest.values()), devices=devices)

