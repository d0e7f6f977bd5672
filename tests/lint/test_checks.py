"""Checks on one launch: what runs without a device or model, device inference, lint-only codes."""
from __future__ import annotations

import textwrap

from nsa_policy.lint import LintOptions, lint_paths
from nsa_policy.lint.launch_checks import skipped_codes

from .helpers import findings


def lint_text(tmp_path, name: str, text: str, **opts):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return lint_paths([str(p)], LintOptions(**opts))


DS = "deepseek-ai/DeepSeek-V3.2"


def test_without_a_device_device_free_checks_still_run(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", f"""\
        export SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=131072
        python -m sglang.launch_server --model-path {DS} --kv-cache-dtype fp8 --tp 8 --tp 4 --kv-cach-dtype x
        python -m sglang.launch_server --model-path {DS} --nsa-decode-backend flashmla_kvv --nsa-prefill-backend trtllm
        python -m sglang.launch_server --model-path {DS} --nsa-prefill-backend trtllm --page-size 16
        """)
    # NSA202 comes from the fourth launch only (input errors stop the first two evaluations) and
    # is reported once at the export line; the page size needs a device (NSA105 is named as skipped).
    assert findings(r) == [("NSA001", 2), ("NSA002", 3), ("NSA202", 1), ("NSA401", 2), ("NSA403", 2),
                           ("NSA405", 2), ("NSA405", 3), ("NSA405", 4)]
    note = next(d for d in r.diagnostics if d.code == "NSA405")
    for code in ("NSA101", "NSA103", "NSA105"):  # what a device would have checked is named
        assert code in note.message
    assert "did you mean 'flashmla_kv'" in next(d for d in r.diagnostics if d.code == "NSA002").message


def test_device_option_overrides_the_file(tmp_path) -> None:
    text = f"""\
        # nsa-policy: device=b200
        python -m sglang.launch_server --model-path {DS} --nsa-prefill-backend trtllm --kv-cache-dtype fp8_e4m3
        """
    assert findings(lint_text(tmp_path, "run.sh", text)) == []
    r = lint_text(tmp_path, "run.sh", text, device="h200")
    assert findings(r) == [("NSA101", 2), ("NSA103", 2)]  # trtllm cannot run on sm90; decode falls to flashmla_kv


def test_skipped_codes_follow_the_rules_reads() -> None:
    device = skipped_codes("default", device=True, model=False)
    model = skipped_codes("default", device=False, model=True)
    assert "NSA101" in device and "NSA202" not in device and "NSA001" not in device and "NSA010" not in device
    assert "NSA201" in model and "NSA010" in model and "NSA202" not in model and "NSA002" not in model


def test_unknown_model_skips_model_checks_but_keeps_the_rest(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", """\
        # nsa-policy: device=b200
        python -m sglang.launch_server --model-path /models/my-finetune --dense-attn-kv-len-threshold 4096 \\
          --nsa-decode-backend trtllm --kv-cache-dtype fp8_e4m3 --page-size 32
        """)
    assert findings(r) == [("NSA105", 3), ("NSA408", 2)]  # page size needs no model; NSA201 (above top-k) does
    note = next(d for d in r.diagnostics if d.code == "NSA408")
    assert "'/models/my-finetune' is not in the model catalog" in note.message and "NSA201" in note.message


def test_model_found_from_a_local_path_basename_or_a_hint(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", """\
        # nsa-policy: device=h200
        python -m sglang.launch_server --model-path /mnt/weights/DeepSeek-V3.2 --dense-attn-kv-len-threshold 4096
        """)
    assert findings(r) == [("NSA201", 2)]
    r = lint_text(tmp_path, "run.sh", """\
        # nsa-policy: device=h200 model=zai-org/GLM-5
        python -m sglang.launch_server --model-path /mnt/w --dense-attn-kv-len-threshold 4096
        """)
    assert findings(r) == [("NSA201", 2)]


def test_non_dsa_model_with_dsa_flags(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", """\
        python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 \\
          --enable-hisparse
        """)
    assert findings(r) == [("NSA009", 1), ("NSA010", 2), ("NSA405", 1)]


def test_every_device_of_an_affinity_is_checked(tmp_path) -> None:
    r = lint_text(tmp_path, "dep.yaml", f"""\
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions:
                    - {{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-B200, NVIDIA-H100-80GB-HBM3]}}
        containers:
          - command: [python3, -m, sglang.launch_server, --model-path, {DS}, --nsa-prefill-backend, trtllm,
                      --kv-cache-dtype, fp8_e4m3]
        """)
    [d] = [d for d in r.diagnostics if d.code == "NSA101"]  # fine on the B200, not on the H100
    assert d.loc.line == 8 and "sm90" in d.message and "device h100 from affinity" in d.message


def test_gpu_labels_map_to_catalog_devices(tmp_path) -> None:
    from nsa_policy.lint.launch_checks import Checker
    from nsa_policy.lint.launch_checks import LintOptions as O

    c = Checker(O())
    for label, name in [("NVIDIA-H100-80GB-HBM3", "h100"), ("NVIDIA-GeForce-RTX-5090", "rtx-5090"),
                        ("nvidia-h200-141gb", "h200"), ("NVIDIA-B300-SXM6-AC", "b300"), ("b200", "b200"), ("sm120", "sm120")]:
        assert c.device_for(label).name == name, label
    assert c.device_for("Tesla-T4") is None


def test_hints_that_name_nothing_known(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", f"""\
        # nsa-policy: device=h2000 colour=blue policy=sglang-0.5.1
        python -m sglang.launch_server --model-path {DS}
        """)
    assert findings(r) == [("NSA405", 2), ("NSA407", 1), ("NSA407", 1), ("NSA407", 1)]
    msgs = " | ".join(d.message for d in r.diagnostics if d.code == "NSA407")
    assert "'h2000'" in msgs and "colour=blue" in msgs and "'sglang-0.5.1'" in msgs
    assert ("h200",) in [d.alternatives for d in r.diagnostics]


def test_policy_hint_selects_a_compat_bundle(tmp_path) -> None:
    text = f"""\
        # nsa-policy: device=rtx-pro-6000 {{}}
        python -m sglang.launch_server --model-path {DS}
        """
    # no threshold set: nothing to say on sm120, where a threshold would be inert (NSA203 needs one set)
    assert findings(lint_text(tmp_path, "run.sh", text.format(""))) == []
    r = lint_text(tmp_path, "run.sh", text.format("policy=sglang-0.5.10"))
    assert ("NSA301", 2) in findings(r)  # sglang 0.5.10 picks trtllm on sm120


def test_bad_values_and_unresolved_variables(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", f"""\
        # nsa-policy: device=h200
        python -m sglang.launch_server --model-path {DS} --tp-size eight --page-size 0 \\
          --kv-cache-dtype $KV --enable-dp-attention maybe --nsa-prefill-backend
        """)
    assert findings(r) == [("NSA406", 2), ("NSA406", 2), ("NSA406", 3), ("NSA409", 3)]
    msgs = sorted(d.message for d in r.diagnostics)
    assert any("--tp-size 'eight': expected an integer" in m for m in msgs)
    assert any("--page-size '0' is not valid" in m for m in msgs)
    assert any("--nsa-prefill-backend" in m and "needs a value" in m for m in msgs)
    assert any("depends on KV" in m for m in msgs)


def test_far_unknown_flags_are_left_alone(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", f"""\
        # nsa-policy: device=h200
        python -m sglang.launch_server --model-path {DS} --tp 8 --dp 8 --enable-dp-attention \\
          --enable-some-future-feature --speculative-moe-runner-backend auto --tokenizer-worker-num 4
        """)
    assert findings(r) == []


def test_identical_duplicates_are_not_conflicts(tmp_path) -> None:
    r = lint_text(tmp_path, "run.sh", f"""\
        # nsa-policy: device=h200
        python -m sglang.launch_server --model-path {DS} --tp 8 --tp-size 8 --dp 8 --enable-dp-attention
        """)
    assert findings(r) == []


def test_kubernetes_annotations_name_the_device(tmp_path) -> None:
    r = lint_text(tmp_path, "dep.yaml", f"""\
        metadata:
          annotations:
            nsa-policy/device: h200
        spec:
          containers:
            - command: [python3, -m, sglang.launch_server, --model-path, {DS}, --nsa-decode-backend, flashmla_auto]
        ---
        metadata:
          annotations:
            nsa-policy: "device=b200 model={DS}"
        spec:
          containers:
            - args: [--model-path, /weights, --kv-cache-dtype, fp8_e4m3, --nsa-decode-backend, flashmla_auto]
        """)
    assert findings(r) == [("NSA101", 6), ("NSA101", 13), ("NSA208", 6)]  # each document has its own device
    errors = [d for d in r.diagnostics if d.code == "NSA101"]
    assert [("sm90" in d.message, "sm100" in d.message) for d in errors] == [(True, False), (False, True)]


def test_sarif_uses_file_uris_for_absolute_paths(tmp_path) -> None:
    import json

    from nsa_policy.lint.formats import render_sarif

    r = lint_text(tmp_path, "x.env", "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=131072\n")
    res = json.loads(render_sarif(r))["runs"][0]["results"]
    assert {x["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for x in res} == {(tmp_path / "x.env").as_uri()}
