#!/usr/bin/env python3
"""Regenerate the generated docs: the support matrix (docs/matrix.md, .png, .svg), the migration
report (docs/migration-from-sglang.md = `nsa-policy diff sglang-0.5.23 default`), the sglang
argument tables (docs/sglang-args.md, and the release → spellings table inside docs/startup.md), and
the vLLM pair: docs/matrix-vllm.md (`nsa-policy matrix --engine vllm`) and docs/migration-from-vllm.md
(`nsa-policy diff vllm-0.33 default --engine vllm`).

Run from anywhere: python scripts/gen_docs.py [--only matrix|migration|args|releases|vllm|codes].
`--only codes` writes one page per finding code under docs/codes/ (tests/docs/test_site.py checks them).
tests/check/test_docs_fresh.py, tests/check/test_vllm_docs_fresh.py and tests/startup/test_args_registry.py
fail when the committed files are stale.

`--only releases` writes the release changelog docs/sglang-releases.md (the same as
`nsa-policy diff --releases --format markdown --out docs/sglang-releases.md`; minutes, so not part of the
default run; tests/check/test_release_changelog.py checks it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MIGRATION_TITLE = "Migrating from sglang 0.5.23 to the `default` policy"
MIGRATION_INTRO = """\
What changes for an operator who replaces the DSA defaulting of sglang 0.5.23, the release users run
(reproduced, bugs included, by the `sglang-0.5.22` bundle: 0.5.23's DSA start-up is byte-identical, but for its rename of tokenspeed_mla, which the enumerated space reads as 0.5.22 does),
with nsa-policy's `default` policy. Read the classes as "in 0.5.23 → with `default`". Regenerate with `python scripts/gen_docs.py`.
"""  # noqa: E501 (the generated text's line breaks are part of the checked docs)


def migration_markdown() -> str:
    from nsa_policy.core.bundle import get_bundle
    from nsa_policy.verify.diff import diff_space, render_markdown

    report = diff_space(get_bundle("sglang-0.5.23"), get_bundle("default"), policy_a="sglang-0.5.23", policy_b="default")
    body = render_markdown(report, title=MIGRATION_TITLE)
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{MIGRATION_INTRO}\n{rest}"


VLLM_MIGRATION_TITLE = "Migrating from vLLM 0.33 to the `default` policy"
VLLM_MIGRATION_INTRO = """\
What changes for a vLLM operator who lets nsa-policy's `default` (in vLLM's vocabulary: the `vllm-default`
bundle) choose the attention backend, KV-cache dtype and block size instead of vLLM 0.33.0's own start-up
(reproduced exactly, accepted crashes included, by the `vllm-0.33` bundle). Read the classes as "in vLLM 0.33 →
with `default`". The same report: `nsa-policy diff vllm-0.33 default --engine vllm --format markdown`.
Regenerate with `python scripts/gen_docs.py --only vllm`.
"""  # noqa: E501 (the generated text's line breaks are part of the checked docs)


def vllm_migration_markdown() -> str:
    from nsa_policy.core.bundle import get_bundle
    from nsa_policy.verify.diff import diff_space, render_markdown

    report = diff_space(get_bundle("vllm-0.33"), get_bundle("vllm-default"), policy_a="vllm-0.33",
                        policy_b="vllm-default")
    body = render_markdown(report, title=VLLM_MIGRATION_TITLE)
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{VLLM_MIGRATION_INTRO}\n{rest}"


def vllm_matrix_markdown() -> str:
    from nsa_policy.engines.vllm.matrix import render_vllm_markdown, vllm_matrix_data

    return render_vllm_markdown(vllm_matrix_data())


ARGS_TABLE_BEGIN = "<!-- generated: sglang release → spellings (python scripts/gen_docs.py --only args) -->"
ARGS_TABLE_END = "<!-- end of generated table -->"


def args_docs(docs: Path) -> dict[Path, str]:
    """docs/sglang-args.md, and docs/startup.md with its release → spellings table replaced, from the registry."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    startup = docs / "startup.md"
    text = startup.read_text(encoding="utf-8")
    head, found, rest = text.partition(ARGS_TABLE_BEGIN)
    if not found:
        raise SystemExit(f"{startup}: no {ARGS_TABLE_BEGIN!r} marker")
    _, found, tail = rest.partition(ARGS_TABLE_END)
    if not found:
        raise SystemExit(f"{startup}: no {ARGS_TABLE_END!r} marker")
    block = f"{ARGS_TABLE_BEGIN}\n{reg.release_table_markdown()}{ARGS_TABLE_END}"
    return {docs / "sglang-args.md": reg.registry_markdown(), startup: head + block + tail}


CODES_DIR = "codes"


def code_pages(docs: Path) -> dict[Path, str]:
    """docs/codes/<CODE>.md for each finding code in rules/codes.yaml, and docs/codes/index.md, the table
    of them all (the site's rule pages, as ruff has for its rules)."""
    from nsa_policy.catalog.codes import load_codes

    reg = load_codes()
    ranges = (("NSA0", "Input"), ("NSA1", "Policy errors"), ("NSA2", "Warnings and notes"),
              ("NSA3", "Engine behaviour the compatibility bundles reproduce"), ("NSA4", "Lint"))
    out: dict[Path, str] = {}
    index = ["# Finding codes", "",
             "Every finding nsa-policy reports has a stable code, documented in `rules/codes.yaml` (generated by",
             "`python scripts/gen_docs.py --only codes`; `nsa-policy rule CODE` prints the same in a terminal).", ""]
    for prefix, title in ranges:
        rows = [(c, d) for c, d in sorted(reg.codes.items()) if c.startswith(prefix)]
        if not rows:
            continue
        index += [f"## {title}", "", "| code | name | level | summary |", "|---|---|---|---|"]
        index += [f"| [{c}]({c}.md) | {d.name} | {d.level} | {d.summary.replace('|', chr(92) + '|')} |" for c, d in rows]
        index.append("")
    out[docs / CODES_DIR / "index.md"] = "\n".join(index)
    for code, d in sorted(reg.codes.items()):
        page = [f"# {code} {d.name}", "", f"**Level:** {d.level}", "", d.summary[:1].upper() + d.summary[1:] + ".", "",
                "## Why", "", d.explanation, "", "## Fix", "", d.fix, ""]
        if d.example:
            page += ["## Example", "", "```text", d.example, "```", ""]
        if d.evidence:
            page += ["## Evidence", ""] + [f"- {e}" for e in d.evidence] + [""]
        page += [f"`nsa-policy rule {code}` prints this page in a terminal. [All codes](index.md).", ""]
        out[docs / CODES_DIR / f"{code}.md"] = "\n".join(page)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("matrix", "migration", "args", "releases", "vllm", "codes"))
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
    if args.only == "releases":
        from nsa_policy.base.safe_io import write_atomic
        from nsa_policy.engines.sglang.changelog import release_changelog, render_markdown

        path = docs / "sglang-releases.md"
        write_atomic(path, render_markdown(release_changelog()), field="--out")
        print(f"wrote {path.relative_to(REPO)}")
    if args.only in (None, "args"):
        for path, text in args_docs(docs).items():
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    if args.only in (None, "codes"):
        pages = code_pages(docs)
        (docs / CODES_DIR).mkdir(exist_ok=True)
        for stale in (docs / CODES_DIR).glob("*.md"):
            if stale not in pages:
                stale.unlink()
        for path, text in pages.items():
            path.write_text(text, encoding="utf-8")
        print(f"wrote {len(pages)} pages under docs/{CODES_DIR}/")
    if args.only in (None, "vllm"):
        for path, text in ((docs / "matrix-vllm.md", vllm_matrix_markdown()),
                           (docs / "migration-from-vllm.md", vllm_migration_markdown())):
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
