"""sglang's tp_size defaults to 1, with DP attention too, and sglang asserts tp_size % dp_size == 0 there
(0.5.10-0.5.18 ServerArgs._handle_data_parallelism; 0.5.19+ arg_groups/parallel_hook.py handle_data_parallelism,
reading attn_dp_size from 0.5.22). resolve, lint and launch follow the release instead of assuming tp = dp."""
from __future__ import annotations

import logging

import pytest

import nsa_policy
from nsa_policy.core.facts import ServingConfig, effective_tp_size
from nsa_policy.engines.sglang.launch import plan_launch
from nsa_policy.lint import LintOptions, lint_paths

DS = "deepseek-ai/DeepSeek-V3.2"
DP8 = {"dp_size": 8, "enable_dp_attention": True}
QUIET = logging.getLogger("nsa_policy.tests.tp_default")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())

# The assert each release's own code makes, as its compatibility bundle quotes it.
ASSERTS = {"sglang-0.5.10": "assert self.tp_size % self.dp_size == 0",
           "sglang-0.5.18": "assert self.tp_size % self.dp_size == 0",
           "sglang-0.5.19": "assert cfg.tp_size % cfg.dp_size == 0",
           "sglang-0.5.21": "assert cfg.tp_size % cfg.dp_size == 0",
           "sglang-0.5.23": "assert cfg.tp_size % cfg.attn_dp_size == 0"}


def test_an_unset_tp_is_1_with_dp_attention_too() -> None:
    assert effective_tp_size(ServingConfig(**DP8)) == 1
    assert effective_tp_size(ServingConfig(tp_size=8, **DP8)) == 8


def _errors(config: dict, policy: str) -> list:
    d = nsa_policy.resolve(config, device="h200", model=DS, policy=policy, env={}, raise_on_error=False)
    return [f for f in d.errors if f.code == "NSA003"]


def test_default_refuses_dp_without_tp_and_suggests_tp() -> None:
    (f,) = _errors(DP8, "default")
    assert "tp_size is unset" in f.message and "dp_size 8" in f.message
    assert f.alternatives[0] == "tp_size 8"
    assert not _errors({"tp_size": 8, **DP8}, "default")


@pytest.mark.parametrize("policy", sorted(ASSERTS))
def test_each_release_refuses_with_its_own_assert(policy: str) -> None:
    (f,) = _errors(DP8, policy)
    assert ASSERTS[policy] in f.message and "tp_size 1" in f.message
    (g,) = _errors({"tp_size": 8, "dp_size": 3, "enable_dp_attention": True}, policy)
    assert ASSERTS[policy] in g.message and "tp_size 8" in g.message
    assert not _errors({"tp_size": 16, **DP8}, policy)


def test_dp_replicas_without_dp_attention_are_not_asserted() -> None:
    assert not _errors({"dp_size": 8}, "sglang-0.5.23")


def test_lint_refuses_the_launch(tmp_path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(f"python -m sglang.launch_server --model-path {DS} --dp-size 8 --enable-dp-attention\n")
    report = lint_paths([str(script)], LintOptions(device="h200"))
    assert [d.code for d in report.diagnostics if d.level == "error"] == ["NSA003"]
    script.write_text(f"python -m sglang.launch_server --model-path {DS} --tp-size 8 --dp-size 8 --enable-dp-attention\n")
    report = lint_paths([str(script)], LintOptions(device="h200"))
    assert not [d for d in report.diagnostics if d.code == "NSA003"]


def test_launch_refuses_the_command() -> None:
    with pytest.raises(nsa_policy.PolicyError) as exc:
        plan_launch(["python", "-m", "sglang.launch_server", "--model-path", DS, "--dp-size", "8",
                     "--enable-dp-attention"], device="b200", env={}, sglang_version="0.5.23", logger=QUIET)
    assert [f.code for f in exc.value.decision.errors] == ["NSA003"]
    ok = plan_launch(["python", "-m", "sglang.launch_server", "--model-path", DS, "--tp-size", "8", "--dp-size", "8",
                      "--enable-dp-attention"], device="b200", env={}, sglang_version="0.5.23", logger=QUIET)
    assert ok.decision.heads_per_rank == 128


def test_dp_replicas_beside_attn_dp_are_refused_as_sglang_does() -> None:
    """0.5.22+: beside --attn-dp-size > 1, --dp-size counts replicas (--enable-dp-attention adds nothing),
    and handle_data_parallelism refuses replicas with attention DP; --dp-size 1 beside it is accepted."""
    from nsa_policy.base.errors import InputError
    from nsa_policy.engines.sglang.config import config_from

    for given in ({"dp_size": 2, "attn_dp_size": 4}, {"dp_size": 8, "enable_dp_attention": True, "attn_dp_size": 8}):
        with pytest.raises(InputError) as err:
            config_from({"tp_size": 8, **given})
        assert "attn_dp_size" in str(err.value) and "replicas" in str(err.value)
    cfg = config_from({"tp_size": 16, "dp_size": 1, "enable_dp_attention": True, "attn_dp_size": 16})
    assert (cfg.dp_size, cfg.enable_dp_attention) == (16, True)
    assert config_from({"tp_size": 8, "attn_dp_size": 8}).dp_size == 8
