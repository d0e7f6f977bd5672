"""The input limits every reader shares: regular files only, a size cap, UTF-8, bounded nesting and aliases."""
from __future__ import annotations

import os
import time

import pytest

from hostile.bounded import run_bounded
from nsa_policy.base import safe_io
from nsa_policy.base.errors import InputError
from nsa_policy.base.safe_io import (
    MAX_DEPTH,
    UnsafeInput,
    check_output_path,
    load_json_text,
    load_toml_text,
    load_yaml_text,
    read_text,
    write_atomic,
)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic 'billion laughs' in YAML: `levels` anchors, each `width` aliases of the previous."""
    names = [f"l{i}" for i in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [" + ", ".join(['"lol"'] * width) + "]"]
    for prev, cur in zip(names, names[1:]):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_once():
    text = alias_bomb()
    assert len(text) < 700
    start = time.perf_counter()
    with pytest.raises(UnsafeInput, match="YAML nodes"):
        load_yaml_text(text, "bomb.yaml")
    assert time.perf_counter() - start < 1.0


def test_moderate_aliases_still_load():
    assert load_yaml_text("base: &b {x: 1}\nother: *b\n", "ok.yaml") == {"base": {"x": 1}, "other": {"x": 1}}


@pytest.mark.parametrize("loader,text", [
    (load_json_text, "[" * 100_000),
    (load_toml_text, "a = " + "[" * 100_000),
    (load_yaml_text, "[" * 100_000),  # libyaml's composer would overflow the C stack here
    (load_yaml_text, "- " * 100_000),
])
def test_deep_nesting_is_an_input_error_not_a_crash(loader, text):
    with pytest.raises(UnsafeInput, match=f"deeper than {MAX_DEPTH}"):
        loader(text, "deep")


def test_nesting_at_the_limit_is_fine():
    text = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert load_json_text(text, "ok") is not None


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo", "dir"])
def test_special_files_are_refused_without_blocking(tmp_path, special):
    path = {"fifo": tmp_path / "f", "dir": tmp_path}.get(special, special)
    if special == "fifo":
        os.mkfifo(path)
    if special.startswith("/dev/") and not os.path.exists(special):
        pytest.skip(f"{special} missing")
    box = run_bounded(lambda: read_text(path, field="--model"))
    err = box.get("error")
    assert isinstance(err, InputError), box
    assert "--model" in str(err) and str(path) in str(err)


def test_size_cap(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(UnsafeInput, match="limit is 1024 bytes"):
        read_text(big, max_bytes=1024)


def test_bad_utf8_names_the_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"a: 1\nb: 2\nc: \xff\n")
    with pytest.raises(UnsafeInput) as info:
        read_text(p)
    assert f"{p}:3" in str(info.value) and "UTF-8" in str(info.value)


def test_output_path_checks(tmp_path):
    inp = tmp_path / "s.sh"
    inp.write_text("echo\n")
    with pytest.raises(UnsafeInput, match="input of this command"):
        check_output_path(inp, field="--output", inputs=[inp])
    with pytest.raises(UnsafeInput, match="does not exist"):
        check_output_path(tmp_path / "missing" / "x.md", field="--out")
    with pytest.raises(UnsafeInput, match="is a directory"):
        check_output_path(tmp_path, field="--out")
    if os.path.exists("/dev/full"):
        with pytest.raises(UnsafeInput, match="character device"):
            check_output_path("/dev/full", field="--out")
    assert check_output_path(tmp_path / "new.md", field="--out") == tmp_path / "new.md"


def test_write_atomic_replaces_whole_and_keeps_mode(tmp_path):
    target = tmp_path / "out.md"
    target.write_text("old")
    os.chmod(target, 0o600)
    write_atomic(target, "new contents")
    assert target.read_text() == "new contents"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o600)
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]  # no temporary left behind


def test_write_atomic_failure_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.md"
    target.write_text("old")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_io.os, "replace", boom)
    with pytest.raises(UnsafeInput, match="disk full"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]
