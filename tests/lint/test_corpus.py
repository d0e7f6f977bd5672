"""The corpus: real-looking files seeded with known mistakes, and clean twins.

Every expected finding is listed with its code and exact line, and nothing else may appear.
"""
from __future__ import annotations

import json

import pytest

from nsa_policy.lint import lint_paths

from .helpers import CORPUS, findings, run_lint

BAD = CORPUS / "bad"
CLEAN = CORPUS / "clean"

EXPECTED = {
    # H200 launch: trtllm prefill does not run on sm90; a misspelt flag; --tp and --tp-size disagree;
    # the removed 128k override exported before the launch.
    "scripts/serve_h200.sh": [("NSA202", 5), ("NSA101", 10), ("NSA401", 11), ("NSA403", 12)],
    # B200: fp8 with trtllm on one side only; old --nsa-* spelling in a file that uses --dsa-*;
    # 16 heads per rank padded to 128; second launch: a backend misspelt with a dash.
    "scripts/serve_b200.sh": [("NSA205", 9), ("NSA103", 11), ("NSA402", 12), ("NSA002", 17)],
    # RTX PRO 6000 (nodeSelector): no bf16 sparse kernel on sm120 (prefill and decode); the 128k
    # override in env, which is also inert on sm120.
    "k8s/deployment.yaml": [("NSA106", 25), ("NSA106", 25), ("NSA202", 31), ("NSA203", 31)],
    # H200 (comment): flashmla_auto as decode; HiSparse without --disable-radix-cache and with a
    # non-HiSparse backend; a misspelt key; head padding on both sides.
    "helm/values.yaml": [("NSA205", 8), ("NSA205", 8), ("NSA101", 10), ("NSA107", 10), ("NSA401", 11), ("NSA104", 12)],
    # H100 (comment), sglang 0.5.12 image: tilelang + fp8 on CUDA; page size 32; head padding; a
    # threshold variable that is not an integer. --nsa-* is 0.5.12's own spelling: no spelling finding.
    "compose/docker-compose.yaml": [("NSA205", 8), ("NSA101", 10), ("NSA105", 11), ("NSA406", 13)],
    # DeepSeek-V3 (not DSA) with a DSA backend flag; no device known.
    "docker/Dockerfile": [("NSA009", 5), ("NSA405", 5), ("NSA010", 7)],
    # Bad KV dtype; tp 4 not a multiple of dp 3; tp-size and tp_size disagree.
    "config/server.toml": [("NSA001", 7), ("NSA003", 8), ("NSA403", 8)],
    # A misspelt backend (closest suggested) and a misspelt key.
    "config/sglang.json": [("NSA002", 5), ("NSA401", 6)],
    # The 128k override under the old name in an env file that targets sglang 0.5.13, which ignores
    # that name (NSA411); evaluated as absent, so no verdict on the value (NSA202); no device, no model.
    "env/sglang.env": [("NSA405", 3), ("NSA408", 3), ("NSA411", 3)],
    # The release pitfalls (issue 10). sglang 0.5.23 image: the old threshold variable is not read
    # (and its 4096 gets no "kept as given"), --enable-dp-attention deprecated, --nsa-* refused.
    "release/Dockerfile": [("NSA411", 4), ("NSA412", 7), ("NSA410", 8)],
    # pip pin 0.5.13: --nsa-* deprecated; flashinfer_sparse_mla not listed yet (both flags);
    # nsa-policy's own threshold flag is no sglang flag (and is inert on sm120: NSA203).
    "release/serve_0513.sh": [("NSA412", 7), ("NSA413", 7), ("NSA413", 8), ("NSA203", 9), ("NSA410", 9)],
    # 0.5.20 image: the pre-0.5.14 prefill CP flags are removed.
    "release/deployment-cp.yaml": [("NSA410", 19), ("NSA410", 20)],
    # 0.5.16 (hint comment): the same CP flags are deprecated aliases of --enable-prefill-cp/--cp-strategy.
    "release/compose-cp.yaml": [("NSA412", 9), ("NSA412", 10)],
    # 0.5.21 pinned in the requirements.txt beside the script: --attn-dp-size comes in 0.5.22.
    "pinned/serve.sh": [("NSA410", 6)],
    # 0.5.21 (hint comment) does not read the old threshold variable at all.
    "release/sglang.env": [("NSA405", 3), ("NSA408", 3), ("NSA411", 3)],
    # MI300X (no dense MHA one-shot) with a threshold carried over from an H200 launcher: inert. Its
    # clean twin sets none and gets no NSA203 (a threshold left unset is not worth a note).
    "rocm/serve_mi300x.sh": [("NSA203", 5)],
    # 0.5.15 pin: a misspelt decode backend; the list offers 0.5.15's decode choices only.
    "release/serve_0515.sh": [("NSA002", 7)],
    # 0.5.23 pin: a misspelt decode backend; prefill-only backends are not offered for decode.
    "release/serve_0523.sh": [("NSA002", 7)],
    # RTX PRO 6000 on the 0.5.15 image with bf16 KV: no backend 0.5.15 lists runs there (triton_sparse_mla
    # comes in 0.5.22, flashinfer_sparse_mla in 0.5.17), so neither is offered.
    "release/deployment-0515-rtx.yaml": [("NSA106", 20), ("NSA106", 20)],
    "broken/values.yaml": [("NSA404", 4)],
    "broken/config.json": [("NSA404", 4)],
}


@pytest.fixture(scope="module")
def bad_report():
    return lint_paths([str(BAD)])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_seeded_mistake_found_at_its_line(bad_report, name: str) -> None:
    assert findings(bad_report, BAD / name) == sorted(EXPECTED[name])


def test_nothing_unexpected_in_the_bad_corpus(bad_report) -> None:
    files = {str(BAD / name) for name in EXPECTED}
    assert {d.loc.path for d in bad_report.diagnostics} == files
    assert bad_report.files_scanned == len(EXPECTED)


def test_messages_carry_the_fix(bad_report) -> None:
    by = {(d.loc.path.split("bad/")[-1], d.code): d for d in bad_report.diagnostics}
    assert "did you mean '--mem-fraction-static'" in by[("scripts/serve_h200.sh", "NSA401")].message
    assert "did you mean 'flashmla_kv'" in by[("scripts/serve_b200.sh", "NSA002")].message
    assert by[("helm/values.yaml", "NSA101")].alternatives == ("flashmla_kv",)
    assert "line 8" in by[("scripts/serve_h200.sh", "NSA403")].message
    assert "--dsa-decode-backend" in by[("scripts/serve_b200.sh", "NSA402")].message
    assert "NSA101" in by[("docker/Dockerfile", "NSA405")].message  # names the checks it skipped


def test_columns_point_at_the_flag(bad_report) -> None:
    d = next(d for d in bad_report.diagnostics if d.code == "NSA101" and d.loc.path.endswith("serve_h200.sh"))
    line = (BAD / "scripts/serve_h200.sh").read_text().splitlines()[d.loc.line - 1]
    assert line[d.loc.col - 1:].startswith("--nsa-prefill-backend trtllm")
    d = next(d for d in bad_report.diagnostics if d.code == "NSA101" and d.loc.path.endswith("docker-compose.yaml"))
    line = (BAD / "compose/docker-compose.yaml").read_text().splitlines()[d.loc.line - 1]
    assert line[d.loc.col - 1:].startswith("--nsa-decode-backend tilelang")
    d = next(d for d in bad_report.diagnostics if d.code == "NSA010")
    line = (BAD / "docker/Dockerfile").read_text().splitlines()[d.loc.line - 1]
    assert line[d.loc.col - 1:].startswith('"--nsa-decode-backend"')


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if not n.startswith("broken/")))
def test_clean_twin_exits_zero(name: str) -> None:
    result = run_lint(str(CLEAN / name))
    assert result.exit_code == 0, result.output
    assert "0 error(s), 0 warning(s)" in result.output


def test_clean_corpus_has_no_errors_or_warnings() -> None:
    report = lint_paths([str(CLEAN)])
    assert [d for d in report.diagnostics if d.level != "info"] == []
    assert report.launches == 20


def test_unparsable_file_does_not_stop_the_run() -> None:
    result = run_lint("--format", "json", str(BAD / "broken"), str(BAD / "config" / "sglang.json"))
    assert result.exit_code == 1
    out = json.loads(result.output)
    codes = sorted((d["path"].split("bad/")[-1], d["code"]) for d in out["diagnostics"])
    assert codes == [("broken/config.json", "NSA404"), ("broken/values.yaml", "NSA404"),
                     ("config/sglang.json", "NSA002"), ("config/sglang.json", "NSA401")]


def test_release_findings_say_how_the_release_was_inferred(bad_report) -> None:
    by = {(d.loc.path.split("bad/")[-1], d.code, d.loc.line): d for d in bad_report.diagnostics}
    assert "sglang 0.5.23 from image tag lmsysorg/sglang:v0.5.23-cu129 at line 2" in \
        by[("release/Dockerfile", "NSA410", 8)].message
    assert "the server will not start" in by[("release/Dockerfile", "NSA410", 8)].message
    assert by[("release/Dockerfile", "NSA410", 8)].alternatives == ("--dsa-decode-backend",)
    assert "sglang 0.5.13 from pin sglang==0.5.13 at line 4" in by[("release/serve_0513.sh", "NSA413", 8)].message
    assert "from hint comment 'nsa-policy: sglang=0.5.16' at line 1" in by[("release/compose-cp.yaml", "NSA412", 9)].message
    assert by[("release/compose-cp.yaml", "NSA412", 9)].alternatives == ("--enable-prefill-cp",)
    pinned = by[("pinned/serve.sh", "NSA410", 6)].message
    assert "sglang 0.5.21 from pin sglang==0.5.21 in " in pinned and "requirements.txt at line 3" in pinned
    assert by[("release/sglang.env", "NSA411", 3)].alternatives == ("SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD",)
    # a variable the release ignores is never reported as a threshold "kept as given" / "from env"
    for d in bad_report.diagnostics:
        if d.loc.path.endswith(("release/Dockerfile", "release/sglang.env", "env/sglang.env")):
            assert "kept as given" not in d.message and "from env" not in d.message


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith(("release/", "pinned/"))))
def test_the_same_launch_for_a_release_that_accepts_it_has_no_release_finding(name: str) -> None:
    report = lint_paths([str(CLEAN / name)])
    assert [d for d in report.diagnostics if d.code in ("NSA410", "NSA411", "NSA412", "NSA413", "NSA414")] == []


def _by(report) -> dict:
    return {(d.loc.path.split("bad/")[-1], d.code, d.loc.line): d for d in report.diagnostics}


def test_nsa203_only_where_a_threshold_was_set(bad_report) -> None:
    d = _by(bad_report)[("rocm/serve_mi300x.sh", "NSA203", 5)]
    assert "threshold 1024 (from env) has no effect" in d.message
    assert "--dense-attn-kv-len-threshold" in d.fix and "can be removed" not in d.fix
    assert [d.code for d in lint_paths([str(CLEAN / "rocm")]).diagnostics] == []  # the same launch, none set
    # every NSA203 of the corpus sits on a threshold the file sets (a flag or a variable)
    for path, code, line in _by(bad_report):
        if code == "NSA203":
            assert "THRESHOLD" in (BAD / path).read_text().splitlines()[line - 1].upper(), (path, line)


def test_nsa412_fix_says_what_to_write(bad_report) -> None:
    by = _by(bad_report)
    d = by[("release/Dockerfile", "NSA412", 7)]
    # sglang 0.5.22's parser: --enable-dp-attention -> "--attn-dp-size <dp-size>", filled from this launch's --dp 8
    assert d.alternatives == ("--attn-dp-size 8",)
    assert d.fix == "Write --attn-dp-size 8 in place of --dp 8 --enable-dp-attention."
    for d in bad_report.diagnostics:
        if d.code == "NSA412":
            assert d.alternatives and d.alternatives[0] in d.fix, d


def _catalog_phases_and_choices(release: str, phase: str) -> set[str]:
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    return {b for b in cat.backend_names if phase in cat.backends[b].phases and cat.sglang_lists(b, phase, release)}


def test_alternatives_follow_the_target_release_and_the_phase(bad_report) -> None:
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    by = _by(bad_report)
    # 0.5.15: exactly the decode backends 0.5.15 lists for decode (none it lacks, none prefill-only)
    d15 = by[("release/serve_0515.sh", "NSA002", 7)]
    assert set(d15.alternatives) == _catalog_phases_and_choices("0.5.15", "decode")
    assert "triton_sparse_mla" not in d15.alternatives and "flashinfer_sparse_mla" not in d15.alternatives
    # 0.5.23: prefill-only backends (catalog phases) are not offered for decode, though 0.5.23 knows them
    d23 = by[("release/serve_0523.sh", "NSA002", 7)]
    prefill_only = {b for b in cat.backend_names if cat.backends[b].phases == ["prefill"]}
    assert {"flashmla_sparse_q8", "triton_sparse_mla", "flashmla_auto"} <= prefill_only
    assert not prefill_only & set(d23.alternatives)
    assert set(d23.alternatives) == _catalog_phases_and_choices("0.5.23", "decode")
    assert "did you mean 'flashmla_sparse_q8'" not in d23.message
    # sm120 with bf16 on 0.5.15: triton_sparse_mla (0.5.22+) and fp8's flashinfer_sparse_mla (0.5.17+) are not offered
    for d in (by[k] for k in by if k[0] == "release/deployment-0515-rtx.yaml"):
        assert d.alternatives == () and "triton_sparse_mla" not in d.message
        assert "none that sglang 0.5.15 accepts" in d.message
    # the same manifest on 0.5.22 with fp8 KV is clean (triton_sparse_mla / flashinfer_sparse_mla exist there)
    assert [d.code for d in lint_paths([str(CLEAN / "release/deployment-0515-rtx.yaml")]).diagnostics] == []
