"""Parse server argv lists with one sglang release's real parser.

Runs INSIDE a release's side environment (driven by scripts/sglang_oracle/run.py):

    echo '["--model-path", "m", "--dsa-prefill-backend", "trtllm"]' | \
      PYTHONPATH=/work/sgenv/pkgs/0.5.23:/work/sgenv/stubs /work/sgenv/venv-t5.19/bin/python \
      scripts/sglang_oracle/parse_argv.py

stdin: JSON lines, each an argv list (what follows `python -m sglang.launch_server` / `sglang serve`)
or an object {"id": ..., "argv": [...]}. stdout: one JSON line per input, in order:

    {"id", "release", "accepted", "exit_code", "error", "messages", "values"}

`accepted` is whether `parser.parse_args(argv)` returned, exactly as `prepare_server_args` calls it
(same parser, argparse's own abbreviation matching, `--config` merging); `error` is argparse's
"error:" text, or "ValueError: …" when `--config` merging refuses a key (exit code 1); `messages`
are the warnings logged while parsing (Deprecated*Action); `values` are
the parsed DSA-relevant fields (every dest in the namespace that the release has, see DESTS).
"""
from __future__ import annotations

import json
import logging
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _inrelease import build_parser, captured_stderr, jsonable, merge_config, quiet_imports, release  # noqa: E402

DESTS = ("model_path", "kv_cache_dtype", "page_size", "tp_size", "dp_size", "enable_dp_attention", "attn_dp_size",
         "attention_backend", "prefill_attention_backend", "decode_attention_backend", "dcp_size", "attn_cp_size",
         "enable_hisparse", "disable_radix_cache", "quantization", "ep_size", "moe_dense_tp_size",
         "enable_prefill_cp", "cp_strategy", "enable_prefill_context_parallel", "prefill_cp_mode",
         "speculative_algorithm", "speculative_eagle_topk", "enable_two_batch_overlap", "disaggregation_mode")
DEST_PREFIXES = ("nsa_", "dsa_", "enable_nsa_", "enable_dsa_")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(_ANSI.sub("", record.getMessage()))


def _values(ns) -> dict:
    out = {}
    for dest, value in sorted(vars(ns).items()):
        if dest in DESTS or dest.startswith(DEST_PREFIXES):
            out[dest] = jsonable(value)
    return out


def parse_one(parser, argv: list[str]) -> dict:
    handler = _Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    logging.disable(logging.NOTSET)
    try:
        with captured_stderr() as err:
            merge_error = None
            try:
                ns = parser.parse_args(merge_config(parser, list(argv)))
                code, accepted = 0, True
            except SystemExit as e:
                ns, code, accepted = None, e.code if isinstance(e.code, int) else 1, False
            except ValueError as e:  # --config merging refuses a key (prepare_server_args raises; the server exits 1)
                ns, code, accepted, merge_error = None, 1, False, f"ValueError: {e}"
    finally:
        root.removeHandler(handler)
        logging.disable(logging.CRITICAL)
    text = err.getvalue()
    error = merge_error
    if not accepted and error is None:
        lines = [ln for ln in text.splitlines() if ": error: " in ln]
        error = lines[-1].split(": error: ", 1)[1] if lines else text.strip()[-500:]
    return {"accepted": accepted, "exit_code": code, "error": error, "messages": handler.messages,
            "values": _values(ns) if ns is not None else {}}


def main() -> None:
    quiet_imports()
    parser = build_parser()
    rel = release()
    for n, line in enumerate(sys.stdin):
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        ident, argv = (item.get("id", n), item["argv"]) if isinstance(item, dict) else (n, item)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            result = {"accepted": False, "exit_code": None, "error": f"input {n}: argv must be a list of strings",
                      "messages": [], "values": {}}
        else:
            result = parse_one(parser, argv)
        sys.stdout.write(json.dumps({"id": ident, "release": rel, **result}, sort_keys=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
