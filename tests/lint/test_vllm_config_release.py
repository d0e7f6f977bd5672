"""vLLM `--config` YAML files (read by lint and launch, as files of their own and through `vllm serve
--config FILE`; the command line wins) and the vLLM release a launch targets (hint comment, image tag,
pin, --vllm-version, the installed package); an unknown release is one line naming the field and value."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from nsa_policy.base.errors import InputError
from nsa_policy.cli import app
from nsa_policy.engines.vllm.launch import plan_vllm_launch
from nsa_policy.engines.vllm.lint import vllm_release
from nsa_policy.lint import lint_paths

from .helpers import findings

DSV32 = "deepseek-ai/DeepSeek-V3.2"
CONFIG = f"""# nsa-policy: device=h200
model: {DSV32}
tensor-parallel-size: 8
attention_backend: FLASH_ATTN_MLA_SPARSE
decode-context-parallel-size: 2
"""


def test_a_vllm_config_file_is_a_launch_checked_at_its_keys(tmp_path):
    (tmp_path / "serve.yaml").write_text(CONFIG)
    report = lint_paths([str(tmp_path)])
    assert report.launches == 1
    assert findings(report) == [("NSA150", 4)]  # FA3 refuses DCP, at the attention_backend key


def test_a_yaml_that_only_names_a_model_is_no_launch(tmp_path):
    (tmp_path / "models.yaml").write_text(f"model: {DSV32}\nowner: me\n")
    assert lint_paths([str(tmp_path)]).launches == 0


def test_serve_config_is_merged_and_the_command_line_wins(tmp_path):
    (tmp_path / "serve.yaml").write_text(CONFIG.replace("# nsa-policy: device=h200\n", ""))
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n# nsa-policy: device=h200\nvllm serve --config serve.yaml --attention-backend auto\n")
    report = lint_paths([str(script)])
    # FA3 from the file is overridden; DCP 2 from the file stays: auto picks FlashMLA with fp8_ds_mla
    assert findings(report, script) == [("NSA250", 3)]
    (tmp_path / "serve.yaml").write_text(CONFIG.replace("tensor-parallel-size: 8", "tensor-parallel-size: 2")
                                         .replace("attention_backend: FLASH_ATTN_MLA_SPARSE", "kv-cache-dtype: fp8"))
    # tp2 dcp2: 64 heads per rank, where FlashMLA raises at start-up (vllm-default refuses it)
    assert ("NSA153", 2) in findings(lint_paths([str(tmp_path / "serve.yaml")]))


def test_an_unreadable_serve_config_is_reported_at_the_flag(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n# nsa-policy: device=h200\nvllm serve {DSV32} --config missing.yaml\n")
    assert ("NSA406", 3) in findings(lint_paths([str(script)]), script)


def test_release_from_comment_tag_and_pin(tmp_path):
    old = tmp_path / "old.sh"
    old.write_text("#!/bin/sh\n# nsa-policy: device=b200 vllm=0.13.0\nexport VLLM_ATTENTION_BACKEND=FLASHMLA_SPARSE\n"
                   f"vllm serve {DSV32} -tp 8\n")
    assert ("NSA252", 3) not in findings(lint_paths([str(old)]), old)  # 0.13 still reads it
    new = tmp_path / "Dockerfile"
    new.write_text("FROM vllm/vllm-openai:v0.33.0\n# nsa-policy: device=b200\nENV VLLM_ATTENTION_BACKEND=FLASHMLA_SPARSE\n"
                   f'ENTRYPOINT ["vllm", "serve"]\nCMD ["{DSV32}", "-tp", "8"]\n')
    report = lint_paths([str(new)])
    (msg,) = [d.message for d in report.diagnostics if d.code == "NSA252"]
    assert "vLLM 0.33.0 from image tag vllm/vllm-openai:v0.33.0 at line 1" in msg
    pinned = tmp_path / "pinned.sh"
    pinned.write_text("#!/bin/sh\n# nsa-policy: device=b200\npip install vllm==0.13.0\n"
                      f"VLLM_ATTENTION_BACKEND=FLASHMLA_SPARSE vllm serve {DSV32} -tp 8\n")
    assert not [d for d in lint_paths([str(pinned)]).diagnostics if d.code == "NSA252"]


def test_an_unknown_release_is_one_line(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\n# nsa-policy: device=b200 vllm=0.99.0\nvllm serve {DSV32} -tp 8\n")
    (d,) = [d for d in lint_paths([str(script)]).diagnostics if d.code == "NSA407"]
    assert "vllm: '0.99.0' is not valid" in d.message and "0.11.0 … 0.33.x" in d.message and "\n" not in d.message
    with pytest.raises(InputError, match=r"--vllm-version: 'x1' is not valid \(not a release number; valid: vLLM"):
        vllm_release("x1", "--vllm-version")
    assert vllm_release("0.33.1", "--vllm-version") == "0.33.1"


def test_launch_reads_the_config_file_and_the_release(tmp_path):
    (tmp_path / "serve.yaml").write_text(f"model: {DSV32}\ntensor-parallel-size: 8\nkv-cache-dtype: fp8\n")
    plan = plan_vllm_launch(["vllm", "serve", "--config", "serve.yaml"], device="h200", cwd=str(tmp_path),
                            vllm_version="0.33.0")
    assert plan.added_flags == ["--attention-backend FLASHMLA_SPARSE", "--block-size 64"]  # fp8 kept, from the file
    assert plan.release == "0.33.0" and "--vllm-version" in plan.release_why
    older = plan_vllm_launch(["vllm", "serve", DSV32], device="b200", vllm_version="0.32.0")
    assert "--attention-backend" not in " ".join(older.argv) and older.notes  # no known 0.32 spelling: said
    with pytest.raises(InputError, match="--config: "):
        plan_vllm_launch(["vllm", "serve", "--config", "nope.yaml"], device="h200", cwd=str(tmp_path))


def test_launch_cli_unknown_release_is_a_usage_error():
    result = CliRunner().invoke(app, ["launch", "--dry-run", "--device", "b200", "--vllm-version", "0.99", "--",
                                      "vllm", "serve", DSV32])
    assert result.exit_code == 2
    assert "--vllm-version: '0.99' is not valid" in result.output
