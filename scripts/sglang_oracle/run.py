"""Project-side driver of the sglang side environments (see README.md beside this file).

Library use (tests/startup/test_real_parsers.py, scripts/sglang_oracle/acceptance.py):

    from run import SideEnvs            # scripts/sglang_oracle on sys.path
    envs = SideEnvs.find()               # $NSA_POLICY_SGLANG_ENVS, else /work/sgenv; None if absent
    envs.parse("0.5.23", [["--model-path", "m", "--dsa-prefill-backend", "trtllm"]])
    envs.dump("0.5.23")                  # the release's parser and environment variables

Command line:

    python scripts/sglang_oracle/run.py releases
    python scripts/sglang_oracle/run.py dump 0.5.23 [0.5.10 ...]   # -> benchmarks/results/sglang-parsers/<X>.json
    python scripts/sglang_oracle/run.py parse 0.5.23 < argvs.jsonl

Each call spawns `<env python> <script>` with PYTHONPATH selecting the release and no SGLANG_*/SGL_*
variables from the caller; nothing here imports sglang or torch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_ROOT = Path("/work/sgenv")
ENV_VAR = "NSA_POLICY_SGLANG_ENVS"
PARSERS_DIR = REPO / "benchmarks" / "results" / "sglang-parsers"


class SideEnvError(RuntimeError):
    pass


@dataclass(frozen=True)
class ReleaseEnv:
    release: str
    python: str
    pythonpath: tuple[str, ...]
    group: str

    def environ(self, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("SGLANG_", "SGL_", "PYTHON")) and k not in ("CUDA_VISIBLE_DEVICES",)}
        base["PYTHONPATH"] = os.pathsep.join(self.pythonpath)
        base["PYTHONNOUSERSITE"] = "1"
        base.update(extra or {})
        return base

    def run_script(self, script: str, stdin: str = "", extra_env: Optional[dict[str, str]] = None,
                   timeout: float = 600) -> str:
        proc = subprocess.run([self.python, str(HERE / script)], input=stdin, capture_output=True, text=True,
                              env=self.environ(extra_env), timeout=timeout)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise SideEnvError(f"sglang {self.release}: {script} exited {proc.returncode}:\n{tail}")
        return proc.stdout


@dataclass(frozen=True)
class SideEnvs:
    root: Path
    releases: dict[str, ReleaseEnv]

    @classmethod
    def find(cls, root: Optional[os.PathLike] = None) -> Optional[SideEnvs]:
        """The side environments under root ($NSA_POLICY_SGLANG_ENVS, else /work/sgenv), or None."""
        base = Path(root or os.environ.get(ENV_VAR) or DEFAULT_ROOT)
        index = base / "envs.json"
        if not index.is_file():
            return None
        data = json.loads(index.read_text())
        releases = {rel: ReleaseEnv(rel, v["python"], tuple(v["pythonpath"]), v.get("group", "?"))
                    for rel, v in data.items() if Path(v["python"]).exists()}
        return cls(base, releases)

    def env(self, release: str) -> ReleaseEnv:
        try:
            return self.releases[release]
        except KeyError:
            raise SideEnvError(f"sglang {release} has no side environment under {self.root}; built: "
                               f"{', '.join(sorted(self.releases, key=_vkey)) or 'none'} "
                               f"(scripts/sglang_oracle/build_envs.sh {release})") from None

    def parse(self, release: str, argvs: Iterable[Sequence[str]]) -> list[dict[str, Any]]:
        """Parse each argv with the release's real parser; one result per argv, in order."""
        items = [list(a) for a in argvs]
        stdin = "".join(json.dumps({"id": i, "argv": a}) + "\n" for i, a in enumerate(items))
        out = self.env(release).run_script("parse_argv.py", stdin)
        results = [json.loads(line) for line in out.splitlines() if line.strip()]
        if [r["id"] for r in results] != list(range(len(items))):
            raise SideEnvError(f"sglang {release}: parse_argv.py answered {len(results)} of {len(items)} inputs")
        return results

    def dump(self, release: str) -> dict[str, Any]:
        return json.loads(self.env(release).run_script("dump_parser.py"))

    def run_script(self, release: str, script: str, stdin: str = "",
                   extra_env: Optional[dict[str, str]] = None) -> str:
        return self.env(release).run_script(script, stdin, extra_env)


def in_input_order(answers: list[dict[str, Any]], items: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """policy_oracle.py answers one emulated device at a time (it enters each device once), so its lines come
    grouped by device: put them back in the inputs' order, and refuse a missing or extra answer."""
    by_id = {a["id"]: a for a in answers}
    if len(by_id) != len(answers) or set(by_id) != {i["id"] for i in items}:
        raise SideEnvError(f"{what}: policy_oracle.py answered {len(answers)} lines for {len(items)} inputs")
    return [by_id[i["id"]] for i in items]


def _vkey(release: str) -> tuple:
    main, _, post = release.partition(".post")
    return tuple(int(p) for p in main.split(".")) + (int(post) if post else -1,)


def sorted_releases(releases: Iterable[str]) -> list[str]:
    return sorted(releases, key=_vkey)


def write_dump(envs: SideEnvs, release: str, out_dir: Path = PARSERS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{release}.json"
    path.write_text(json.dumps(envs.dump(release), indent=1, sort_keys=True) + "\n")
    return path


def main(argv: Sequence[str]) -> int:
    envs = SideEnvs.find()
    if envs is None:
        print(f"no side environments: set {ENV_VAR} or run scripts/sglang_oracle/build_envs.sh", file=sys.stderr)
        return 2
    if not argv or argv[0] == "releases":
        for rel in sorted_releases(envs.releases):
            e = envs.releases[rel]
            print(f"{rel:14} {e.group:12} {e.python}")
        return 0
    cmd, rest = argv[0], list(argv[1:])
    if cmd == "dump":
        for rel in rest or sorted_releases(envs.releases):
            print(write_dump(envs, rel).relative_to(REPO))
        return 0
    if cmd == "parse" and len(rest) == 1:
        argvs = [json.loads(line) for line in sys.stdin if line.strip()]
        for r in envs.parse(rest[0], [a["argv"] if isinstance(a, dict) else a for a in argvs]):
            print(json.dumps(r, sort_keys=True))
        return 0
    print("usage: run.py releases | dump [RELEASE...] | parse RELEASE < argvs.jsonl", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
