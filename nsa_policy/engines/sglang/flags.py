"""Which sglang server arguments exist: the argument registry, ServingConfig's fields, and a curated list.

Every argument the policy reads or writes, with its spellings across releases, comes from the one
registry (rules/catalog/sglang/args.yaml, nsa_policy.engines.sglang.args); the curated list of the other
sglang flags is data (rules/catalog/sglang/flags.yaml). An unknown argument is reported only when it
is a typo's reach from a known one; sglang has far more flags than any list here.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import yaml

from nsa_policy.base.paths import catalog_dir, rules_dir
from nsa_policy.core.facts import ServingConfig
from nsa_policy.engines.sglang.args import ArgRegistry, load_args
from nsa_policy.engines.sglang.config import FIELD_ALIASES

_DSA_FIELDS = frozenset({"kv_cache_dtype", "prefill_backend", "decode_backend", "enable_hisparse",
                         "dense_attn_kv_len_threshold"})


@dataclass(frozen=True)
class FlagInfo:
    name: str  # as looked up: kv-cache-dtype
    canonical: str  # the argument it sets: tp → tp-size, dsa-prefill-backend → nsa-prefill-backend
    field: Optional[str]  # the ServingConfig field, when the argument bears on DSA
    takes_value: bool


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def field_kind(field: str) -> str:
    """bool | int | str, from the ServingConfig annotation."""
    ann = ServingConfig.model_fields[field].annotation
    args = typing.get_args(ann) or (ann,)
    for kind in (bool, int):
        if kind in args:
            return kind.__name__
    return "str"


class FlagRegistry:
    def __init__(self, data: dict[str, Any], args: Optional[ArgRegistry] = None):
        args = args or load_args()
        self.args = args  # the argument registry: per-release status, choices, variables
        # NSA was renamed DSA in the first release where the --nsa-* backend flags became deprecated aliases.
        self.dsa_spelling_since: str = next(sp.deprecated for sp in args.argument("dsa_prefill_backend").spellings
                                            if sp.flag == "--nsa-prefill-backend" and sp.deprecated)
        self.deprecated: dict[str, str] = _renamed(args, self.dsa_spelling_since)
        store_true = set(data.get("store_true") or [])
        valued = set(data.get("valued") or [])
        aliases: dict[str, str] = dict(data.get("aliases") or {})
        known: dict[str, FlagInfo] = {}
        for name in sorted(store_true | valued):
            known[name] = FlagInfo(name, name, None, name not in store_true)
        for field in ServingConfig.model_fields:
            name = _kebab(field)
            known[name] = FlagInfo(name, name, field, field_kind(field) != "bool")
        for alias, field in FIELD_ALIASES.items():
            name = _kebab(alias)
            known[name] = FlagInfo(name, _kebab(field), field, field_kind(field) != "bool")
        for arg in args.arguments.values():
            canonical = _kebab(arg.field) if arg.field else args.cli_flags(arg.name)[0][2:]
            for sp in arg.spellings:
                name = sp.flag[2:]
                if name not in known:
                    known[name] = FlagInfo(name, canonical, arg.field, arg.type != "bool")
        for alias, target in aliases.items():
            base = known[target]
            known[alias] = FlagInfo(alias, base.canonical, base.field, base.takes_value)
        self.known = known
        self._near: dict[str, Optional[str]] = {}
        self._deletions: Optional[dict[str, set[str]]] = None

    def get(self, name: str) -> Optional[FlagInfo]:
        return self.known.get(_kebab(name.lstrip("-")))

    def near(self, name: str) -> Optional[str]:
        """The known name a typo away (1 edit up to 6 letters, else 2), or None when nothing is that close."""
        name = _kebab(name.lstrip("-"))
        if name not in self._near:  # the same unknown keys recur across files
            self._near[name] = self._nearest(name)
        return self._near[name]

    def _nearest(self, name: str) -> Optional[str]:
        limit = 1 if len(name) <= 6 else 2
        if len(name) > 80:
            return None  # no known name is within two edits of it
        if self._deletions is None:  # every known name with up to two letters deleted → the names
            self._deletions = {}
            for known in self.known:
                for variant in _deletions(known, 2):
                    self._deletions.setdefault(variant, set()).add(known)
        # Two strings within k edits (transpositions included) share a string k deletions from each: the
        # candidates come from an index lookup per deletion of the name, not from a scan of every flag.
        cands = set()
        for variant in _deletions(name, limit):
            cands |= self._deletions.get(variant, set())
        best, best_d = None, limit + 1
        for cand in sorted(cands):
            d = edit_distance(name, cand, best_d + 1)  # exact up to best_d
            if d < best_d:
                best, best_d = cand, d
        return best if best_d <= limit else None

    def is_dsa_key(self, name: str) -> bool:
        """A key only an sglang DSA configuration uses (marks a mapping or a list as server arguments)."""
        info = self.get(name)
        return info is not None and info.field in _DSA_FIELDS


def _renamed(args: ArgRegistry, since: str) -> dict[str, str]:
    """Old NSA spelling → its DSA spelling: flags (without dashes) and environment variables renamed in `since`.

    Only the arguments the policy reads; the per-release status of every spelling (CP flags included)
    is `self.args.status(flag, release)`."""
    out: dict[str, str] = {}
    for arg in args.arguments.values():
        if arg.field is None:
            continue
        new = args.spelling_for(arg.name, since)
        for sp in arg.spellings:
            if sp.deprecated == since and "nsa-" in sp.flag and new:
                out[sp.flag[2:]] = new[2:]
        own = {sp.flag for sp in arg.spellings if sp.nsa_policy_only}
        for flag in own:  # nsa-policy's own threshold flags follow the same rename
            if "--nsa-" in flag and flag.replace("--nsa-", "--dsa-") in own:
                out[flag[2:]] = flag.replace("--nsa-", "--dsa-")[2:]
        read = args.env_var_read(arg.name, since)
        for var in args.env_vars_ignored(arg.name, since):
            if read and "_NSA_" in var:
                out[var] = read
    return out


def _deletions(word: str, k: int) -> set[str]:
    """The word with up to k characters deleted (itself included)."""
    out, frontier = {word}, {word}
    for _ in range(k):
        frontier = {w[:i] + w[i + 1:] for w in frontier for i in range(len(w))}
        out |= frontier
    return out


def edit_distance(a: str, b: str, cap: int) -> int:
    """Optimal-string-alignment distance (a transposition counts as one edit), stopping early at cap."""
    if a == b:
        return 0
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        row_min = i
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = v
            row_min = min(row_min, v)
        if row_min >= cap:
            return cap
        prev2, prev = prev, cur
    return prev[-1]


@lru_cache(maxsize=1)
def load_flags() -> FlagRegistry:
    with open(catalog_dir() / "sglang" / "flags.yaml", encoding="utf-8") as fh:
        return FlagRegistry(yaml.safe_load(fh))


@lru_cache(maxsize=1)
def known_non_dsa_models() -> dict[str, str]:
    """Model id → architecture, for the non-DSA models lint recognises."""
    with open(rules_dir() / "lint" / "known-models.yaml", encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return {mid: spec["architecture"] for mid, spec in (data.get("models") or {}).items()}
