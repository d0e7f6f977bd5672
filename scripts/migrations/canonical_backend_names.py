# ruff: noqa
"""Not yet applied (issue 20, item 4): run after the open branches land, then apply
canonical_backend_names.tests.patch (the test and decision-log fixes it needs), regenerate the docs
(python scripts/gen_docs.py) and run the suite. Tried on 789325c: 23 failures before the patch, none after.

Canonical engine-neutral input names: ServingConfig.nsa_{prefill,decode}_backend -> {prefill,decode}_backend.
Run from a repo root. Rewrites: rule files (config.* facts, finding fields), the sglang argument registry's
`field:`, and Python code that names the ServingConfig field. Case-vocabulary keys (`nsa_prefill_backend:` in
case inputs, sglang attribute names in args.yaml `attributes:`) stay: they are aliases."""
import pathlib, re, sys
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
n = 0
def rw(path, fn):
    global n
    t = path.read_text(); o = t; t = fn(t)
    if t != o: path.write_text(t); n += 1
for ph in ("prefill", "decode"):
    pass
def rules_fn(t):
    t = re.sub(r"\bconfig\.nsa_(prefill|decode)_backend\b", r"config.\1_backend", t)
    # finding fields: `fields: [nsa_prefill_backend, ...]`
    def fields(m):
        return re.sub(r"\bnsa_(prefill|decode)_backend\b", r"\1_backend", m.group(0))
    t = re.sub(r"fields:\s*\[[^\]]*\]", fields, t)
    t = re.sub(r"\{config\.nsa_(prefill|decode)_backend\}", r"{config.\1_backend}", t)
    return t
for p in (root / "rules" / "policy").rglob("*.yaml"):
    if "/tests/" in str(p):
        continue  # case inputs keep the case vocabulary (an alias)
    rw(p, rules_fn)
for p in (root / "rules" / "policy").rglob("tests/*.yaml"):
    # expectations may name facts (config.*) or finding fields; inputs stay
    rw(p, lambda t: re.sub(r"\bconfig\.nsa_(prefill|decode)_backend\b", r"config.\1_backend", t))
rw(root / "rules" / "catalog" / "sglang" / "args.yaml",
   lambda t: re.sub(r"(\n\s+field: )nsa_(prefill|decode)_backend\b", r"\1\2_backend", t))
rw(root / "rules" / "codes.yaml", lambda t: re.sub(r"\bconfig\.nsa_(prefill|decode)_backend\b", r"config.\1_backend", t))
def py_fn(t):
    t = re.sub(r"\bconfig\.nsa_(prefill|decode)_backend\b", r"config.\1_backend", t)   # namespace keys and attribute access
    t = re.sub(r"\bc\.nsa_(prefill|decode)_backend\b", r"c.\1_backend", t)
    t = re.sub(r"\bcfg\.nsa_(prefill|decode)_backend\b", r"cfg.\1_backend", t)
    t = re.sub(r'f"config\.nsa_\{', 'f"config.{', t)
    return t
for p in list((root / "nsa_policy").rglob("*.py")) + list((root / "tests").rglob("*.py")) + list((root / "scripts").rglob("*.py")) + list((root / "benchmarks").glob("*.py")):
    rw(p, py_fn)
print("files changed:", n)
EXACT = {
    "nsa_policy/core/facts.py": [
        ("    nsa_prefill_backend: Optional[str] = None\n    nsa_decode_backend: Optional[str] = None\n",
         "    # the engine-neutral names; each engine's spellings (sglang's nsa_*/dsa_* attributes and flags,\n"
         "    # its releases judging them) are aliases in the engine's argument registry\n"
         "    prefill_backend: Optional[str] = Field(default=None, description=\"the prefill kernel backend\")\n"
         "    decode_backend: Optional[str] = Field(default=None, description=\"the decode kernel backend\")\n")],
    "nsa_policy/engines/sglang/replay.py": [('"nsa_prefill_backend": item["prefill"]', '"prefill_backend": item["prefill"]'),
                                            ('"nsa_decode_backend": item["decode"]', '"decode_backend": item["decode"]')],
    "nsa_policy/engines/sglang/flags.py": [('"nsa_prefill_backend", "nsa_decode_backend"', '"prefill_backend", "decode_backend"')],
    "nsa_policy/engines/sglang/__init__.py": [('"nsa_prefill_backend": "prefill", "nsa_decode_backend": "decode"', '"prefill_backend": "prefill", "decode_backend": "decode"'),
                                              ('("prefill_backend", "nsa_prefill_backend", "--nsa-prefill-backend")', '("prefill_backend", "prefill_backend", "--nsa-prefill-backend")'),
                                              ('("decode_backend", "nsa_decode_backend", "--nsa-decode-backend")', '("decode_backend", "decode_backend", "--nsa-decode-backend")')],
    "nsa_policy/engines/sglang/invariants.py": [('getattr(cfg, f"nsa_{phase}_backend")', 'getattr(cfg, f"{phase}_backend")')],
    "nsa_policy/verify/space.py": [('key = f"nsa_{phase}_backend"', 'key = f"{phase}_backend"')],
    "nsa_policy/engines/sglang/config.py": [("(nsa_prefill_backend, dsa_prefill_backend)", "(prefill_backend; sglang's nsa_prefill_backend, dsa_prefill_backend)")],
}
for f, pairs in EXACT.items():
    p = root / f
    t = p.read_text()
    for a, b in pairs:
        if a not in t:
            print("MISSING in", f, ":", a[:60]); continue
        t = t.replace(a, b)
    p.write_text(t)
