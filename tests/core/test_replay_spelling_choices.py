"""The differential harness reads a flag's value as the release's parser does: a spelling with a list of its own
(--prefill-cp-mode lists in-seq-split only, 0.5.10-0.5.19) refuses a value the argument takes under another name."""
from nsa_policy.engines.sglang.replay import answer


def test_a_spellings_own_choices_refuse_as_argparse_does() -> None:
    item = {"model": "ds32", "device": "sm90", "env": {}}
    refused = answer("0.5.19", {**item, "argv": ["--enable-prefill-context-parallel", "--prefill-cp-mode", "round-robin-split"]})
    assert refused["ok"] is False and refused["codes"] == [
        "argparse: --prefill-cp-mode round-robin-split not a choice of sglang 0.5.19"]
    listed = answer("0.5.19", {**item, "argv": ["--enable-prefill-context-parallel", "--prefill-cp-mode", "in-seq-split",
                                                "--tp-size", "8"]})
    assert not any(c.startswith("argparse:") for c in listed["codes"])
