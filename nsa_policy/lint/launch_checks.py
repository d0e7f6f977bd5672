"""Check one launch: the engine that runs it checks its arguments and asks the policy (its
`lint_launch`); what every engine shares lives here: the options, the codes, the trust model for
hints, the device and model a file names, and the level below which no hint can take a finding."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional

from nsa_policy import engines
from nsa_policy.base.errors import InputError, NsaPolicyError, closest
from nsa_policy.base.versions import parse_version
from nsa_policy.catalog.codes import load_codes
from nsa_policy.catalog.store import Catalog, load_catalog
from nsa_policy.core.bundle import CompiledBundle, get_bundle, list_bundles
from nsa_policy.core.facts import DeviceFacts, ModelFacts
from nsa_policy.engines.sglang.flags import known_non_dsa_models
from nsa_policy.lint.confine import Reader
from nsa_policy.lint.report import Diagnostic, Hint, Launch, Location

# A launch names the machine through its device; the packages installed are the machine's too.
_MACHINE_INPUTS = frozenset({"device", "packages"})
# Stand-ins for an unknown device or model; only findings that read neither are kept from them.
# From the catalog: its first device class that runs DSA, and its first model.


@dataclass(frozen=True)
class Needs:
    device: bool
    model: bool


@lru_cache(maxsize=16)
def rule_needs(policy: str) -> dict[str, Needs]:
    """For each emitting rule of a bundle: does its verdict depend on the device, on the model?
    Read from what the rule declares it depends on (`CompiledRule.inputs`)."""
    return {rule.id: Needs(device=bool(rule.inputs & _MACHINE_INPUTS), model="model" in rule.inputs)
            for rule in get_bundle(policy).rules if rule.emit}


def skipped_codes(policy: str, *, device: bool, model: bool) -> list[str]:
    needs = rule_needs(policy)
    bundle = get_bundle(policy)
    codes = {r.code for r in bundle.rules if r.id in needs and r.code is not None
             and ((device and needs[r.id].device) or (model and needs[r.id].model))}
    return sorted(codes)


@dataclass
class LintOptions:
    device: Optional[str] = None  # --device: overrides what files say
    policy: str = "default"
    # --policy given on the command line: a file's `nsa-policy: policy=` hint cannot replace it.
    policy_explicit: bool = False
    # --sglang-version: the release every launch targets (overrides what files say)
    sglang_version: Optional[str] = None


class Checker:
    def __init__(self, opts: LintOptions, reader: Optional[Reader] = None):
        self.opts = opts
        self.reader = reader if reader is not None else Reader([])
        self.catalog: Catalog = load_catalog()
        self.codes = load_codes()
        self.bundle: CompiledBundle = get_bundle(opts.policy)  # InputError: usage error
        self._models: dict[str, Optional[ModelFacts]] = {}
        self._devices_seen: dict[str, Optional[DeviceFacts]] = {}
        self._shipped: Optional[list[str]] = None
        self.cache: dict[str, Any] = {}  # per engine: what its checks remember across launches
        self.cli_device: Optional[DeviceFacts] = self.catalog.device(opts.device, "--device") if opts.device else None
        if opts.sglang_version is not None:
            parse_version(opts.sglang_version, field="--sglang-version")  # InputError: usage error

    def release_hints(self, launch: Launch, key: str) -> list[Hint]:
        """The hints naming the release of an engine (`key`), strongest first: explicit hints (a comment, an
        annotation) in file order; then what the file itself installs, the last first (a `pip install
        sglang==X` after `FROM …sglang:vY` replaces the image's release); then pins beside the file."""
        hints = [h for h in launch.hints if h.key == key]
        explicit = [h for h in hints if not _installed(h)]
        own = [h for h in hints if _installed(h) and h.loc.path == launch.path]
        beside = [h for h in hints if _installed(h) and h.loc.path != launch.path]
        return explicit + sorted(own, key=lambda h: (h.loc.line, h.loc.col), reverse=True) + beside

    def no_device(self, policy: str, loc: Location, what: str = "launch") -> Diagnostic:
        """NSA405: the device is unknown, so the device-dependent checks of `policy` were skipped (named)."""
        return self.diag("NSA405", f"no device known for this {what}: device-dependent checks ("
                         + ", ".join(skipped_codes(policy, device=True, model=False))
                         + ") were skipped; add --device NAME, a nodeSelector on nvidia.com/gpu.product, "
                           "or a comment 'nsa-policy: device=NAME'", loc)

    def diag(self, code: str, message: str, loc: Location, *, alternatives=(), rule=None, fix=None) -> Diagnostic:
        doc = self.codes.codes[code]
        return Diagnostic(code, doc.level, message, loc, fix if fix is not None else doc.fix, tuple(alternatives), rule)

    # --------------------------------------------------------------------------------------
    def check(self, launch: Launch) -> list[Diagnostic]:
        """The findings for one launch, from the engine that runs it. A launch whose check fails on its
        input (a value no reader converts) is one NSA404 finding there; the run goes on."""
        try:
            out = engines.get(launch.engine).lint_launch(self, launch)
        except (NsaPolicyError, RecursionError, ValueError) as exc:
            return [self.diag("NSA404", f"this launch could not be checked: {exc}", launch.loc)]
        for token, loc in launch.unseen:
            out.append(self.diag("NSA409", f"{token} is not known in this file (set at deploy time, or outside the "
                                           f"linted tree): lint cannot see what this launch runs; the checks of "
                                           f"what it holds were skipped", loc))
        return out

    def floor(self, policy: str, found: list[Diagnostic], default: Callable[[], list[Diagnostic]]) -> list[Diagnostic]:
        """A bundle a file's hint picked can add findings, never lower one: every finding `default` (the
        engine's default bundle, lint's own default) gives at a place stays, at its level, unless the
        hinted bundle gives one at least as high there."""
        if policy == self.opts.policy or self.opts.policy_explicit:
            return found
        rank = {"info": 0, "warning": 1, "error": 2}
        best: dict[Location, int] = {}
        for d in found:
            best[d.loc] = max(best.get(d.loc, -1), rank[d.level])
        kept = list(found)
        for d in default():
            if rank[d.level] > best.get(d.loc, -1):
                kept.append(Diagnostic(d.code, d.level, d.message + f" [kept from {self.opts.policy}: a file's policy "
                                       f"hint ({policy}) cannot lower it]", d.loc, d.fix, d.alternatives, d.rule))
        return kept

    # inputs --------------------------------------------------------------------------------------
    def policy(self, launch: Launch, out: list) -> str:
        # Trust model: the linted files come from a pull request. A hint may only pick another shipped
        # bundle, never a folder (a bundle that extends default and drops its checks), and never one
        # over an explicit --policy.
        policy = self.opts.policy
        if self._shipped is None:  # once per run, not per launch
            self._shipped = list_bundles()
        shipped = self._shipped
        for h in launch.hints:
            if h.key != "policy":
                continue
            if self.opts.policy_explicit:
                if h.value != self.opts.policy:
                    out.append(self.diag("NSA407", f"{h.source}: policy {h.value!r} ignored: --policy "
                                                   f"{self.opts.policy} was given on the command line", h.loc))
                continue
            if h.value not in shipped:
                out.append(self.diag("NSA407", f"{h.source}: policy {h.value!r} is not a shipped bundle; a file may "
                                               f"only name one of: {', '.join(shipped)} (a rule folder needs --policy)",
                                     h.loc, alternatives=tuple(shipped)))
                continue
            policy = h.value
        return policy

    def model(self, launch: Launch, given: Optional[tuple[str, Location, str]], out: list,
              policy: str) -> Optional[ModelFacts]:
        """The model of a launch: the one its arguments name (`given`: value, where, spelling), else a hint;
        NSA408 (naming the checks skipped) when none is in the catalogs."""
        candidates: list[tuple[str, Location, str]] = [given] if given is not None else []
        for h in launch.hints:
            if h.key == "model":
                candidates.append((h.value, h.loc, h.source))
        for value, loc, source in candidates:
            model = self.resolve_model(value)
            if model is not None:
                return model
            if source in ("comment", "annotation"):
                out.append(self.diag("NSA407", f"{source}: model {value!r} is neither in the model catalog nor a "
                                               f"known non-DSA model", loc,
                                     alternatives=tuple(filter(None, [closest(value, self.catalog.model_ids)]))))
        what = f"model {candidates[0][0]!r} is not in the model catalog" if candidates else "no model is given"
        out.append(self.diag("NSA408", f"{what}: model-dependent checks ("
                             + ", ".join(skipped_codes(policy, device=False, model=True))
                             + ") were skipped; add a comment 'nsa-policy: model=ID'",
                             candidates[0][1] if candidates else launch.loc))
        return None

    def resolve_model(self, value: str) -> Optional[ModelFacts]:
        if value not in self._models:  # a failed catalog lookup computes a closest name: remember the answer
            self._models[value] = self._resolve_model(value)
        return self._models[value]

    def _resolve_model(self, value: str) -> Optional[ModelFacts]:
        names = [value]
        base = value.rstrip("/").rsplit("/", 1)[-1]
        if base != value:
            names.append(base)
        for name in names:
            try:
                return self.catalog.model(name)
            except InputError:
                pass
        known = known_non_dsa_models()
        lowered = {k.lower(): k for k in known}
        for name in names:
            key = lowered.get(name.lower()) or next((k for k in known if k.split("/")[-1].lower() == name.lower()), None)
            if key:
                return self.catalog.model_from_config({"architectures": [known[key]]},
                                                      source="rules/lint/known-models.yaml", model_id=key)
        return None

    def devices(self, launch: Launch, out: list) -> list[tuple[DeviceFacts, Optional[Hint]]]:
        if self.cli_device is not None:
            return [(self.cli_device, None)]
        found: list[tuple[DeviceFacts, Optional[Hint]]] = []
        seen = set()
        for h in launch.hints:
            if h.key != "device":
                continue
            dev = self.device_for(h.value)
            if dev is None:
                out.append(self.diag("NSA407", f"{h.source}: device {h.value!r} is not in the device catalog; "
                                               f"device-dependent checks were skipped", h.loc,
                                     alternatives=tuple(filter(None, [closest(h.value, self.catalog.device_choices)]))))
                continue
            if dev.name not in seen:
                seen.add(dev.name)
                found.append((dev, h))
        return found

    def device_for(self, value: str) -> Optional[DeviceFacts]:
        """A catalog name, a capability spec, or a GPU product label (NVIDIA-H100-80GB-HBM3, nvidia-h200-141gb)."""
        if value not in self._devices_seen:
            self._devices_seen[value] = self._device_for(value)
        return self._devices_seen[value]

    def _device_for(self, value: str) -> Optional[DeviceFacts]:
        try:
            return self.catalog.device(value)
        except InputError:
            pass
        name = self.catalog.device_for_product(value.replace("-", " ").replace("_", " "))
        if name is None:
            norm = value.lower().replace(" ", "-").replace("_", "-")
            norm = norm[len("nvidia-"):] if norm.startswith("nvidia-") else norm
            hits = [n for n in self.catalog.device_names if norm == n or norm.startswith(n + "-")]
            name = max(hits, key=len) if hits else None
        return self.catalog.device(name) if name else None



def _installed(h: Hint) -> bool:
    """A release read from what the file installs (image tag, pin), not from an explicit hint."""
    return h.source.startswith(("image tag ", "pin "))
