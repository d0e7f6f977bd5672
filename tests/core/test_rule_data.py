"""Rule tests as data (docs/rule-tests.md): the file format, its file:line errors, and `nsa-policy test`
on a site bundle in a tmp folder that extends default."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy.base.errors import RuleFileError
from nsa_policy.base.paths import policy_dir
from nsa_policy.core.bundle import compile_bundle
from nsa_policy.verify.rule_tests import bundle_test_files, load_test_file, plan

SITE_RULES = """\
stage: kv_cache
rules:
  - id: kv.hopper-bf16
    description: This site serves fp8 KV on Hopper too.
    when: {device.class: sm90}
    set: {kv_cache_dtype: fp8_e4m3}
"""
SITE_TESTS = """\
description: the site's own cases
cases:
  - name: h200-fp8-by-site-rule
    input: {device: h200, model: deepseek-ai/DeepSeek-V3.2}
    expect: {kv_cache_dtype: fp8_e4m3, prefill_backend: flashmla_kv, decode_backend: flashmla_kv, rules: [kv.hopper-bf16]}
  - name: b200-unchanged
    input: {device: b200, model: deepseek-ai/DeepSeek-V3.2}
    expect: {kv_cache_dtype: fp8_e4m3, prefill_backend: trtllm, rejected: false}
  - name: h200-page-size-1-rejected
    input: {device: h200, model: deepseek-ai/DeepSeek-V3.2, page_size: 1}
    expect: {rejected: true, errors: [NSA105], absent_codes: [NSA204]}
"""


def site(tmp_path: Path, tests: dict[str, str] | None = None, name: str = "site") -> Path:
    """A site bundle beside nothing else: extends the shipped default, with its own tests folder."""
    folder = tmp_path / name
    (folder / "tests").mkdir(parents=True)
    (folder / "bundle.yaml").write_text(f"name: {name}\ndescription: a site bundle\nextends: default\n")
    (folder / "20-kv-cache.yaml").write_text(SITE_RULES)
    for fname, text in (tests if tests is not None else {"site.yaml": SITE_TESTS}).items():
        (folder / "tests" / fname).write_text(text)
    return folder


def cli(*args: str):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, ["test", *args])


def test_site_bundle_runs_its_own_cases_only(tmp_path: Path) -> None:
    folder = site(tmp_path)
    result = cli("--policy", str(folder))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines == ["site: 3 passed, 0 failed", "ok: 3 passed, 0 failed"]  # default's own cases are not inherited


def test_a_failing_case_prints_expected_and_got_and_exits_1(tmp_path: Path) -> None:
    folder = site(tmp_path, {"site.yaml": SITE_TESTS + """\
  - name: h200-still-bf16
    input: {device: h200, model: deepseek-ai/DeepSeek-V3.2}
    expect: {kv_cache_dtype: bfloat16, decode_backend: fa3}
"""})
    result = cli("--policy", str(folder))
    assert result.exit_code == 1, result.output
    [fail] = [ln for ln in result.stdout.splitlines() if ln.startswith("FAIL ")]
    assert fail == (f"FAIL {folder / 'tests' / 'site.yaml'}:12 h200-still-bf16 [site]: "
                    "kv_cache_dtype: expected 'bfloat16', got 'fp8_e4m3'; decode_backend: expected 'fa3', got 'flashmla_kv'")
    assert result.stdout.splitlines()[-1] == "FAILED: 3 passed, 1 failed"


def test_json_is_one_object_with_each_case(tmp_path: Path) -> None:
    folder = site(tmp_path, {"site.yaml": SITE_TESTS.replace("errors: [NSA105]", "warnings: [NSA204]")})
    result = cli("--policy", str(folder), "--json", "--coverage")
    assert result.exit_code == 1
    [line] = [ln for ln in result.stdout.splitlines() if ln.strip()]
    report = json.loads(line)
    assert (report["ok"], report["passed"], report["failed"]) == (False, 2, 1)
    [run] = report["runs"]
    assert run["bundle"] == "site" and run["tests_of"] == "site"
    bad = [c for c in run["cases"] if not c["ok"]]
    assert [c["name"] for c in bad] == ["h200-page-size-1-rejected"]
    assert bad[0]["problems"] == ["warnings: expected NSA204; got none"]
    assert "kv.hopper-bf16" not in report["not_fired"]["site"]
    assert "kv.rocm-bf16" in report["not_fired"]["site"]


def test_rule_and_code_expectations_say_why(tmp_path: Path) -> None:
    folder = site(tmp_path, {"site.yaml": """\
cases:
  - name: h200
    input: {device: h200, model: deepseek-ai/DeepSeek-V3.2}
    expect: {rules: [kv.blackwell-fp8, kv.hoper-bf16], codes: [NSA203], absent_codes: [NSA203]}
  - name: mi300x
    input: {device: mi355x, model: deepseek-ai/DeepSeek-V3.2, kv_cache_dtype: fp8_e4m3, dense_attn_kv_len_threshold: 1024}
    expect: {absent_codes: [NSA203]}
"""})
    report = json.loads(cli("--policy", str(folder), "--json").stdout)
    first, second = report["runs"][0]["cases"]
    assert first["problems"][0] == "codes: expected NSA203; got none"
    assert first["problems"][1].startswith("rules: expected kv.blackwell-fp8 to fire; got ")
    assert "sm90" in first["problems"][1]  # the trace's reason it did not match
    assert first["problems"][2] == "rules: 'kv.hoper-bf16' is not a rule of policy 'site'; did you mean 'kv.hopper-bf16'?"
    assert second["problems"] == ["absent_codes: NSA203 was emitted (rule "
                                  + _rule_of("NSA203", "mi355x") + ")"]


def _rule_of(code: str, device: str) -> str:
    from nsa_policy import build_facts, decide

    d = decide(build_facts({"kv_cache_dtype": "fp8_e4m3", "dense_attn_kv_len_threshold": 1024}, device=device,
                           model="deepseek-ai/DeepSeek-V3.2", env={}))  # NSA203 needs a threshold set
    return next(f.rule for f in d.findings if f.code == code)


def test_extra_case_files_run_against_the_bundle(tmp_path: Path, repo: Path) -> None:
    folder = site(tmp_path)
    extra = tmp_path / "more.yaml"
    extra.write_text("cases:\n  - name: b300\n    input: {device: b300, model: deepseek-ai/DeepSeek-V3.2}\n"
                     "    expect: {decode_backend: trtllm}\n")
    result = cli("--policy", str(folder), "--cases", str(extra))
    assert result.exit_code == 0, result.output
    assert f"site (--cases {extra}): 1 passed, 0 failed" in result.stdout.splitlines()
    # a contract case file (with its `policy:` header) runs against the bundle under test
    contract = cli("--policy", "default", "--cases", str(repo / "tests" / "cases" / "default.yaml"))
    assert contract.exit_code == 0, contract.output
    assert contract.stdout.splitlines()[-1].startswith("ok: ")


def test_an_abstract_bundle_s_cases_run_against_its_heirs(tmp_path: Path) -> None:
    (tmp_path / "mybase" / "tests").mkdir(parents=True)
    (tmp_path / "mybase" / "bundle.yaml").write_text("name: mybase\ndescription: d\nextends: default\nabstract: true\n")
    (tmp_path / "mybase" / "tests" / "t.yaml").write_text(
        "cases:\n  - name: h200\n    input: {device: h200, model: deepseek-ai/DeepSeek-V3.2}\n"
        "    expect: {kv_cache_dtype: bfloat16}\n")
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bundle.yaml").write_text(f"name: {name}\ndescription: d\nextends: mybase\n")
    (tmp_path / "other").mkdir()  # beside it, but not an heir
    (tmp_path / "other" / "bundle.yaml").write_text("name: other\ndescription: d\nextends: default\n")
    runs = plan(str(tmp_path / "mybase"))
    assert [(r.bundle, r.tests_of) for r in runs] == [("one", "mybase"), ("two", "mybase")]
    result = cli("--policy", str(tmp_path / "mybase"))
    assert result.exit_code == 0, result.output
    assert "one (tests of mybase): 1 passed, 0 failed" in result.stdout
    # testing an heir runs the cases of the abstract bundle beside it that it extends, then its own
    (tmp_path / "one" / "tests").mkdir()
    (tmp_path / "one" / "tests" / "t.yaml").write_text(
        "cases:\n  - name: b200\n    input: {device: b200, model: deepseek-ai/DeepSeek-V3.2}\n"
        "    expect: {kv_cache_dtype: fp8_e4m3}\n")
    assert [(r.bundle, r.tests_of, len(r.cases)) for r in plan(str(tmp_path / "one"))] == [("one", "mybase", 1),
                                                                                          ("one", "one", 1)]
    # …but not those of a concrete parent, nor of an abstract one elsewhere (the shipped base)
    assert [r.tests_of for r in plan(str(tmp_path / "other"), [str(tmp_path / "one" / "tests")])] == ["--cases"]


def test_the_tests_folder_is_not_read_as_rules(tmp_path: Path) -> None:
    folder = site(tmp_path, {})
    before = compile_bundle(str(folder))
    (folder / "tests" / "site.yaml").write_text(SITE_TESTS)
    after = compile_bundle(str(folder))
    assert before.digest == after.digest and before.files == after.files
    assert all("/tests/" not in f for f in after.files)
    assert bundle_test_files(policy_dir() / "default")  # the shipped bundles carry theirs


@pytest.mark.parametrize(("text", "line", "message"), [
    ("cases:\n  - name: a\n    input: {device: h200\n", 4, "not valid YAML"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expcet: {page_size: 64}\n", 4, "unknown key 'expcet'"),
    ("cases:\n  - name: a\n    input: {device: h200}\n", 2, "missing key 'expect'"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect: {}\n", 4, "cases.0.expect"),
    ("cases: []\n", 1, "cases"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect:\n      page_size: 64\n      prefil_backend: fa3\n", 6,
     "expect.prefil_backend: unknown key; did you mean 'prefill_backend'?"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect: {errors: [NSA1O1]}\n", 4,
     "expect.errors: unknown code 'NSA1O1'; did you mean 'NSA101'?"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect:\n      errors: [NSA204]\n", 5,
     "expect.errors: NSA204 is a warning-level code; list it under `warnings`"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect: {rejected: yes please}\n", 4,
     "expect.rejected: true or false"),
    ("cases:\n  - name: a\n    input: {device: h200}\n    expect: {decode_backend: flashmla_kvv}\n", 4,
     "unknown backend 'flashmla_kvv'; did you mean 'flashmla_kv'?"),
    (("cases:\n  - name: a\n    input: {device: h200}\n    expect: {page_size: 64}\n"
      "  - name: a\n    input: {device: b200}\n    expect: {page_size: 64}\n"), 5, "case name 'a' already used at line 2"),
])
def test_a_malformed_test_file_is_reported_at_file_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(RuleFileError) as info:
        load_test_file(path)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert message in str(info.value)
    # and the command says so in one line, exit 2
    folder = site(tmp_path, {"t.yaml": text})
    result = cli("--policy", str(folder))
    assert result.exit_code == 2
    assert result.stdout == ""
    [err] = result.stderr.splitlines()
    assert err.startswith(f"nsa-policy: error: {folder / 'tests' / 't.yaml'}:{line}: ") and message in err


def test_unusable_case_input_names_the_case_the_field_and_the_valid_values(tmp_path: Path) -> None:
    folder = site(tmp_path, {"site.yaml": "cases:\n  - name: typo\n    input: {device: h2000, model: zai-org/GLM-5}\n"
                                          "    expect: {page_size: 64}\n"})
    result = cli("--policy", str(folder), "--json")
    assert result.exit_code == 2
    err = json.loads(result.stdout)["error"]
    assert (err["kind"], err["line"]) == ("RuleFileError", 2)
    assert "case 'typo': input device: 'h2000' is not valid" in err["message"] and "did you mean 'h200'?" in err["message"]
    assert "valid: " in err["message"]


@pytest.mark.parametrize(("args", "field"), [
    (["--policy", "defualt"], "--policy: 'defualt' is not valid"),
    (["--cases", "x.yaml"], "--cases needs --policy"),
    (["--policy", "default", "--cases", "no-such.yaml"], "--cases: 'no-such.yaml' is not valid (no such file or folder)"),
])
def test_bad_usage_exits_2_with_one_line(args: list[str], field: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    [err] = result.stderr.splitlines()
    assert field in err and "valid" in err


def test_a_bundle_without_tests_is_an_error(tmp_path: Path) -> None:
    folder = site(tmp_path, {})
    result = cli("--policy", str(folder))
    assert result.exit_code == 2
    assert "has no *.yaml test files, and no --cases were given" in result.stderr


def test_every_shipped_bundle_passes_its_own_tests() -> None:
    result = cli()
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("ok: ") and last.endswith(" passed, 0 failed")


def test_a_shipped_name_means_the_shipped_bundle_even_beside_a_local_folder_of_that_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A local copy of default (it cannot extend `default`: beside itself that name is itself) with the
    # site's Hopper fp8 rule and the site's case file.
    import shutil

    local_dir = tmp_path / "default"
    shutil.copytree(policy_dir() / "default", local_dir)
    shutil.rmtree(local_dir / "tests")
    (local_dir / "tests").mkdir()
    (local_dir / "tests" / "site.yaml").write_text(SITE_TESTS)
    kv = (local_dir / "20-kv-cache.yaml").read_text()
    # the Hopper rule's own line (default's first bf16 rule is now kv.learnable-sink-bf16)
    hopper = "when: {device.class: sm90}\n    set: {kv_cache_dtype: bfloat16}"
    hopper_fp8 = kv.replace(hopper, hopper.replace("bfloat16", "fp8_e4m3"), 1)
    assert hopper_fp8 != kv
    (local_dir / "20-kv-cache.yaml").write_text(hopper_fp8)
    monkeypatch.chdir(tmp_path)
    shipped = plan("default")
    assert [(r.tests_of, r.files) for r in shipped][-1] == (
        "default", tuple(f"rules/policy/default/tests/{p.name}" for p in bundle_test_files(policy_dir() / "default")))
    [local] = plan("./default")
    assert local.files == ("default/tests/site.yaml",)  # shown as given
    assert local.policy == str((tmp_path / "default").resolve())  # what get_bundle must take to mean the folder
    assert [c.name for c in local.cases] == ["h200-fp8-by-site-rule", "b200-unchanged", "h200-page-size-1-rejected"]
    result = cli("--policy", "./default")
    assert result.exit_code == 0, result.output  # the site's rule (fp8 on Hopper) ran, not the shipped default
    assert result.stdout.splitlines()[-1] == "ok: 3 passed, 0 failed"
