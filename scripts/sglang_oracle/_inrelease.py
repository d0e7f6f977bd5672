"""Shared by the scripts that run INSIDE a release's side environment (stdlib + that sglang only).

Never imported by nsa_policy: these files are executed by `<env python> scripts/sglang_oracle/X.py`,
with PYTHONPATH selecting the release (see build_envs.sh).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import logging
import os
import sys
import warnings
from typing import Any


def release() -> str:
    return importlib.metadata.version("sglang")


def quiet_imports() -> None:
    """sglang logs and warns while importing on a CPU machine; keep stdout for our JSON."""
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


def build_parser() -> argparse.ArgumentParser:
    """The server's parser, built exactly as `prepare_server_args` does it (0.5.10 ... 0.5.23 alike)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--config FILE` merging, as `prepare_server_args` does before parse_args."""
    if "--config" not in argv:
        return argv
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    return ConfigArgumentMerger(parser).merge_config_with_args(argv)


def jsonable(value: Any) -> Any:
    """A stable JSON form of an argparse default/choice/const."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, type):
        return f"<type {value.__module__}.{value.__qualname__}>"
    if callable(value):
        name = getattr(value, "__qualname__", None) or type(value).__qualname__
        return f"<callable {getattr(value, '__module__', '?')}.{name}>"
    if hasattr(value, "value") and hasattr(value, "name"):  # enum member
        return jsonable(value.value)
    return repr(value)


@contextlib.contextmanager
def captured_stderr():
    """argparse writes usage/errors and Deprecated*Action warnings to stderr; collect them."""
    buf = io.StringIO()
    old = sys.stderr
    sys.stderr = buf
    try:
        yield buf
    finally:
        sys.stderr = old


def clean_sglang_env() -> None:
    """Dumps must not depend on the caller's SGLANG_*/SGL_* variables (some defaults read them)."""
    for key in [k for k in os.environ if k.startswith(("SGLANG_", "SGL_"))]:
        del os.environ[key]
