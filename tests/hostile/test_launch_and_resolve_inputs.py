"""Hostile input to launch, resolve and startup.apply: abbreviations, two spellings of one argument,
writes that fail half-way, and --package values."""
from __future__ import annotations

import argparse
import logging

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError
from nsa_policy.engines.sglang.launch import parse_command, plan_launch
from nsa_policy.engines.sglang.startup import apply

DS = "deepseek-ai/DeepSeek-V3.2"
SERVER = ["python", "-m", "sglang.launch_server", "--model-path", DS]
QUIET = logging.getLogger("nsa_policy.tests.hostile")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())
CLEAN = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None, "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None}


def cli(*args: str):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, list(args), env=CLEAN)


@pytest.mark.parametrize("argv", [["--kv-cache-dt", "fp8_e4m3"], ["--nsa-prefill", "trtllm"], ["--kv-cache-dt=bf16"]])
def test_launch_never_overrides_a_value_given_as_an_abbreviation(argv) -> None:
    with pytest.raises(InputError) as exc:
        plan_launch(SERVER + argv, device="b200", env={}, sglang_version="0.5.10", logger=QUIET)
    assert exc.value.field == argv[0].partition("=")[0] and exc.value.valid
    result = cli("launch", "--dry-run", "--device", "b200", "--sglang-version", "0.5.10", "--", *SERVER, *argv)
    assert result.exit_code == 2 and "write the flag in full" in result.stderr and result.stdout == ""


def test_two_spellings_of_one_argument_with_different_values_are_refused_everywhere() -> None:
    with pytest.raises(InputError) as exc:
        parse_command(SERVER + ["--nsa-prefill-backend", "trtllm", "--dsa-prefill-backend", "flashmla_sparse"])
    assert exc.value.field == "--dsa-prefill-backend" and "--nsa-prefill-backend trtllm" in str(exc.value)
    same = parse_command(SERVER + ["--nsa-prefill-backend", "trtllm", "--dsa-prefill-backend", "trtllm"])
    assert same.values["dsa_prefill_backend"] == "trtllm"
    bad = cli("resolve", "--device", "b200", "--model", DS, "--dsa-prefill-backend", "flashmla_sparse",
              "--nsa-prefill-backend", "trtllm")
    assert bad.exit_code == 2 and "--nsa-prefill-backend" in bad.stderr and "--dsa-prefill-backend" in bad.stderr
    with pytest.raises(InputError):
        apply({"model_path": DS, "nsa_prefill_backend": "trtllm", "dsa_prefill_backend": "flashmla_sparse"},
              device="b200", env={}, logger=QUIET)


def test_resolve_provenance_names_the_flag_as_given() -> None:
    import json

    for flag in ("--dsa-prefill-backend", "--nsa-prefill-backend"):
        out = cli("resolve", "--json", "--device", "b200", "--model", DS, flag, "trtllm")
        assert json.loads(out.stdout)["provenance"]["prefill_backend"]["detail"] == flag


class _ReadOnlyPage(argparse.Namespace):
    """A server-args object whose page_size cannot be written (a property without a setter)."""

    @property
    def page_size(self):  # noqa: D401
        return None


def test_apply_writes_everything_or_nothing() -> None:
    args = _ReadOnlyPage(model_path=DS, kv_cache_dtype="auto", nsa_prefill_backend=None, nsa_decode_backend=None)
    env: dict[str, str] = {}
    with pytest.raises(InputError) as exc:
        apply(args, device="h200", env=env, logger=QUIET, sglang_version="0.5.10")
    assert "page_size" in exc.value.field
    assert (args.kv_cache_dtype, args.nsa_prefill_backend, args.nsa_decode_backend) == ("auto", None, None)
    assert env == {}


@pytest.mark.parametrize("item, message", [
    ("flashinfer=0.6.7", "not a package the policy reads"),
    ("flashinfer-python=0.6.x", "not a PEP 440 version"),
    ("flashinfer-python", "expected NAME=VERSION"),
    ("flashinfer-python=", "expected NAME=VERSION"),
])
def test_package_values_are_checked(item, message) -> None:
    result = cli("resolve", "--device", "b200", "--model", DS, "--package", item)
    assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output


def test_package_names_and_pins_as_pip_writes_them() -> None:
    from nsa_policy.commands.resolve import parse_packages

    assert parse_packages(["FlashInfer_Python==0.6.7.post2", "sgl.kernel=0.3.21"]) == {
        "flashinfer-python": "0.6.7.post2", "sgl-kernel": "0.3.21"}
    with pytest.raises(InputError):
        parse_packages(["flashinfer-python=0.6.7", "flashinfer_python=0.6.8"])
