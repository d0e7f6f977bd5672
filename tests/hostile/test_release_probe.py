"""Issue 23, G and F: the release probe (`launch` asks the command's own interpreter which sglang or vLLM it has)
runs isolated: `python -I`, an empty working folder, capped output, the whole process group killed on timeout;
and it finds the interpreter behind pip's long-path entry point wrapper."""
from __future__ import annotations

import os
import stat
import time
import venv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy.integration.discovery import command_python, probe_installed, script_interpreter


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _venv(root: Path, packages: dict[str, str]) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    [site] = (root / "lib").glob("python3*/site-packages")
    for name, version in packages.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root / "bin" / "python"


def test_the_current_folder_can_neither_run_code_nor_spoof_the_release(tmp_path, monkeypatch):
    python = _venv(tmp_path / "env", {"sglang": "0.5.10"})
    here = tmp_path / "checkout"
    (here / "sglang-0.5.23.dist-info").mkdir(parents=True)
    (here / "sglang-0.5.23.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    marker = tmp_path / "ran"
    for mod in ("csv.py", "importlib.py", "sitecustomize.py"):
        (here / mod).write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.chdir(here)
    monkeypatch.setenv("PYTHONPATH", str(here))
    found, how = probe_installed(str(python), "sglang")
    assert found == "0.5.10", how
    assert not marker.exists()


def test_output_that_is_not_utf8_is_no_answer(tmp_path):
    python = _exe(tmp_path / "bin" / "python", "#!/bin/sh\nprintf '\\377\\376 0.5.10'\n")
    found, how = probe_installed(str(python), "sglang")
    assert found is None and "UTF-8" in how


def test_endless_output_is_cut_off(tmp_path):
    python = _exe(tmp_path / "bin" / "python", "#!/bin/sh\nexec yes 0.5.10\n")
    start = time.perf_counter()
    found, how = probe_installed(str(python), "sglang", timeout=10)
    assert found is None and "more than" in how
    assert time.perf_counter() - start < 5


def test_a_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    python = _exe(tmp_path / "bin" / "python", f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nsleep 300\n")
    found, how = probe_installed(str(python), "sglang", timeout=1)
    assert found is None and "no answer" in how
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the probe's child {child} outlived the timeout")


def test_pip_long_path_wrapper_names_its_interpreter(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "env"
    python = _venv(deep, {"sglang": "0.5.10"})
    assert len(str(python)) > 127  # pip writes the /bin/sh wrapper past this length
    entry = _exe(tmp_path / "bin" / "sglang",
                 f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\nimport sys\nfrom sglang.cli import main\n")
    assert script_interpreter(str(entry)) == str(python)
    monkeypatch.setenv("PATH", f"{entry.parent}{os.pathsep}{os.environ['PATH']}")
    assert command_python(["sglang", "serve", "--model-path", "m"], "sglang") == str(python)
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, ["launch", "--device", "b200", "--dry-run", "--", "sglang", "serve",
                                      "--model-path", "deepseek-ai/DeepSeek-V3.2"])
    assert result.exit_code == 0, result.output
    assert "0.5.10" in result.output and "--nsa-prefill-backend" in result.output  # 0.5.10's spelling, not 0.5.23's


def test_vllm_release_comes_from_the_commands_interpreter(tmp_path, monkeypatch):
    """Not the vLLM of nsa-policy's own environment (none here): the release the command will run."""
    python = _venv(tmp_path / "env", {"vllm": "0.33.0"})
    _exe(python.parent / "vllm", f"#!{python}\nimport sys\n")
    monkeypatch.setenv("PATH", f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    from nsa_policy.engines.vllm.launch import target_release

    release, how = target_release(None, ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2"])
    assert release == "0.33.0" and str(python) in how
