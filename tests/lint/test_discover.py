"""File discovery: kinds from names, .gitignore files (nested, negation, folders) and --exclude."""
from __future__ import annotations

import os

import pytest

from nsa_policy.lint.discover import classify, iter_files


@pytest.mark.parametrize("name, kind", [
    ("Dockerfile", "dockerfile"), ("Dockerfile.gpu", "dockerfile"), ("serve.dockerfile", "dockerfile"),
    ("Containerfile", "dockerfile"), ("run.sh", "shell"), ("values.yaml", "yaml"), ("compose.yml", "yaml"),
    ("cfg.json", "json"), ("server.toml", "toml"), (".env", "env"), (".env.prod", "env"), ("gpu.env", "env"),
    ("launch", "maybe-shell"), ("README.md", None), ("main.py", None),
])
def test_classify(name, kind) -> None:
    assert classify(name) == kind


def _tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _found(root, excludes=(), gitignore=True) -> list[str]:
    return sorted(os.path.relpath(p, root) for p, _ in iter_files([str(root)], list(excludes), gitignore))


def test_gitignore_nested_negation_and_dirs(tmp_path) -> None:
    (tmp_path / ".git").mkdir()
    _tree(tmp_path, {
        ".gitignore": "build/\n*.gen.yaml\n/top-only.sh\n!keep.gen.yaml\n",
        "a.sh": "", "top-only.sh": "", "sub/top-only.sh": "",
        "x.gen.yaml": "", "keep.gen.yaml": "",
        "build/b.yaml": "", "sub/build/c.yaml": "",
        "sub/.gitignore": "secret/\n",
        "sub/secret/d.yaml": "", "sub/ok.yaml": "",
        "node_modules/m.yaml": "", "notes.txt": "",
    })
    assert _found(tmp_path) == ["a.sh", "keep.gen.yaml", "sub/ok.yaml", "sub/top-only.sh"]
    assert "build/b.yaml" in _found(tmp_path, gitignore=False)


def test_exclude_patterns(tmp_path, monkeypatch) -> None:
    _tree(tmp_path, {"deploy/a.yaml": "", "deploy/legacy/b.yaml": "", "c.env": "", "deploy/x/c.sh": ""})
    monkeypatch.chdir(tmp_path)
    assert _found(tmp_path, ["legacy/"]) == ["c.env", "deploy/a.yaml", "deploy/x/c.sh"]
    assert _found(tmp_path, ["**/*.yaml"]) == ["c.env", "deploy/x/c.sh"]
    assert _found(tmp_path, ["/deploy/x"]) == ["c.env", "deploy/a.yaml", "deploy/legacy/b.yaml"]


def test_named_file_is_linted_even_when_gitignored(tmp_path, monkeypatch) -> None:
    _tree(tmp_path, {".gitignore": "*.sh\n", "run.sh": ""})
    monkeypatch.chdir(tmp_path)
    assert [p for p, _ in iter_files(["run.sh"], [])] == ["run.sh"]
    assert [p for p, _ in iter_files(["run.sh"], ["run.sh"])] == []


def test_pre_commit_hook_selects_the_files_lint_reads(repo) -> None:
    import re

    import yaml

    [hook] = yaml.safe_load((repo / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "nsa-policy-lint" and hook["entry"] == "nsa-policy lint"
    rx = re.compile(hook["files"])
    for name in ("run.sh", "k8s/deploy.yaml", "a.yml", "c.json", "s.toml", ".env", ".env.prod", "gpu.env",
                 "Dockerfile", "docker/Dockerfile.gpu", "Containerfile", "x.dockerfile"):
        assert rx.search(name) and classify(name.rsplit("/", 1)[-1]) not in (None, "maybe-shell"), name
    for name in ("README.md", "main.py", "notes.txt"):
        assert not rx.search(name) and classify(name) is None
