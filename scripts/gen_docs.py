#!/usr/bin/env python3
"""Regenerate the generated docs: the support matrix (docs/matrix.md, .png, .svg) and the migration
report (docs/migration-from-sglang.md = `nsa-policy diff sglang-0.5.10 default`).

Run from anywhere: python scripts/gen_docs.py [--only matrix|migration]. tests/check/test_docs_fresh.py
fails when the committed files are stale.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIGRATION_TITLE = "Migrating from sglang 0.5.10 to the `default` policy"
MIGRATION_INTRO = """\
What changes for an operator who replaces sglang 0.5.10's own DSA defaulting (reproduced, bugs
included, by the `sglang-0.5.10` bundle) with nsa-policy's `default` policy. Read the classes as
"in 0.5.10 → with `default`". Regenerate with `python scripts/gen_docs.py`.
"""


def migration_markdown() -> str:
    from nsa_policy.engine.bundle import get_bundle
    from nsa_policy.verify.diff import diff_space, render_markdown

    report = diff_space(get_bundle("sglang-0.5.10"), get_bundle("default"))
    body = render_markdown(report, title=MIGRATION_TITLE)
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{MIGRATION_INTRO}\n{rest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("matrix", "migration"))
    args = parser.parse_args()
    docs = REPO / "docs"
    if args.only in (None, "matrix"):
        from nsa_policy.verify.matrix import write_all

        for path in write_all(docs).values():
            print(f"wrote {path.relative_to(REPO)}")
    if args.only in (None, "migration"):
        path = docs / "migration-from-sglang.md"
        path.write_text(migration_markdown(), encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
