"""Launches in structured files (YAML, JSON, TOML): Kubernetes containers, compose services,
Helm values, sglang config files.

A container-like mapping (`command`/`args`/`entrypoint`) that starts sglang is a launch with its
own `env`/`environment`. A mapping whose keys are sglang server arguments (spelt as flags or as
field names) is a configuration launch. Device hints come from `nodeSelector`/affinity on the
GPU product label, `nsa-policy` annotations or keys, and comments.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from nsa_policy import engines
from nsa_policy.engines.sglang.env import threshold_env_vars
from nsa_policy.engines.sglang.flags import load_flags
from nsa_policy.lint.cliargs import parse_cli
from nsa_policy.lint.confine import OutsideTree, Reader
from nsa_policy.lint.envfile import read_env_file
from nsa_policy.lint.extract_shell import ShellState, launches_in_shell
from nsa_policy.lint.report import OUTSIDE_FIX, Arg, Diagnostic, EnvValue, Hint, Launch, Location, finding
from nsa_policy.lint.shell import Expander, find_launch, launch_from, mentions_launch
from nsa_policy.lint.text import FixedIndex, LineIndex, hint_keys
from nsa_policy.lint.tree import N, scalar_source

GPU_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_LAUNCH_KEYS = ("command", "args", "entrypoint")


class Structured:
    def __init__(self, path: str, text: str, index: LineIndex, base_dir: Optional[str], kind: str,
                 dotenv: Optional[dict[str, EnvValue]] = None, reader: Optional[Reader] = None):
        self.path, self.text, self.index, self.base_dir, self.kind = path, text, index, base_dir, kind
        self.reader = reader if reader is not None else Reader([])
        self.diagnostics: list[Diagnostic] = []
        self.dotenv_vars = {k: v.value for k, v in (dotenv or {}).items()}
        self.reg = load_flags()
        self.consumed: set[int] = set()
        self.bad_hints: list[tuple[str, str, Location]] = []

    def loc(self, n: N) -> Location:
        return Location(self.path, n.line, n.col)

    # --------------------------------------------------------------------------------------
    def document(self, root: N) -> list[Launch]:
        # a compose file: its services are compose services, whatever keys each one uses
        self.compose_doc = root.kind == "map" and root.get("services") is not None and root.get("apiVersion") is None
        hints = self.hints(root)
        launches: list[Launch] = []
        for node in root.walk():
            if node.kind == "map" and id(node) not in self.consumed and any(node.get(k) for k in _LAUNCH_KEYS):
                launches += self.container(node)
        doc_env = self.loose_env(root)
        for node in root.walk():
            if id(node) in self.consumed:
                continue
            if node.kind == "seq":
                la = self.arg_list(node)
                if la:
                    la.env = {**doc_env, **la.env}
                    launches.append(la)
            elif node.kind == "scalar" and isinstance(node.value, str) and mentions_launch(node.value):
                for la in self.shell_scalar(node, ShellState(Expander(self.dotenv_vars), dict(doc_env),
                                                             reader=self.reader, diagnostics=self.diagnostics)):
                    launches.append(la)
            elif node.kind == "map":
                la = self.config(node)
                if la:
                    la.env = {**doc_env, **la.env}
                    launches.append(la)
        if not launches and doc_env:
            first = min(doc_env.values(), key=lambda e: (e.loc.line, e.loc.col))
            launches.append(Launch(self.path, first.loc, "env", env=dict(doc_env)))
        for la in launches:
            la.hints = hints + la.hints
        return launches

    # hints ------------------------------------------------------------------------------------
    def hints(self, root: N) -> list[Hint]:
        out: list[Hint] = []
        for node in root.walk():
            if node.kind != "map":
                continue
            for k, v in node.pairs:
                key = k.value
                if key == "nodeSelector" and v.kind == "map":
                    for lk, lv in v.pairs:
                        if lk.value in GPU_LABELS and lv.kind == "scalar":
                            out.append(Hint("device", str(lv.value), self.loc(lv), f"nodeSelector {lk.value}"))
                elif key == "matchExpressions" and v.kind == "seq":
                    for expr in v.items:
                        lab, vals, op = ((expr.get("key"), expr.get("values"), expr.get("operator"))
                                         if expr.kind == "map" else (None, None, None))
                        if lab is not None and lab.value in GPU_LABELS and vals is not None and vals.kind == "seq" \
                                and (op is None or op.value == "In"):
                            for item in vals.items:
                                out.append(Hint("device", str(item.value), self.loc(item), f"affinity {lab.value}"))
                elif isinstance(key, str) and (key == "nsa-policy" or key.startswith(("nsa-policy/", "nsa-policy.io/"))):
                    out += self._policy_key(key, v)
        return out

    def _policy_key(self, key: str, v: N) -> list[Hint]:
        out: list[Hint] = []
        if "/" in key:
            sub = key.split("/", 1)[1]
            pairs = [(sub, v)]
        elif v.kind == "map":
            pairs = [(str(k.value), val) for k, val in v.pairs]
        elif v.kind == "scalar" and isinstance(v.value, str):
            pairs = []
            for m in re.finditer(r"([A-Za-z_-]+)\s*=\s*([^\s,;]+)", v.value):
                pairs.append((m.group(1), N("scalar", v.line, v.col, value=m.group(2))))
        else:
            pairs = []
        for sub, val in pairs:
            if sub in hint_keys() and val.kind == "scalar":
                out.append(Hint(sub, str(val.value), self.loc(val), "annotation"))
            else:
                self.bad_hints.append((sub, str(val.value), self.loc(val)))
        return out

    # environment -----------------------------------------------------------------------------
    def env_of(self, node: Optional[N], exp: Optional[Expander] = None) -> dict[str, EnvValue]:
        """`env: [{name, value}]` (Kubernetes), `environment: {K: V}` or `["K=V"]` (compose), `{K: V}`."""
        env: dict[str, EnvValue] = {}
        if node is None:
            return env
        if node.kind == "map":
            for k, v in node.pairs:
                if v.kind == "scalar" and v.value is not None:
                    env[str(k.value)] = self._env_value(v.value, self.loc(k), exp)
        elif node.kind == "seq":
            for item in node.items:
                if item.kind == "map":
                    name, value = item.get("name"), item.get("value")
                    if name is not None and value is not None and value.kind == "scalar":
                        env[str(name.value)] = self._env_value(value.value, self.loc(name), exp)
                elif item.kind == "scalar" and isinstance(item.value, str) and "=" in item.value:
                    key, _, val = item.value.partition("=")
                    env[key.strip()] = self._env_value(val, self.loc(item), exp)
        return env

    def _env_value(self, value, loc: Location, exp: Optional[Expander]) -> EnvValue:
        text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        if exp is not None and "$" in text:
            text, missing = exp.expand_plain(text)
            return EnvValue(text, loc, missing)
        return EnvValue(text, loc)

    def env_files(self, node: Optional[N]) -> dict[str, EnvValue]:
        """compose `env_file:` entries, read when they are inside the linted tree (NSA409 otherwise, unread)."""
        env: dict[str, EnvValue] = {}
        if node is None or self.base_dir is None:
            return env
        items = node.items if node.kind == "seq" else [node]
        for it in items:
            target = it.get("path") if it.kind == "map" else it
            if target is None or not isinstance(target.value, str):
                continue
            full = os.path.normpath(os.path.join(self.base_dir, target.value))
            try:
                env.update(read_env_file(full, _display(full, self.path), self.reader, shown=target.value))
            except OutsideTree:
                self.diagnostics.append(finding(
                    "NSA409", f"env_file {target.value!r} is outside the linted tree: lint never reads it; the "
                              f"variables it sets are unknown here", self.loc(target), OUTSIDE_FIX))
        return env

    def loose_env(self, root: N) -> dict[str, EnvValue]:
        """Threshold variables anywhere in the document outside containers (Helm values, config files)."""
        env: dict[str, EnvValue] = {}
        for node in root.walk():
            if node.kind != "map" or id(node) in self.consumed:
                continue
            for k, v in node.pairs:
                if k.value in threshold_env_vars() and v.kind == "scalar":
                    env[k.value] = self._env_value(v.value, self.loc(k), None)
            name, value = node.get("name"), node.get("value")
            if name is not None and name.value in threshold_env_vars() and value is not None and value.kind == "scalar":
                env[name.value] = self._env_value(value.value, self.loc(name), None)
            for k, v in node.pairs:
                if k.value in ("env", "environment", "extraEnv") and v.kind == "seq":
                    for item in v.items:
                        if item.kind == "scalar" and isinstance(item.value, str) and "=" in item.value:
                            key, _, val = item.value.partition("=")
                            if key.strip() in threshold_env_vars():
                                env[key.strip()] = EnvValue(val, self.loc(item))
        return env

    # launches ---------------------------------------------------------------------------------
    def container(self, node: N) -> list[Launch]:
        parts = [node.get("entrypoint"), node.get("command"), node.get("args")]
        image_engine = self._image_server(node)
        if image_engine is None and not any(p is not None and _mentions(p) for p in parts):
            return []
        file_env = self.env_files(node.get("env_file"))
        exp = Expander({**self.dotenv_vars, **{k: v.value for k, v in file_env.items()}})
        exp.compose = self._kind(node) == "compose"
        env = {**file_env, **self.env_of(node.get("env")), **self.env_of(node.get("environment"), exp)}
        k8s_vars = {k: v.value for k, v in env.items()}
        tokens: list[tuple[str, Location, Optional[str]]] = []
        for part in parts:
            if part is None:
                continue
            self.consumed.add(id(part))
            for sub in part.walk():
                self.consumed.add(id(sub))
            if part.kind == "seq":
                for item in part.items:
                    if item.kind == "scalar" and item.value is not None:
                        tokens.append(self._exec_token(item, k8s_vars, exp))
            elif part.kind == "scalar" and isinstance(part.value, str):
                tokens += self._shell_words(part, exp)
        texts = [t[0] for t in tokens]
        hit = find_launch(texts)
        if hit is None and image_engine is not None and tokens:  # the image's own ENTRYPOINT gets these
            hit = (image_engine, 0)
        if hit is not None:
            engine, start = hit
            return [launch_from(engine, tokens[start:], self.path, tokens[0][1], self._kind(node), env)]
        launches: list[Launch] = []  # sh -c "… sglang.launch_server …"
        for part in parts:
            if part is None:
                continue
            items = part.items if part.kind == "seq" else [part]
            for item in items:
                if item.kind == "scalar" and isinstance(item.value, str) and mentions_launch(item.value):
                    inner = Expander({**exp.vars, **k8s_vars})
                    inner.compose = exp.compose
                    state = ShellState(inner, dict(env), base_dir=self.base_dir, reader=self.reader,
                                       diagnostics=self.diagnostics)
                    launches += self.shell_scalar(item, state, self._kind(node))
        return launches

    def _image_server(self, node: N) -> Optional[str]:
        """The engine whose server is this container image's own ENTRYPOINT, when the container keeps it:
        Kubernetes `args` (no `command`) or compose `command` (no `entrypoint`) are then its arguments."""
        image = node.get("image")
        if image is None or image.kind != "scalar" or not isinstance(image.value, str):
            return None
        if node.get("entrypoint") is not None:
            return None
        owner = next((e.name for e in engines.every() if e.server_image(image.value)), None)
        if owner is None:
            return None
        compose = self._kind(node) == "compose" or any(node.get(k) is not None for k in _COMPOSE_ONLY)
        if compose:
            return owner if node.get("command") is not None else None
        return owner if node.get("command") is None and node.get("args") is not None else None

    def _kind(self, node: N) -> str:
        if self.kind != "yaml":
            return self.kind
        if getattr(self, "compose_doc", False):
            return "compose"
        compose = any(node.get(k) is not None for k in ("environment", "entrypoint", "env_file", "build", "deploy",
                                                        "depends_on"))
        return "compose" if compose else "kubernetes"

    def _exec_token(self, item: N, k8s_vars: dict, exp: Expander) -> tuple[str, Location, Optional[str]]:
        text = str(item.value)
        missing = None
        if "$(" in text:  # Kubernetes expands $(VAR) from the container's env
            def sub(m):
                nonlocal missing
                if m.group(1) in k8s_vars:
                    return k8s_vars[m.group(1)]
                missing = missing or m.group(1)
                return m.group(0)
            text = _K8S_VAR.sub(sub, text)
        if "${" in text or re.search(r"\$[A-Za-z_]", text):  # compose interpolation
            text, miss = exp.expand_plain(text)
            missing = missing or miss
        return text, self.loc(item), missing

    def _shell_words(self, node: N, exp: Expander) -> list[tuple[str, Location, Optional[str]]]:
        from nsa_policy.lint.shell import split_commands

        src = scalar_source(node, self.text)
        index: LineIndex = self.index
        if src is None:  # escapes: the value, placed at the scalar
            src, index = (str(node.value), 0), FixedIndex(str(node.value), self.loc(node))
        chunk, base = src
        out = []
        for words in split_commands(chunk, base, exp):
            out += [(w.text, index.loc(self.path, w.start), w.unresolved) for w in words]
        return out

    def shell_scalar(self, node: N, state: ShellState, kind: Optional[str] = None) -> list[Launch]:
        self.consumed.add(id(node))
        src = scalar_source(node, self.text)
        if src is None:  # escapes (\" \x73): the decoded value, placed at the scalar
            value = str(node.value)
            return launches_in_shell(value, 0, FixedIndex(value, self.loc(node)), self.path, state, kind or self.kind)
        chunk, base = src
        return launches_in_shell(chunk, base, self.index, self.path, state, kind or self.kind)

    def arg_list(self, node: N) -> Optional[Launch]:
        """A list of `--flag`, value items outside any container (Helm `extraArgs`, `args` in values)."""
        if not node.items or any(i.kind != "scalar" for i in node.items):
            return None
        texts = [str(i.value) for i in node.items]
        if not any(t.startswith("--") and self.reg.is_dsa_key(t.split("=")[0]) for t in texts):
            return None
        tokens = [(str(i.value), self.loc(i), None) for i in node.items]
        return Launch(self.path, self.loc(node.items[0]), "args", args=parse_cli(tokens))

    def config(self, node: N) -> Optional[Launch]:
        keys = [k.value for k, _ in node.pairs if isinstance(k.value, str)]
        if "model" in keys and not any(k in ("model-path", "model_path") for k in keys):
            other = self.engine_config(node, keys)  # `model` is vLLM's name for it (sglang's is model-path)
            if other is not None:
                return other
        known = sum(1 for k in keys if self.reg.get(k) is not None)
        # One key alone ({kv_cache_dtype: x}) is too little to call a mapping a server configuration, and
        # so is a record whose keys are mostly something else (a decision, a benchmark result).
        if known < 2:
            return self.engine_config(node, keys)
        dsa = any(self.reg.is_dsa_key(k) for k in keys)
        model = any(k in ("model-path", "model_path") for k in keys)
        if not (model or (dsa and 2 * known >= len(keys))):
            return self.engine_config(node, keys)
        args = []
        for k, v in node.pairs:
            if not isinstance(k.value, str) or k.value in threshold_env_vars():
                continue
            if self.reg.get(k.value) is None and self.reg.near(k.value) is None:
                continue
            value = v.value if v.kind == "scalar" else [i.value for i in v.items] if v.kind == "seq" else v
            args.append(Arg(k.value, value, self.loc(k), "key"))
        first = node.pairs[0][0]
        return Launch(self.path, self.loc(first), "config", args=args)

    def engine_config(self, node: N, keys: list[str]) -> Optional[Launch]:
        """A config file of another engine's server (vLLM's `--config`: its flag names as keys)."""
        for engine in engines.every():
            hit = engine.config_launch(node, keys, self.path, self.loc)
            if hit is not None:
                return hit
        return None


# Service keys only compose has (a Kubernetes container has none of them).
_COMPOSE_ONLY = ("ipc", "shm_size", "restart", "runtime", "container_name", "healthcheck", "deploy", "depends_on")


def _mentions(node: N) -> bool:
    if node.kind == "scalar":
        if not isinstance(node.value, str):
            return False
        names = engines.names()
        return mentions_launch(node.value) or node.value in names or node.value.endswith(tuple("/" + n for n in names))
    return any(_mentions(i) for i in node.items)



def _display(full: str, like: str) -> str:
    return full if os.path.isabs(like) else os.path.relpath(full)
