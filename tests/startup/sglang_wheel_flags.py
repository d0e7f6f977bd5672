"""sglang's CLI flags read statically from a released wheel (the zip is read as text; nothing is imported or run).

Handles both ways sglang declares arguments: `parser.add_argument(...)` calls (server_args.py up to
0.5.13, and the remaining manual ones later) and annotated dataclass fields `name: A[T, Arg(...)]` /
`A[T, "help"]` (server_args.py from 0.5.14, arg_groups/fields/*.py from 0.5.20), whose flag is
`--name-with-dashes` plus `aliases`, skipped when `no_cli=True`. Choices given as module constants
are resolved when they are literal lists/tuples (or sums of them).
"""
from __future__ import annotations

import ast
import zipfile
from pathlib import Path


def consts(tree, env):
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = lit(node.value, env)
            if v is not None:
                env[node.targets[0].id] = v
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            v = lit(node.value, env)
            if v is not None:
                env[node.target.id] = v

def lit(node, env):
    try:
        return ast.literal_eval(node)
    except Exception:
        pass
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.Attribute):
        return env.get(node.attr)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = lit(node.left, env), lit(node.right, env)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return list(a) + list(b)
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                v = lit(e.value, env)
                if v is None:
                    return None
                out += list(v)
            else:
                v = lit(e, env)
                if v is None:
                    return None
                out.append(v)
        return out
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("list", "tuple", "sorted") and node.args):
        v = lit(node.args[0], env)
        return list(v) if v is not None else None
    return None

def kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None

def wheel_flags(wheel: Path) -> dict:
    """{"flags": {flag: {dest, choices, action}}, "env": {threshold variable: declaration}} of one wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n == "sglang/srt/server_args.py"
                 or (n.startswith("sglang/srt/arg_groups/") and n.endswith(".py"))]
        trees = {}
        for n in sorted(names):
            try:
                trees[n] = ast.parse(zf.read(n).decode("utf-8"))
            except SyntaxError:
                continue
        environ = zf.read("sglang/srt/environ.py").decode("utf-8") if "sglang/srt/environ.py" in zf.namelist() else ""
    env: dict = {}
    for _ in range(2):
        for t in trees.values():
            consts(t, env)
    flags: dict = {}
    for f, t in trees.items():
        for node in ast.walk(t):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if not names or not names[0].startswith("--"):
                    continue
                dest = kw(node, "dest")
                dest = dest.value if isinstance(dest, ast.Constant) else names[0][2:].replace("-", "_")
                ch = kw(node, "choices")
                act = kw(node, "action")
                actn = act.value if isinstance(act, ast.Constant) else (ast.unparse(act) if act is not None else None)
                for n in names:
                    flags[n] = {"dest": dest, "choices": lit(ch, env) if ch is not None else None, "action": actn, "file": f}
            if isinstance(node, ast.ClassDef):
                for st in node.body:
                    if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                        continue
                    ann = st.annotation
                    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
                        continue
                    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
                    if len(elts) < 2:
                        continue
                    meta = elts[1]
                    name = st.target.id
                    typ = ast.unparse(elts[0])
                    if isinstance(meta, ast.Constant):
                        cli = "--" + name.replace("_", "-")
                        choices = None
                        if "Literal[" in typ:
                            sub = elts[0]
                            for n2 in ast.walk(sub):
                                if isinstance(n2, ast.Subscript) and ast.unparse(n2.value) == "Literal":
                                    choices = (lit(n2.slice, env) if not isinstance(n2.slice, ast.Tuple)
                                               else [lit(e, env) for e in n2.slice.elts])
                        flags[cli] = {"dest": name, "choices": choices, "action": None, "type": typ, "file": f}
                        continue
                    if not (isinstance(meta, ast.Call) and ast.unparse(meta.func) == "Arg"):
                        continue
                    nc = kw(meta, "no_cli")
                    if nc is not None and isinstance(nc, ast.Constant) and nc.value:
                        continue
                    cn = kw(meta, "cli_name")
                    cli = cn.value if cn is not None else "--" + name.replace("_", "-")
                    al = lit(kw(meta, "aliases"), env) if kw(meta, "aliases") is not None else []
                    ch = kw(meta, "choices")
                    choices = lit(ch, env) if ch is not None else None
                    if choices is None and "Literal[" in typ:
                        for n2 in ast.walk(elts[0]):
                            if isinstance(n2, ast.Subscript) and ast.unparse(n2.value) == "Literal":
                                choices = ([lit(e, env) for e in n2.slice.elts] if isinstance(n2.slice, ast.Tuple)
                                           else [lit(n2.slice, env)])
                    act = kw(meta, "action")
                    for n in [cli] + list(al or []):
                        flags[n] = {"dest": name, "choices": choices,
                                    "action": ast.unparse(act) if act is not None else None, "type": typ, "file": f}
    envs = {}
    if environ:
        for node in ast.walk(ast.parse(environ)):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None \
                    and "DENSE_ATTN" in node.target.id:
                envs[node.target.id] = ast.unparse(node.value)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and "DENSE_ATTN" in node.targets[0].id:
                envs[node.targets[0].id] = ast.unparse(node.value)
    return {"flags": flags, "env": envs}
