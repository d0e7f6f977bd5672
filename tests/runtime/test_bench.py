"""`nsa-policy bench` without a GPU: parsing, the no-GPU refusal, ranking, the report, and the site bundle
written from the committed H200 measurements (benchmarks/results/bench_h200/), checked by `test` and
`check`; and the commands docs/bench.md shows."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from nsa_policy import InputError
from nsa_policy.cli import app
from nsa_policy.runtime import bench_report as rep

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "bench_h200"
TP8, DP8 = RESULTS / "h200-tp8.json", RESULTS / "h200-tp8-dp8.json"
# the first full call: 16M-token pools, where fa3's output disagreed with the reference at every point
DISAGREES = RESULTS / "pool16m_call2" / "h200-tp8.json"


def _cli(args, cwd=None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(app, args)
    with runner.isolated_filesystem(temp_dir=cwd):
        return runner.invoke(app, args)


def _one_error_line(result) -> str:
    lines = [x for x in result.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("nsa-policy: error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    return errors[0]


# ---------------------------------------------------------------- parsing
def test_sizes_parse_k_and_m_sorted_distinct():
    assert rep.parse_sizes("--context", "128k,4k,32k,4k") == [4096, 32768, 131072]
    assert rep.parse_sizes("--pool-tokens", "1m", lo=1 << 16, hi=1 << 25) == [1 << 20]
    assert rep.parse_kv_dtypes("fp8,bf16") == ["bfloat16", "fp8_e4m3"]


@pytest.mark.parametrize("args, field", [
    (["--batch", "1,x"], "--batch"),
    (["--context", "0"], "--context"),
    (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype"),
    (["--phase", "verify"], "--phase"),
    (["--threshold", "-0.5"], "--threshold"),
    (["--pool-tokens", "1k"], "--pool-tokens"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2(args, field):
    result = _cli(["bench", "--model", "deepseek-ai/DeepSeek-V3.2", *args])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert field in line and "not valid" in line


def test_bad_kv_dtype_names_the_valid_ones():
    with pytest.raises(InputError) as exc:
        rep.parse_kv_dtypes("fp8_e5m2")
    assert exc.value.valid == ["bfloat16", "fp8_e4m3"]


# ---------------------------------------------------------------- refusing without a GPU
def test_no_gpu_refused_in_one_line_exit_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    result = _cli(["bench", "--model", "deepseek-ai/DeepSeek-V3.2", "--tp-size", "8"])
    assert result.exit_code == 2
    line = _one_error_line(result)
    assert "CUDA GPU" in line and "--from-json" in line


def test_no_torch_refused_in_one_line_exit_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    result = _cli(["bench", "--model", "deepseek-ai/DeepSeek-V3.2"])
    assert result.exit_code == 2
    assert "needs torch" in _one_error_line(result)


def test_policy_path_does_not_import_torch():
    code = ("import sys, nsa_policy.cli, nsa_policy.commands.bench, nsa_policy.runtime.bench_report; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- the recorded H200 runs
@pytest.fixture(scope="module")
def tp8():
    return rep.load_run(TP8)


@pytest.fixture(scope="module")
def dp8():
    return rep.load_run(DP8)


def test_recorded_runs_are_the_h200_shapes(tp8, dp8):
    assert (tp8.environment.gpu, tp8.environment.device_class) == ("NVIDIA H200", "sm90")
    assert (tp8.heads_per_rank, dp8.heads_per_rank) == (16, 128)  # 128 heads / TP 8; attention DP: all 128
    names = {(t.kv_cache_dtype, t.backend) for p in tp8.points for t in p.timings}
    assert names == {("bfloat16", "flashmla_sparse"), ("bfloat16", "fa3"), ("fp8_e4m3", "flashmla_kv")}
    assert all(t.agrees for p in tp8.points + dp8.points for t in p.timings)


def test_rank_names_fastest_policy_and_gap(dp8):
    ranked = {(r.phase, r.kv_cache_dtype, r.context, r.size): r for r in rep.rank(dp8)}
    point = next(p for p in dp8.points if (p.phase, p.context, p.size) == ("decode", 32768, 512))
    fa3, fm = point.timing("fa3", "bfloat16"), point.timing("flashmla_sparse", "bfloat16")
    assert fa3 is not None and fm is not None and fa3.ms and fm.ms
    r = ranked[("decode", "bfloat16", 32768, 512)]
    want = "fa3" if fa3.ms < fm.ms else "flashmla_sparse"
    assert r.fastest == want and r.policy_backend == "fa3"
    assert r.gap == pytest.approx(fa3.ms / min(fa3.ms, fm.ms) - 1)
    fp8 = ranked[("decode", "fp8_e4m3", 32768, 512)]
    assert fp8.fastest == fp8.policy_backend == "flashmla_kv" and fp8.gap == 0


def test_ranking_excludes_a_backend_whose_output_disagrees():
    run = rep.load_run(DISAGREES)
    bad = [t for p in run.points for t in p.timings if t.backend == "fa3"]
    assert bad and all(not t.agrees and t.rel_error > t.tolerance for t in bad)  # measured, on the H200
    ranked = [r for r in rep.rank(run) if r.kv_cache_dtype == "bfloat16"]
    assert ranked and all(r.fastest == "flashmla_sparse" and "fa3" in r.disagreeing for r in ranked)
    # fa3 is the policy's decode choice there: no gap is claimed against a wrong output
    assert all(r.gap is None for r in ranked if r.phase == "decode")
    # its times were the lowest at some points: a disagreeing backend must not win on speed
    faster = [p for p in run.points if p.timing("fa3", "bfloat16").ms < p.timing("flashmla_sparse", "bfloat16").ms]
    assert faster
    assert not [pk for pk in rep.picks([run], threshold=0.0) if pk.backend == "fa3"]
    md = rep.render_markdown(run)
    assert md.count("DISAGREES") == len(bad)


def test_fa3_pool_limit_lies_where_the_h200_probe_saw_fa3_break():
    """The adapter's fa3 pool limit for flashinfer 0.6.7.post2 against the committed probe: every pool
    within it agreed with the reference on the H200, every pool past it disagreed."""
    from nsa_policy.runtime._flashinfer import fa3_max_pool_rows
    probes = [rep.load_run(p) for p in sorted((RESULTS / "fa3_pool_probe").glob("pool*.json"))]
    assert len(probes) >= 4
    for run in probes:
        limit = fa3_max_pool_rows(run.environment.flashinfer, 576)
        assert limit is not None  # 0.6.7.post2: the 32-bit kernel
        fa3 = [p.timing("fa3", "bfloat16") for p in run.points]
        assert fa3 and all(t is not None and t.rel_error is not None for t in fa3)
        assert all(t.agrees == (run.settings.pool_tokens <= limit) for t in fa3), run.settings.pool_tokens
    sizes = [r.settings.pool_tokens for r in probes]
    assert min(sizes) <= fa3_max_pool_rows("0.6.7.post2", 576) < max(sizes)


def test_bench_over_a_pool_past_fa3s_reach_lists_it_not_measured():
    """Recorded on the H200 (call 9): 512 rows at 32k over a 7,602,176-token pool with flashinfer
    0.6.7.post2. fa3, the policy's decode choice, is listed with the adapter's reason and not timed."""
    from nsa_policy.runtime._flashinfer import fa3_max_pool_rows
    run = rep.load_run(RESULTS / "call9" / "pool7602176-h200-tp8.json")
    limit = fa3_max_pool_rows(run.environment.flashinfer, 576)
    assert limit is not None and run.settings.pool_tokens > limit
    assert not [t for p in run.points for t in p.timings if t.backend == "fa3"]
    why = [e.reason for e in run.excluded if e.backend == "fa3"]
    assert why and f"{limit:,} KV rows" in why[0] and f"got {run.settings.pool_tokens:,}" in why[0]
    [ranked] = rep.rank(run)
    assert (ranked.fastest, ranked.policy_backend, ranked.gap) == ("flashmla_sparse", "fa3", None)
    assert "`fa3` (decode, bfloat16): backend 'fa3' with flashinfer-python 0.6.7.post2" in rep.render_markdown(run)


def test_bench_candidates_give_the_adapter_their_pool(monkeypatch):
    """bench hands the adapter the pool it will time over, so the construction-time check decides:
    fa3 is a candidate up to its reach and listed with the reason past it (stand-in kernels, no GPU)."""
    import types

    import nsa_policy
    pytest.importorskip("torch")
    from nsa_policy.runtime import bench as gpu
    from nsa_policy.runtime._flashinfer import fa3_max_pool_rows

    real = gpu.SparseMLAAdapter.from_decision.__func__
    fi = types.SimpleNamespace(__version__="0.6.7.post2", decode=None,
                               mla=types.SimpleNamespace(BatchMLAPagedAttentionWrapper=lambda *a, **k: None))
    stand_ins = dict(device="cpu", device_class="sm90", flashinfer=fi, flash_mla=types.SimpleNamespace(__version__="1.0.0"),
                     workspace_bytes=1024)
    monkeypatch.setattr(gpu.SparseMLAAdapter, "from_decision",
                        classmethod(lambda cls, d, **kw: real(cls, d, **{**kw, **stand_ins})))
    d = nsa_policy.resolve({"tp_size": 8, "kv_cache_dtype": "bfloat16"}, device="h200", model="deepseek-ai/DeepSeek-V3.2")
    spec = gpu.Spec(model="deepseek-ai/DeepSeek-V3.2", device="h200", tp_size=8, dp_size=None, enable_dp_attention=False,
                    batches=[512], contexts=[32768], prefill_tokens=[], kv_dtypes=["bfloat16"],
                    decisions={"bfloat16": d}, phases=("decode",))
    limit = fa3_max_pool_rows("0.6.7.post2", 576)
    assert limit is not None
    found, _ = gpu.candidates(spec, "sm90", 16, 0.135, limit)
    assert set(found[("decode", "bfloat16")]) == {"fa3", "flashmla_sparse"}
    found, excluded = gpu.candidates(spec, "sm90", 16, 0.135, limit + 1)
    assert set(found[("decode", "bfloat16")]) == {"flashmla_sparse"}
    [why] = [e.reason for e in excluded if e.backend == "fa3"]
    assert f"at most {limit:,} KV rows" in why and f"got {limit + 1:,}" in why


def test_method_comparison_is_the_committed_records_report():
    """benchmarks/results/bench_h200/method.md is bench_method_report.py's output on the committed
    device records (calls 8 and 9), unedited."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_method_report", ROOT / "benchmarks" / "bench_method_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    files = [str(RESULTS / c / "method.jsonl") for c in ("call8", "call9")]
    text = mod.render(files)
    assert text == (RESULTS / "method.md").read_text()
    rows = mod.load(files)
    assert {r["heads"] for r in rows} == {16, 32, 64, 128} and all(r["rel_error"] < 1e-2 for r in rows)


def test_report_has_machine_date_policy_and_kv_capacity(tp8):
    md = rep.render_markdown(tp8)
    env = tp8.environment
    for text in (env.gpu, env.measured_utc, env.torch, env.flashinfer, env.sgl_flash_mla, "16 heads per rank",
                 "prefill `flashmla_sparse`, decode `fa3`", "prefill `flashmla_kv`, decode `flashmla_kv`"):
        assert text in md
    # KV tokens per GiB from the recorded layout widths (the adapter's: 576 bf16 values, 656 bytes)
    assert tp8.kv_bytes_per_token == {"bf16-576": 1152, "fp8-656-blockwise": 656}
    assert f"{(1 << 30) // 1152:,} KV tokens per GiB" in md and f"{(1 << 30) // 656:,} KV tokens per GiB" in md
    rows = [x for x in md.splitlines() if re.match(r"^\| \d+k \| \d+ \|", x)]
    assert len(rows) == len(tp8.points)
    trade = rep.kv_tradeoff(tp8)
    assert len(trade) == len(tp8.points) and all(b > 0 and a > 0 for *_, a, b in trade)
    text = rep.render_text(tp8)
    assert len(text.splitlines()) == 1 + 2 * len(tp8.points)


def test_plot_writes_a_png_or_says_why(tmp_path, tp8, monkeypatch):
    pytest.importorskip("matplotlib")
    one = rep.select(tp8, contexts=[32768])  # fewer panels: the test is about the file, not the figure
    assert rep.plot([one], tmp_path / "a.png") is None
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    hint = rep.plot([one], tmp_path / "b.png")
    assert hint is not None and "matplotlib" in hint and "\n" not in hint and not (tmp_path / "b.png").exists()


def test_select_keeps_the_operator_points(dp8):
    sel = rep.select(dp8, batches=[128, 512], phases=("decode",))
    assert {(p.phase, p.size) for p in sel.points} == {("decode", 128), ("decode", 512)}
    with pytest.raises(InputError):
        rep.select(dp8, batches=[3], phases=("decode",))


# ---------------------------------------------------------------- the site bundle
def test_bundle_at_default_threshold_keeps_default_where_nothing_beats_it(tmp_path, tp8, dp8):
    folder, chosen = rep.write_bundle([tp8, dp8], tmp_path / "site")
    gaps = [r.gap for r in rep.rank(tp8) + rep.rank(dp8) if r.gap is not None]
    assert max(gaps) < rep.DEFAULT_THRESHOLD and chosen == []  # the measured gaps are all under 10 %
    head = yaml.safe_load((folder / "bundle.yaml").read_text())
    assert head["extends"] == "default" and "NVIDIA H200" in head["source"]
    assert not (folder / "30-measured.yaml").exists()
    cases = yaml.safe_load((folder / "tests" / "measured.yaml").read_text())["cases"]
    assert {(c["expect"]["heads_per_rank"], c["expect"]["decode_backend"]) for c in cases} == \
        {(16, "fa3"), (128, "fa3"), (16, "flashmla_kv"), (128, "flashmla_kv")}
    result = _cli(["test", "--policy", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["passed"] == 4


def test_bundle_rule_carries_the_measurement_and_passes_its_tests(tmp_path):
    """(`check` runs on the same bundle, written through the CLI, in test_docs_commands_run.)"""
    # the operator serves decode at 128-512 rows with attention DP: there flashmla_sparse measured faster
    runs = [rep.select(rep.load_run(p), batches=[128, 512], phases=("decode",))
            for p in (DP8, RESULTS / "repeat" / "h200-tp8-dp8.json")]
    folder, chosen = rep.write_bundle(runs, tmp_path / "site", threshold=0.03)
    assert len(chosen) == 1
    pk = chosen[0]
    assert (pk.phase, pk.kv_cache_dtype, pk.backend, pk.policy_backend) == ("decode", "bfloat16", "flashmla_sparse", "fa3")
    ratios = [p.timing("fa3", "bfloat16").ms / p.timing("flashmla_sparse", "bfloat16").ms
              for r in runs for p in r.points]
    assert pk.speedup == pytest.approx(__import__("math").prod(ratios) ** (1 / len(ratios)))
    assert 1.03 < pk.speedup < 1.10
    rule = yaml.safe_load((folder / "30-measured.yaml").read_text())["rules"][0]
    assert rule["when"] == {"device.class": "sm90", "model.id": "deepseek-ai/DeepSeek-V3.2",
                            "derived.heads_per_rank": 128, "out.kv_cache_dtype": "bfloat16"}
    assert rule["before"] == "backends.hopper-bf16" and rule["wins_over"] == ["backends.hopper-bf16"]
    evidence = " ".join(rule["evidence"])
    env = runs[0].environment
    for text in (env.gpu, env.measured_utc, f"torch {env.torch}", f"flashinfer {env.flashinfer}",
                 f"sgl-flash-mla {env.sgl_flash_mla}", f"{runs[0].points[0].timing('fa3', 'bfloat16').ms:.4f} ms"):
        assert text in evidence
    tested = _cli(["test", "--policy", str(folder), "--json"])
    assert tested.exit_code == 0 and json.loads(tested.output)["failed"] == 0, tested.output
    # the bundle answers as measured; TP 8 (16 heads per rank) keeps the default's fa3
    decided = _cli(["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2", "--tp-size", "8",
                    "--dp-size", "8", "--enable-dp-attention", "--policy", str(folder), "--json"])
    assert json.loads(decided.output)["decode_backend"] == "flashmla_sparse"
    tp8 = _cli(["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2", "--tp-size", "8",
                "--policy", str(folder), "--json"])
    assert json.loads(tp8.output)["decode_backend"] == "fa3"


def test_from_json_bad_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"model": 1}')
    result = _cli(["bench", "--from-json", str(bad)])
    assert result.exit_code == 2 and "--from-json" in _one_error_line(result)


# ---------------------------------------------------------------- docs/bench.md's commands
def _doc_commands() -> list[list[str]]:
    """The `nsa-policy` lines of docs/bench.md's ```bash blocks that start `# runs anywhere`; blocks
    marked `<!-- not-run: needs a GPU … -->` are not run (they measure)."""
    text = (ROOT / "docs" / "bench.md").read_text()
    blocks = re.findall(r"(<!-- not-run:[^>]*-->\n)?```bash\n(.*?)```", text, flags=re.S)
    assert blocks and all(b.startswith("# runs anywhere") or "GPU" in marker for marker, b in blocks)
    return [shlex.split(line)[1:] for marker, b in blocks if not marker and b.startswith("# runs anywhere")
            for line in b.splitlines() if line.startswith("nsa-policy ")]


def test_docs_commands_run(tmp_path, monkeypatch):
    commands = _doc_commands()
    assert len(commands) >= 3
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    for args in commands:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    assert (tmp_path / "report" / "report.png").is_file() and "NVIDIA H200" in (tmp_path / "report" / "report.md").read_text()
    # the bundle the docs write has its rule, and `test` and `check` (exit 0 above) passed on it
    assert [c[0] for c in commands].count("check") == 1 and [c[0] for c in commands].count("test") == 1
    rules = yaml.safe_load((tmp_path / "site-h200" / "30-measured.yaml").read_text())["rules"]
    assert [r["set"] for r in rules] == [{"decode_backend": {"first_valid": {"phase": "decode",
                                                                              "candidates": ["flashmla_sparse"]}}}]
