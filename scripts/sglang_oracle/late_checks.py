#!/usr/bin/env python3
"""Issue 21, deliverable 3: the checks sglang makes when it builds the DSA indexer and attention backend
(after the weights load), run from each release's own wheel, against the release bundle's NSA321.

The checks are the release's own code, read from the wheel (never vendored) and executed here:

- dsa/paged_mqa_logits_backend.py  DSAPagedMQALogitsBackend.resolve (0.5.15+), built with the model's indexer;
- dsa_backend.py  0.5.22+: _validate_flashmla_sparse_q8_backend, _resolve_dsa_triton_union,
  _validate_triton_sparse_mla_backend; 0.5.16-0.5.21: the flashmla_sparse_q8 statements of
  DeepseekSparseAttnBackend.__init__ (cut out of the constructor with ast, run on a namespace `self`);
- kernels/ops/attention/flash_mla_sm120.py  _validate_flashinfer_sparse_mla_backend (0.5.17+).

Each is called, in the constructor's order, with the values the backend would pass: the device's
compute-capability major (XPU: 0 from 0.5.22), `_is_hip`, the KV dtype and pool layout, the backends, heads
per rank, index_kpool, qk_rope_head_dim, --dsa-triton-union, --enable-deterministic-inference,
--enable-mixed-chunk and HiSparse, where these come from the bundle's own start-up decision (the start-up
pipeline itself is checked against the release by policy_oracle.py / the differential grid).

Inputs are sampled, seeded, from the whole domain of each input: every catalog device class and vendor,
every catalog model plus a NoPE and an index_kpool-2 variant, every KV dtype, every backend the release
lists on each side (and unset), tensor-parallel sizes 1-16 with and without attention DP, every union,
every paged-MQA-logits choice, mixed chunk, deterministic inference, HiSparse.

    python scripts/sglang_oracle/late_checks.py --wheels /tmp/wheels --samples 100000 --seed 21 --write
        # all releases 0.5.16-0.5.23 whose wheel is in --wheels; writes benchmarks/results/sglang-late-checks.{json,md}
        # and tests/data/sglang/late/<X>.jsonl (every --replay-every-th input with the wheel's answer)

Runs in the project's environment (torch from the `runtime` extra: the checks compare torch dtypes);
sglang itself is not imported, and the wheels are only read.
"""
from __future__ import annotations

import argparse
import ast
import json
import platform
import random
import re
import sys
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

RELEASES = ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
DSA_BACKEND = "sglang/srt/layers/attention/dsa_backend.py"
SM120 = "sglang/kernels/ops/attention/flash_mla_sm120.py"
PAGED_MQA = "sglang/srt/layers/attention/dsa/paged_mqa_logits_backend.py"


def _v(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


class ReleaseChecks:
    """The late checks of one release, compiled from its wheel's source files."""

    def __init__(self, release: str, wheel: Path):
        import torch

        self.release = release
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            src = {p: z.read(p).decode() for p in (DSA_BACKEND, SM120, PAGED_MQA) if p in names}
        self.torch = torch
        self.sources = sorted(src)
        self._hip = [False]
        self._sm100 = [False]
        self.paged_mqa = self._paged_mqa(src[PAGED_MQA]) if PAGED_MQA in src else None
        tree = ast.parse(src[DSA_BACKEND])
        self.new_style = any(isinstance(n, ast.FunctionDef) and n.name == "_validate_flashmla_sparse_q8_backend"
                             for n in tree.body)
        self.dsa = self._module_functions(tree, src[DSA_BACKEND], (
            "_validate_flashmla_sparse_q8_backend", "_validate_triton_sparse_mla_backend", "_resolve_dsa_triton_union"),
            ("_TRITON_SPARSE_MLA_MAX_HEADS",))
        self.q8_inline = None if self.new_style else self._q8_statements(tree)
        self.fi = None
        if SM120 in src:
            t = ast.parse(src[SM120])
            fi = self._module_functions(t, src[SM120], ("_validate_flashinfer_sparse_mla_backend",), ("_GLM_DSA_MODEL_ARCHS",))
            self.fi = fi.get("_validate_flashinfer_sparse_mla_backend")

    # -- compiling the release's own code -------------------------------------------------------
    def _globals(self) -> dict[str, Any]:
        hip, sm100 = self._hip, self._sm100

        class _Logger:
            def warning(self, *a: Any, **k: Any) -> None:  # _resolve_dsa_triton_union logs; nothing to show
                pass

        return {"torch": self.torch, "Optional": Optional, "logger": _Logger(), "__name__": f"sglang_{self.release}",
                "is_hip": lambda: hip[0], "is_sm100_supported": lambda: sm100[0],
                "get_platform": lambda: SimpleNamespace(is_sm100=sm100[0]),
                "_HipFlag": hip}

    def _module_functions(self, tree: ast.Module, text: str, funcs: tuple[str, ...], consts: tuple[str, ...]
                          ) -> dict[str, Callable[..., Any]]:
        g = self._globals()
        body = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in funcs)
                or (isinstance(n, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(t, ast.Name) and t.id in consts
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))]
        # `_is_hip` is a module constant in the wheel (computed at import); here it follows the emulated device
        mod = ast.Module(body=body, type_ignores=[])
        code = compile(ast.fix_missing_locations(_HipRewriter().visit(mod)), f"<{self.release} wheel>", "exec")
        exec(code, g)  # noqa: S102 - the release's own functions, from its wheel
        return {f: g[f] for f in funcs if f in g}

    def _paged_mqa(self, text: str) -> Any:
        tree = ast.parse(text)
        g = self._globals()
        from enum import Enum

        g["Enum"] = Enum
        body = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        exec(compile(ast.Module(body=body, type_ignores=[]), f"<{self.release} paged_mqa>", "exec"), g)  # noqa: S102
        return g["DSAPagedMQALogitsBackend"]

    def _q8_statements(self, tree: ast.Module) -> Callable[[Any], None]:
        """0.5.16-0.5.21: the `flashmla_sparse_q8` if-statements of DeepseekSparseAttnBackend.__init__."""
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DeepseekSparseAttnBackend")
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        stmts = [s for s in init.body if isinstance(s, ast.If) and "flashmla_sparse_q8" in ast.unparse(s.test)]
        assert len(stmts) == 2, f"{self.release}: expected the prefill and decode flashmla_sparse_q8 checks, got {len(stmts)}"
        fn = ast.FunctionDef(name="_q8", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="self")], kwonlyargs=[],
                                                            kw_defaults=[], defaults=[]),
                             body=[_HipRewriter().visit(st) for st in stmts], decorator_list=[], returns=None)
        g = self._globals()
        exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), f"<{self.release} __init__>",
                     "exec"), g)  # noqa: S102
        return g["_q8"]  # type: ignore[no-any-return]

    # -- running them ---------------------------------------------------------------------------
    def refuse(self, p: dict[str, Any]) -> Optional[str]:
        """The ValueError message the release raises while building the indexer and backend, or None."""
        t = self.torch
        self._hip[0] = p["vendor"] == "amd"
        self._sm100[0] = p["vendor"] == "nvidia" and p["major"] == 10
        try:
            if self.paged_mqa is not None and p["paged_mqa"] is not None:
                self.paged_mqa.resolve(p["paged_mqa"])
            kv = {"bfloat16": t.bfloat16, "fp8_e4m3": t.float8_e4m3fn}[p["kv"]]
            major = p["major"]
            if self.new_style:
                self.dsa["_validate_flashmla_sparse_q8_backend"](
                    prefill_impl=p["prefill"], decode_impl=p["decode"], kv_cache_dtype=kv,
                    kv_cache_store_fp8=p["packed"], qk_rope_head_dim=p["rope"], device_sm_major=major,
                    hisparse_enabled=p["hisparse"], mixed_chunk_enabled=p["mixed_chunk"])
                if p["prefill"] == "triton_sparse_mla":
                    union = self.dsa["_resolve_dsa_triton_union"](union=p["union"], deterministic=p["deterministic"])
                    self.dsa["_validate_triton_sparse_mla_backend"](
                        device_sm_major=major, num_q_heads=p["heads"], union=union, index_kpool=p["kpool"])
            else:
                assert self.q8_inline is not None
                self.q8_inline(SimpleNamespace(dsa_prefill_impl=p["prefill"], dsa_decode_impl=p["decode"],
                                               kv_cache_dtype=kv, device_sm_major=major))
            if self.fi is not None:
                self.fi(model_arch=p["arch"], device_sm_major=major, kv_cache_dtype=kv, prefill_impl=p["prefill"],
                        decode_impl=p["decode"])
        except ValueError as exc:
            return str(exc)
        return None


class _HipRewriter(ast.NodeTransformer):
    """`_is_hip` (a module constant computed at import) → `_HipFlag[0]`, set per emulated device."""

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id == "_is_hip" and isinstance(node.ctx, ast.Load):
            new = ast.Subscript(value=ast.Name(id="_HipFlag", ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load())
            return ast.fix_missing_locations(ast.copy_location(new, node))
        return node


# ---------------------------------------------------------------- sampling and comparing

def domain(release: str) -> dict[str, list[Any]]:
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    classes = [c for c in cat.device_classes if c != "cpu"]
    return {
        "device": classes,
        "model": [*cat.model_ids, "arch:nope", "arch:kpool2"],
        "kv": [None, "bfloat16", "fp8_e4m3"],
        "prefill": [None, *cat.sglang_choices(release, "prefill")],
        "decode": [None, *cat.sglang_choices(release, "decode")],
        "tp": [1, 2, 4, 8, 16],
        "dp_attention": [False, True],
        "union": [0, 2, 4] if _v(release) >= (0, 5, 22) else [0],
        "deterministic": [False, True],
        "mixed_chunk": [False, True],
        "hisparse": [False, True],
        "paged_mqa": [None, "auto", "deepgemm", "cutedsl", "aiter"],
    }


def sample(release: str, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(f"{seed}:{release}")
    dom = domain(release)
    return [{k: rng.choice(v) for k, v in dom.items()} for _ in range(n)]


def _facts(inp: dict[str, Any]) -> Any:
    from nsa_policy.api import build_facts

    cfg: dict[str, Any] = {"tp_size": inp["tp"]}
    if inp["dp_attention"]:
        cfg.update(dp_size=inp["tp"], enable_dp_attention=True)
    for key, field in (("kv", "kv_cache_dtype"), ("prefill", "prefill_backend"), ("decode", "decode_backend"),
                       ("paged_mqa", "dsa_paged_mqa_logits_backend")):
        if inp[key] is not None:
            cfg[field] = inp[key]
    cfg.update(dsa_triton_union=inp["union"], enable_deterministic_inference=inp["deterministic"],
               enable_mixed_chunk=inp["mixed_chunk"])
    if inp["hisparse"]:
        cfg.update(enable_hisparse=True, disable_radix_cache=True)
    model: Any = inp["model"]
    if model == "arch:nope":
        model = {"architectures": ["GlmMoeDsaForCausalLM"], "index_topk": 2048, "num_attention_heads": 64,
                 "qk_rope_head_dim": 0}
    elif model == "arch:kpool2":
        model = {"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 2048, "num_attention_heads": 128,
                 "index_kpool": 2, "qk_rope_head_dim": 64}
    return build_facts(cfg, device=inp["device"], model=model, env={}, packages={})


def compare(release: str, checks: ReleaseChecks, inp: dict[str, Any]) -> dict[str, Any]:
    """One input: the bundle's decision, then the release's late checks on that decision's values."""
    from nsa_policy.api import decide

    facts = _facts(inp)
    d = decide(facts, f"sglang-{release}", trace=False)
    late = [w.message for w in d.warnings if w.code == "NSA321"]
    row: dict[str, Any] = {"input": inp, "bundle_late": late}
    if d.errors or not d.applies or d.dsa_scope == "none" or facts.device.vendor == "cpu" or d.kv_cache_dtype is None:
        row["outcome"] = "not built"  # refused at start-up, or no DSA backend is built: nothing late to compare
        return row
    if facts.device.vendor == "intel" and _v(release) < (0, 5, 22):
        row["outcome"] = "not built"  # torch.cuda.get_device_capability() has no XPU answer before 0.5.22
        return row
    cc = facts.device.compute_capability
    params = {"vendor": facts.device.vendor, "major": cc[0] if cc else 0, "prefill": d.prefill_backend,
              "decode": d.decode_backend, "kv": d.kv_cache_dtype, "packed": d.kv_cache_layout == "fp8-656-blockwise",
              "rope": facts.model.qk_rope_head_dim if facts.model.qk_rope_head_dim is not None else 64,
              "heads": facts.derived.heads_per_rank, "kpool": facts.model.index_kpool, "union": inp["union"],
              "deterministic": inp["deterministic"], "mixed_chunk": inp["mixed_chunk"], "hisparse": inp["hisparse"],
              "paged_mqa": inp["paged_mqa"] or "auto", "arch": facts.model.architecture}
    wheel = checks.refuse(params)
    row["wheel"] = wheel
    row["params"] = params
    if (wheel is None) != (not late):
        row["outcome"] = "disagree"
    elif wheel is None:
        row["outcome"] = "agree: builds"
    else:
        row["outcome"] = "agree: refused"
        row["message_matches"] = any(_norm(wheel) in _norm(m) for m in late[:1])
    return row


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, required=True, help="folder with sglang-<X>-*.whl")
    ap.add_argument("--releases", nargs="*", default=list(RELEASES))
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--replay-every", type=int, default=500)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    summary: dict[str, Any] = {"seed": args.seed, "samples_per_release": args.samples,
                               "machine": f"{platform.node()} ({platform.machine()}, {platform.python_version()})",
                               "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "releases": {}}
    for rel in args.releases:
        wheel = next(iter(sorted(args.wheels.glob(f"sglang-{rel}-*.whl"))), None)
        if wheel is None:
            print(f"{rel}: no wheel in {args.wheels}; skipped", file=sys.stderr)
            continue
        checks = ReleaseChecks(rel, wheel)
        t0 = time.time()
        counts: dict[str, int] = {}
        classes: dict[str, dict[str, Any]] = {}
        msg_ok = msg_all = 0
        replay: list[dict[str, Any]] = []
        for i, inp in enumerate(sample(rel, args.samples, args.seed)):
            row = compare(rel, checks, inp)
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            if row["outcome"] == "agree: refused":
                msg_all += 1
                msg_ok += bool(row["message_matches"])
            if row["outcome"] == "disagree":
                key = f"wheel: {(row['wheel'] or 'builds')[:90]} | bundle: {(row['bundle_late'][:1] or ['builds'])[0][:90]}"
                c = classes.setdefault(key, {"count": 0, "example": row})
                c["count"] += 1
            if row["outcome"] != "not built" and (i % args.replay_every == 0 or row["outcome"] == "agree: refused"
                                                  and i % max(args.replay_every // 10, 1) == 0):
                replay.append({"release": rel, "input": inp, "wheel": row.get("wheel")})
        built = sum(v for k, v in counts.items() if k != "not built")
        agree = built - counts.get("disagree", 0)
        summary["releases"][rel] = {
            "wheel": wheel.name, "sources": checks.sources, "inputs": args.samples, "built": built,
            "agree": agree, "agreement": round(100.0 * agree / built, 3) if built else None,
            "refused_late": counts.get("agree: refused", 0), "messages_verbatim": msg_ok, "messages_compared": msg_all,
            "outcomes": counts, "seconds": round(time.time() - t0, 1),
            "disagreement_classes": sorted(({"class": k, "count": v["count"], "example": v["example"]}
                                            for k, v in classes.items()), key=lambda c: -c["count"]),
        }
        print(f"{rel}: {args.samples} sampled, {built} reach the backend build, agree {agree}/{built}; "
              f"refused late {counts.get('agree: refused', 0)} (message verbatim {msg_ok}/{msg_all}); "
              f"{len(classes)} disagreement classes; {time.time() - t0:.0f} s", flush=True)
        if args.write:
            out = REPO / "tests" / "data" / "sglang" / "late"
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{rel}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in replay))
    if args.write:
        res = REPO / "benchmarks" / "results"
        (res / "sglang-late-checks.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
        (res / "sglang-late-checks.md").write_text(_markdown(summary))
    return 0 if all(not r["disagreement_classes"] for r in summary["releases"].values()) else 1


def _markdown(s: dict[str, Any]) -> str:
    lines = ["# Late refusals: each release's own build-time checks against its bundle (sampled)", "",
             f"`python scripts/sglang_oracle/late_checks.py --wheels DIR --samples {s['samples_per_release']} "
             f"--seed {s['seed']} --write`, {s['date']}, {s['machine']}. Inputs sampled (seeded) from the whole domain "
             "of each input (scripts/sglang_oracle/late_checks.py `domain`); an input counts where the bundle's start-up "
             "decision builds a DSA backend (no start-up refusal, a DSA architecture, a CUDA/ROCm device, or XPU from "
             "0.5.22). The checks are the wheel's own code (listed per release), executed with the values the backend "
             "would pass.", "",
             "| release | sampled | reach the backend build | agree | refused late (agreeing) | sglang's message verbatim "
             "| disagreement classes |",
             "|---|---|---|---|---|---|---|"]
    for rel, r in s["releases"].items():
        lines.append(f"| {rel} | {r['inputs']} | {r['built']} | {r['agreement']} % | {r['refused_late']} | "
                     f"{r['messages_verbatim']}/{r['messages_compared']} | {len(r['disagreement_classes'])} |")
    lines.append("")
    for rel, r in s["releases"].items():
        for c in r["disagreement_classes"]:
            lines.append(f"- {rel}: {c['count']} × {c['class']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
