"""`nsa-policy bench`'s results without a GPU: the measurement record, ranking, the report and the
site bundle written from it (docs/bench.md).

Pure Python (pydantic and PyYAML): the CPU tests and `--from-json` use it on a recorded run; the GPU
side (`nsa_policy.runtime.bench`) fills the same models.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field

from nsa_policy import InputError
from nsa_policy.catalog.store import KV_DTYPE_ALIASES, KV_DTYPES

PHASES = ("prefill", "decode")
GIB = 1 << 30
DEFAULT_THRESHOLD = 0.10


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")


class Timing(_Frozen):
    """One backend at one operating point: the median of the rounds taken in turns, and its output
    against the fp32 torch reference."""

    backend: str
    kv_cache_dtype: str
    ms: Optional[float] = Field(description="median GPU ms of one layer's call (transform + kernel); None if it failed")
    ms_rounds: list[float] = []
    rel_error: Optional[float] = Field(default=None, description="‖out − ref‖ / ‖ref‖ on the checked rows")
    tolerance: float
    error: Optional[str] = Field(default=None, description="why the call failed, when it did")

    @property
    def agrees(self) -> bool:
        return self.error is None and self.rel_error is not None and math.isfinite(self.rel_error) \
            and self.rel_error <= self.tolerance


class Point(_Frozen):
    """An operating point: decode `size` rows at `context` tokens each; prefill `size` new tokens
    whose requests reach `context` tokens (prefix included)."""

    phase: Literal["prefill", "decode"]
    context: int
    size: int
    requests: int
    timings: list[Timing]

    def timing(self, backend: str, kv: str) -> Optional[Timing]:
        return next((t for t in self.timings if t.backend == backend and t.kv_cache_dtype == kv), None)


class PolicyChoice(_Frozen):
    """The default policy's decision for this device, model and parallel shape, at one KV dtype."""

    kv_cache_dtype: str
    kv_cache_layout: str
    prefill_backend: str
    decode_backend: str
    prefill_rule: Optional[str] = None
    decode_rule: Optional[str] = None
    policy: str
    policy_digest: str

    def backend(self, phase: str) -> str:
        return self.prefill_backend if phase == "prefill" else self.decode_backend

    def rule(self, phase: str) -> Optional[str]:
        return self.prefill_rule if phase == "prefill" else self.decode_rule


class Excluded(_Frozen):
    backend: str
    phase: str
    kv_cache_dtype: str
    reason: str


class Environment(_Frozen):
    gpu: str
    device: str = Field(description="the catalog's device name")
    device_class: str
    capability: str
    measured_utc: str
    python: str
    torch: str
    triton: str
    flashinfer: str
    sgl_flash_mla: str


class Settings(_Frozen):
    rounds: int
    warmup_calls: int
    flush_mib: int
    table_page_size: int
    checked_rows: int
    pool_tokens: int
    note: str


class BenchRun(_Frozen):
    """One `nsa-policy bench` run: one model on one GPU at one parallel shape."""

    schema_version: Literal[1] = 1
    model: str
    tp_size: int
    dp_size: Optional[int] = None
    enable_dp_attention: bool = False
    heads_per_rank: int
    index_topk: int
    environment: Environment
    settings: Settings
    policy: list[PolicyChoice]
    kv_bytes_per_token: dict[str, int] = Field(description="KV layout → bytes per token per layer")
    points: list[Point]
    excluded: list[Excluded] = []

    def choice(self, kv: str) -> Optional[PolicyChoice]:
        return next((c for c in self.policy if c.kv_cache_dtype == kv), None)

    def shape(self) -> str:
        dp = f", attention DP {self.dp_size}" if self.enable_dp_attention else ""
        return f"TP {self.tp_size}{dp}: {self.heads_per_rank} heads per rank"


def load_run(path: Path) -> BenchRun:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError("--from-json", str(path), hint=f"cannot read it ({exc.strerror})") from None
    try:
        return BenchRun.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise InputError("--from-json", str(path),
                         hint=f"not a bench record ({first[1].strip() if len(first) > 1 else first[0]})") from None


def select(run: BenchRun, batches: Optional[list[int]] = None, contexts: Optional[list[int]] = None,
           prefill_tokens: Optional[list[int]] = None, phases: tuple[str, ...] = PHASES) -> BenchRun:
    """The recorded run at the operator's operating points only (None: every recorded one)."""
    def keep(p: Point) -> bool:
        sizes = batches if p.phase == "decode" else prefill_tokens
        return (p.phase in phases and (contexts is None or p.context in contexts)
                and (sizes is None or p.size in sizes))

    points = [p for p in run.points if keep(p)]
    if not points:
        raise InputError("--batch/--context/--prefill-tokens", "(selection)",
                         hint=f"none of the recorded points of {run.shape()} is among the ones asked for")
    return run.model_copy(update={"points": points})


# ---------------------------------------------------------------- operating points (CLI input)
_SIZE = re.compile(r"^(\d+)([kKmM]?)$")


def parse_sizes(field: str, text: str, *, lo: int = 1, hi: int = 1 << 22) -> list[int]:
    """'1,8,32' or '4k,32k,128k' (k = 1024, m = 1024²) → sorted distinct ints in [lo, hi]."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = _SIZE.match(part)
        if not m:
            raise InputError(field, text, hint=f"{part!r} is not a size; give comma-separated integers, "
                                               f"k = 1024 and m = 1024² allowed (e.g. 4k,32k,128k)")
        n = int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20}[m.group(2).lower()]
        if not lo <= n <= hi:
            raise InputError(field, text, hint=f"{part} = {n} is outside {lo}..{hi}")
        out.append(n)
    return sorted(set(out))


def parse_kv_dtypes(text: str) -> list[str]:
    # the catalog's names and aliases, and "fp8" for the one fp8 KV dtype the Hopper backends read
    aliases = {**{k: k for k in KV_DTYPES}, **KV_DTYPE_ALIASES, "fp8": "fp8_e4m3"}
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part not in aliases:
            raise InputError("--kv-cache-dtype", part, list(KV_DTYPES))
        out.append(aliases[part])
    return [k for k in KV_DTYPES if k in out]


def tokens_per_gib(bytes_per_token: int) -> int:
    return GIB // bytes_per_token


# ---------------------------------------------------------------- ranking
class Ranked(_Frozen):
    """One phase, KV dtype and operating point: the fastest backend whose output agrees, the policy's
    choice, and how much slower the policy's choice is (None when it was not measured or disagrees)."""

    phase: str
    kv_cache_dtype: str
    context: int
    size: int
    fastest: Optional[str]
    fastest_ms: Optional[float]
    policy_backend: Optional[str]
    policy_ms: Optional[float]
    gap: Optional[float] = Field(description="policy ms / fastest ms − 1")
    disagreeing: list[str]


def rank(run: BenchRun) -> list[Ranked]:
    """Per point and KV dtype. A backend whose output disagrees with the reference (or whose call
    failed) is listed, never ranked."""
    out = []
    for p in run.points:
        for kv in KV_DTYPES:
            timings = [t for t in p.timings if t.kv_cache_dtype == kv]
            if not timings:
                continue
            valid = [t for t in timings if t.agrees and t.ms is not None]
            best = min(valid, key=lambda t: t.ms or math.inf) if valid else None
            choice = run.choice(kv)
            pol = choice.backend(p.phase) if choice else None
            pol_t = next((t for t in valid if t.backend == pol), None)
            gap = (pol_t.ms / best.ms - 1) if (pol_t and best and pol_t.ms and best.ms) else None
            out.append(Ranked(phase=p.phase, kv_cache_dtype=kv, context=p.context, size=p.size,
                              fastest=best.backend if best else None, fastest_ms=best.ms if best else None,
                              policy_backend=pol, policy_ms=pol_t.ms if pol_t else None, gap=gap,
                              disagreeing=[t.backend for t in timings if not t.agrees]))
    return out


def kv_tradeoff(run: BenchRun) -> list[tuple[str, int, int, float, float]]:
    """(phase, context, size, best bf16 ms, best fp8 ms) where both dtypes have an agreeing backend."""
    rows: list[tuple[str, int, int, float, float]] = []
    by_key: dict[tuple[str, int, int, str], float] = {}
    for r in rank(run):
        if r.fastest_ms is not None:
            by_key[(r.phase, r.context, r.size, r.kv_cache_dtype)] = r.fastest_ms
    for p in run.points:
        a, b = by_key.get((p.phase, p.context, p.size, "bfloat16")), by_key.get((p.phase, p.context, p.size, "fp8_e4m3"))
        if a is not None and b is not None:
            rows.append((p.phase, p.context, p.size, a, b))
    return rows


# ---------------------------------------------------------------- report
def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 and n >= 1024 else str(n)


def _ms(t: Optional[Timing]) -> str:
    if t is None:
        return "-"
    if t.error is not None:
        return "FAILED"
    mark = "" if t.agrees else f" DISAGREES ({t.rel_error:.2g})" if t.rel_error is not None else " DISAGREES"
    return f"{t.ms:.4f}{mark}" if t.ms is not None else "-"


def render_markdown(run: BenchRun) -> str:
    env = run.environment
    backends = sorted({(t.kv_cache_dtype, t.backend) for p in run.points for t in p.timings},
                      key=lambda x: (KV_DTYPES.index(x[0]) if x[0] in KV_DTYPES else 9, x[1]))
    lines = [f"# nsa-policy bench: {run.model} on {env.gpu} ({env.device}, {env.device_class})", "",
             f"{run.shape()}; top-k {run.index_topk}. Measured {env.measured_utc}; torch {env.torch}, triton "
             f"{env.triton}, flashinfer {env.flashinfer}, sgl-flash-mla {env.sgl_flash_mla}, python {env.python}.", "",
             f"Milliseconds per layer call through `SparseMLAAdapter` (the top-k → page-table transform and the "
             f"kernel): median of {run.settings.rounds} rounds taken in turns (every backend once per round, "
             f"order rotated, L2 flushed ({run.settings.flush_mib} MiB written) before each call, clocks warmed "
             f"first). Every output is compared with the fp32 torch reference on {run.settings.checked_rows} "
             f"rows per point; a backend that disagrees is marked and never ranked. {run.settings.note}", ""]
    for c in run.policy:
        lines.append(f"- policy `{c.policy}` ({c.policy_digest}) with `{c.kv_cache_dtype}` KV: prefill "
                     f"`{c.prefill_backend}`, decode `{c.decode_backend}`, layout `{c.kv_cache_layout}`")
    lines.append("")
    ranked = {(r.phase, r.kv_cache_dtype, r.context, r.size): r for r in rank(run)}
    for phase in PHASES:
        pts = [p for p in run.points if p.phase == phase]
        if not pts:
            continue
        what = "decode rows" if phase == "decode" else "prefill tokens"
        lines += [f"## {phase.capitalize()}", "",
                  f"| context | {what} | " + " | ".join(f"{b} ({'bf16' if kv == 'bfloat16' else 'fp8'})"
                                                       for kv, b in backends)
                  + " | fastest (bf16) | policy (bf16) | gap | fastest (fp8) | policy (fp8) | gap |",
                  "|---|---|" + "---|" * len(backends) + "---|---|---|---|---|---|"]
        for p in pts:
            cells = [_ms(p.timing(b, kv)) for kv, b in backends]
            for kv in KV_DTYPES:
                r = ranked.get((phase, kv, p.context, p.size))
                if r is None:
                    cells += ["-", "-", "-"]
                    continue
                cells += [r.fastest or "none valid", r.policy_backend or "-",
                          f"{r.gap * 100:+.1f} %" if r.gap is not None else "n/a"]
            lines.append(f"| {_k(p.context)} | {p.size} | " + " | ".join(cells) + " |")
        lines.append("")
    trade = kv_tradeoff(run)
    if trade or run.kv_bytes_per_token:
        lines += ["## KV dtype trade-off", ""]
        for layout, nbytes in sorted(run.kv_bytes_per_token.items()):
            lines.append(f"- `{layout}`: {nbytes} bytes per token per layer = {tokens_per_gib(nbytes):,} KV tokens "
                         f"per GiB per layer")
        if trade:
            lines += ["", "| phase | context | size | best bf16 ms | best fp8 ms | fp8 / bf16 per step |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {ph} | {_k(c)} | {s} | {a:.4f} | {b:.4f} | {b / a:.2f}× |" for ph, c, s, a, b in trade]
        lines.append("")
    if run.excluded:
        lines += ["## Not measured", ""]
        lines += [f"- `{e.backend}` ({e.phase}, {e.kv_cache_dtype}): {e.reason}" for e in run.excluded]
        lines.append("")
    return "\n".join(lines)


def render_text(run: BenchRun) -> str:
    """The terminal summary: per phase and KV dtype, the fastest backend and the policy's gap."""
    env = run.environment
    lines = [f"bench {run.model} on {env.gpu} ({env.device}) · {run.shape()} · {env.measured_utc}"]
    for r in rank(run):
        what = "rows" if r.phase == "decode" else "tokens"
        gap = f"{r.gap * 100:+6.1f} %" if r.gap is not None else "   n/a"
        bad = f"  disagrees: {', '.join(r.disagreeing)}" if r.disagreeing else ""
        fastest = f"{r.fastest} {r.fastest_ms:.4f} ms" if r.fastest and r.fastest_ms else "none valid"
        lines.append(f"  {r.phase:<7} {r.kv_cache_dtype:<9} ctx {_k(r.context):>5} {r.size:>6} {what:<6} "
                     f"fastest {fastest:<28} policy {r.policy_backend or '-':<16} gap {gap}{bad}")
    return "\n".join(lines)


def plot(runs: list[BenchRun], path: Path) -> Optional[str]:
    """Time vs batch per backend and phase, one panel per (phase, context); returns a one-line hint
    instead of a picture when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no picture: matplotlib is not installed (pip install matplotlib)"
    contexts = sorted({p.context for r in runs for p in r.points})
    fig, axes = plt.subplots(len(runs) * 2, len(contexts), figsize=(4.2 * len(contexts), 3.4 * 2 * len(runs)),
                             squeeze=False)
    for ri, run in enumerate(runs):
        for pi, phase in enumerate(PHASES):
            for ci, ctx in enumerate(contexts):
                ax = axes[ri * 2 + pi][ci]
                pts = [p for p in run.points if p.phase == phase and p.context == ctx]
                series = sorted({(t.kv_cache_dtype, t.backend) for p in pts for t in p.timings})
                for kv, b in series:
                    xs = [(p.size, p.timing(b, kv)) for p in pts]
                    ok = [(x, t.ms) for x, t in xs if t is not None and t.agrees and t.ms is not None]
                    if ok:
                        ax.plot([x for x, _ in ok], [y for _, y in ok], marker="o",
                                linestyle="-" if kv == "bfloat16" else "--",
                                label=f"{b} ({'bf16' if kv == 'bfloat16' else 'fp8-656'})")
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_title(f"{phase}, {run.heads_per_rank} heads/rank, ctx {_k(ctx)}", fontsize=9)
                ax.set_xlabel("decode rows" if phase == "decode" else "prefill tokens", fontsize=8)
                ax.set_ylabel("ms per layer", fontsize=8)
                ax.grid(True, which="both", alpha=0.3)
                if pts:
                    ax.legend(fontsize=7)
    env = runs[0].environment
    fig.suptitle(f"{runs[0].model} on {env.gpu}, {env.measured_utc[:10]} (torch {env.torch}, flashinfer "
                 f"{env.flashinfer}, sgl-flash-mla {env.sgl_flash_mla})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))  # room for the title
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------- the site bundle
class Pick(_Frozen):
    """A backend that beats the policy's choice for one phase and KV dtype at one parallel shape, over
    the measured operating points (geometric mean of policy ms / its ms)."""

    run_index: int
    runs: int = 1
    phase: str
    kv_cache_dtype: str
    backend: str
    policy_backend: str
    policy_rule: str
    speedup: float
    per_point: list[tuple[int, int, float, float]] = Field(description="(context, size, policy ms, its ms)")


def _shape_key(run: BenchRun) -> tuple:
    return (run.environment.device, run.model, run.tp_size, run.dp_size, run.enable_dp_attention, run.heads_per_rank)


def shapes(runs: list[BenchRun]) -> list[list[int]]:
    """Indices of the runs grouped by shape (device, model, parallel shape): repeated runs of one shape
    are scored together, as more measurements of the same operating points."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault(_shape_key(r), []).append(i)
    return list(groups.values())


def picks(runs: list[BenchRun], threshold: float = DEFAULT_THRESHOLD) -> list[Pick]:
    """Where the measured-fastest beats the policy's choice by more than `threshold`. A startup rule
    cannot see the batch, so a backend is scored over all measured points of its phase and KV dtype
    (the geometric mean of policy ms / its ms, over every run of the shape); it must agree with the
    reference at every one."""
    out = []
    for group in shapes(runs):
        run = runs[group[0]]
        for kv in KV_DTYPES:
            choice = run.choice(kv)
            if choice is None:
                continue
            for phase in PHASES:
                pol, rule = choice.backend(phase), choice.rule(phase)
                pts = [p for i in group for p in runs[i].points
                       if p.phase == phase and p.timing(pol, kv) is not None]
                if not pts or rule is None:
                    continue
                cands = sorted({t.backend for p in pts for t in p.timings if t.kv_cache_dtype == kv} - {pol})
                best: Optional[Pick] = None
                for b in cands:
                    pairs = [(p, p.timing(pol, kv), p.timing(b, kv)) for p in pts]
                    if any(c is None or not c.agrees or c.ms is None for _, _, c in pairs):
                        continue  # must be valid at every measured point
                    both = [(p, a, c) for p, a, c in pairs if a is not None and a.agrees and a.ms and c and c.ms]
                    if not both:
                        continue
                    speed = math.exp(sum(math.log(a.ms / c.ms) for _, a, c in both if a.ms and c.ms) / len(both))
                    if speed > 1 + threshold and (best is None or speed > best.speedup):
                        best = Pick(run_index=group[0], runs=len(group), phase=phase, kv_cache_dtype=kv, backend=b,
                                    policy_backend=pol, policy_rule=rule, speedup=speed,
                                    per_point=[(p.context, p.size, a.ms or 0.0, c.ms or 0.0) for p, a, c in both])
                if best is not None:
                    out.append(best)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _evidence(run: BenchRun, pick: Pick) -> list[str]:
    env = run.environment
    head = (f"nsa-policy bench on {env.gpu} ({env.device}, {env.device_class}, cc {env.capability}), {env.measured_utc}; "
            f"torch {env.torch}, flashinfer {env.flashinfer}, sgl-flash-mla {env.sgl_flash_mla}, triton {env.triton}")
    what = "decode rows" if pick.phase == "decode" else "prefill tokens"
    nums = "; ".join(f"ctx {_k(c)} x {s} {what}: {pick.policy_backend} {a:.4f} ms, {pick.backend} {b:.4f} ms"
                     for c, s, a, b in pick.per_point)
    return [head, f"{run.model}, {run.shape()}, {pick.kv_cache_dtype} KV, {pick.phase}: {pick.backend} "
                  f"{pick.speedup:.3f}x the policy's {pick.policy_backend} (geometric mean over "
                  f"{len(pick.per_point)} points of {pick.runs} run(s), median of {run.settings.rounds} rounds each)",
            nums]


def bundle_rules(runs: list[BenchRun], chosen: list[Pick]) -> list[dict]:
    rules = []
    for pk in chosen:
        run = runs[pk.run_index]
        side = f"{pk.phase}_backend"
        rules.append({
            "id": f"site.{_slug(run.environment.device)}-{pk.phase}-{run.heads_per_rank}h-"
                  f"{'bf16' if pk.kv_cache_dtype == 'bfloat16' else 'fp8'}",
            # device.class, not the name: `nsa-policy check` enumerates device classes, so a rule on a
            # device name could never be reached there; the description says where it was measured
            "description": f"Measured on {run.environment.gpu}: {pk.backend} runs {pk.phase} {pk.speedup:.2f}x "
                           f"faster than {pk.policy_backend} for {run.model} at {run.heads_per_rank} heads per "
                           f"rank with {pk.kv_cache_dtype} KV (nsa-policy bench); applies to every "
                           f"{run.environment.device_class} device: re-measure on others.",
            "when": {"device.class": run.environment.device_class, "model.id": run.model,
                     "derived.heads_per_rank": run.heads_per_rank, "out.kv_cache_dtype": pk.kv_cache_dtype},
            # first_valid: a fill like the default's own, so an explicit flag or an invalid cell is
            # never overridden
            "set": {side: {"first_valid": {"phase": pk.phase, "candidates": [pk.backend]}}},
            "before": pk.policy_rule,
            "wins_over": [pk.policy_rule],
            "evidence": _evidence(run, pk),
        })
    return rules


def _case_input(run: BenchRun, kv: str) -> dict:
    case: dict = {"device": run.environment.device, "model": run.model, "tp_size": run.tp_size,
                  "kv_cache_dtype": kv}
    if run.enable_dp_attention:
        case.update(dp_size=run.dp_size, enable_dp_attention=True)
    return case


def bundle_tests(runs: list[BenchRun], chosen: list[Pick], rules: list[dict]) -> list[dict]:
    """One case per measured shape and KV dtype: the bundle picks the measured backend where a rule
    says so and keeps the default policy's choice elsewhere."""
    cases = []
    for group in shapes(runs):
        i, run = group[0], runs[group[0]]
        for choice in run.policy:
            kv = choice.kv_cache_dtype
            expect: dict = {"heads_per_rank": run.heads_per_rank, "kv_cache_dtype": kv, "rejected": False}
            fired = []
            for phase in PHASES:
                pk = next((p for p in chosen if p.run_index == i and p.phase == phase and p.kv_cache_dtype == kv), None)
                expect[f"{phase}_backend"] = pk.backend if pk else choice.backend(phase)
                if pk:
                    fired.append(rules[chosen.index(pk)]["id"])
            if fired:
                expect["rules"] = fired
            cases.append({"name": f"{_slug(run.environment.device)}-{run.heads_per_rank}h-{_slug(kv)}",
                          "description": f"{run.shape()}, {kv} KV, as measured {run.environment.measured_utc}",
                          "input": _case_input(run, kv), "expect": expect})
    return cases


def write_bundle(runs: list[BenchRun], out_dir: Path, *, name: Optional[str] = None,
                 threshold: float = DEFAULT_THRESHOLD) -> tuple[Path, list[Pick]]:
    """A bundle folder that `extends: default`, with a rule per pick and rule tests for every measured
    shape. Returns (folder, picks)."""
    if not runs:
        raise InputError("--write-bundle", str(out_dir), hint="no measurement to write a bundle from")
    if not 0 <= threshold < 10:
        raise InputError("--threshold", threshold, hint="a fraction in 0..10 (0.1 = 10 %)")
    for r in runs:
        if any(c.policy != "default" for c in r.policy):
            raise InputError("--write-bundle", str(out_dir), hint="the measurement was compared with a policy other "
                                                                  "than default; the bundle extends default")
    chosen = picks(runs, threshold)
    rules = bundle_rules(runs, chosen)
    env = runs[0].environment
    bundle_name = name or f"site-{_slug(env.device)}-bench"
    if not re.match(r"^[a-z0-9][a-z0-9_.\-]*$", bundle_name):
        raise InputError("--bundle-name", bundle_name, hint="lower-case letters, digits, '.', '_' and '-'")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "tests").mkdir(exist_ok=True)
    shapes = "; ".join(dict.fromkeys(r.shape() for r in runs))
    head = {"name": bundle_name,
            "description": f"default, plus the backends nsa-policy bench measured faster by more than "
                           f"{threshold * 100:.0f} % on {env.gpu} for {runs[0].model} ({shapes}); "
                           f"{len(rules)} rule(s)",
            "extends": "default",
            "source": f"nsa-policy bench, {env.measured_utc}, {env.gpu}, torch {env.torch}, flashinfer "
                      f"{env.flashinfer}, sgl-flash-mla {env.sgl_flash_mla}"}
    _dump(out_dir / "bundle.yaml", head)
    stage_file = out_dir / "30-measured.yaml"
    if rules:
        _dump(stage_file, {"stage": "backends", "rules": rules})
    elif stage_file.exists():
        stage_file.unlink()  # a rewrite with no picks must not keep an older run's rules
    _dump(out_dir / "tests" / "measured.yaml",
          {"description": f"the measured shapes ({shapes}) on {env.device}",
           "cases": bundle_tests(runs, chosen, rules)})
    return out_dir, chosen


def _dump(path: Path, doc: dict) -> None:
    path.write_text("# written by nsa-policy bench --write-bundle (docs/bench.md)\n"
                    + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True))
