"""Turn the words after `sglang.launch_server` into arguments: `--flag value`, `--flag=value`, bare flags."""
from __future__ import annotations

from typing import Iterable, Optional

from nsa_policy.engines.sglang.flags import load_flags
from nsa_policy.lint.report import Arg, Location

Token = tuple[str, Location, Optional[str]]  # text, where, unresolved variable


def parse_cli(tokens: Iterable[Token]) -> list[Arg]:
    reg = load_flags()
    toks = list(tokens)
    args: list[Arg] = []
    i = 0
    while i < len(toks):
        text, loc, unresolved = toks[i]
        i += 1
        if not text.startswith("--") or len(text) == 2:
            continue  # positional words, short options
        if "=" in text:
            flag, _, value = text.partition("=")
            args.append(Arg(flag, value, loc, "flag", unresolved))
            continue
        info = reg.get(text)
        nxt = toks[i] if i < len(toks) else None
        if info is not None and not info.takes_value:
            args.append(Arg(text, True, loc, "flag"))
            continue
        if nxt is not None and not (nxt[0].startswith("--") and len(nxt[0]) > 2):
            args.append(Arg(text, nxt[0], loc, "flag", nxt[2]))
            i += 1
        else:
            args.append(Arg(text, True if info is None else None, loc, "flag"))
    return args
