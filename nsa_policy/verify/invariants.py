"""The invariants a recommendation bundle's decisions must hold: each engine's own (its package's
`invariants` module), written independently of the rules, plus the one decided over the space."""
from __future__ import annotations

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Facts

Violation = tuple[str, str, str]  # (invariant, detail key, message)

# decided over the space, in exhaustive.py (it needs an input's neighbours)
SPACE_INVARIANTS = {
    "rejection-lists-alternative": "every rejection lists at least one valid alternative when one exists",
}


def invariant_titles() -> dict[str, str]:
    """name → what it says, for every registered engine's invariants."""
    from nsa_policy import engines

    out = dict(SPACE_INVARIANTS)
    for engine in engines.every():
        out.update(engine.invariant_titles())
    return out


def check_invariants(decision: Decision, facts: Facts, catalog: Catalog) -> list[Violation]:
    """The decision's engine's invariants for one decision of a DSA model."""
    from nsa_policy import engines

    return list(engines.get(decision.engine).invariants(decision, facts, catalog))
