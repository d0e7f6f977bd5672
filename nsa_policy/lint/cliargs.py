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
            if unresolved is not None and not text.startswith("-"):
                args.append(Arg(text, None, loc, "unseen", unresolved))  # "$@", an unset $EXTRA: may hold flags
            continue  # positional words, short options
        if "=" in text:
            flag, _, value = text.partition("=")
            if reg.get(flag) is None and (abbr := _abbreviation(reg, flag)) is not None:
                flag = "--" + abbr.name
            args.append(Arg(flag, value, loc, "flag", unresolved))
            continue
        info = reg.get(text)
        if info is None:
            info = _abbreviation(reg, text)
            if info is not None:  # argparse reads a unique prefix of a long option as that option
                text = "--" + info.name
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


def _abbreviation(reg, flag: str):
    """The argument a unique prefix stands for, as argparse (allow_abbrev) reads it, when that argument
    bears on DSA. A prefix of two arguments lint knows is left alone (argparse: ambiguous option)."""
    name = flag[2:].replace("_", "-")
    if len(name) < 3:
        return None
    hits = {info.canonical: info for key, info in reg.known.items() if key.startswith(name)}
    if len(hits) != 1:
        return None
    info = reg.known[min(k for k in reg.known if k.startswith(name))]
    return info if info.field else None
