"""ensure_agreement across real processes: torch.distributed with gloo on 127.0.0.1 (CPU).

Each test starts WORLD processes of tests/startup/agreement_worker.py. In each, every rank first
resolves for the same device (they must agree), then the last rank resolves for another device
(every rank must raise DisagreementError with the same message). torch is imported only in the
worker processes, never in the test process (the policy path must stay torch-free).
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsa_policy import resolve
from nsa_policy.integration.distributed import disagreement_message, rank_decision
from nsa_policy.integration.fleet import resolve_fleet

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("agreement_worker.py")
DS = "deepseek-ai/DeepSeek-V3.2"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, tmp_path: Path, *, timeout: float = 90.0) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "MASTER_", "RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    port = free_port()
    procs = []
    for rank in range(world):
        out = tmp_path / f"rank{rank}.json"
        cmd = [sys.executable, str(WORKER), "--rank", str(rank), "--world", str(world), "--port", str(port),
               "--out", str(out)]
        procs.append((subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True), out))
    deadline = time.monotonic() + timeout
    logs = []
    try:
        for proc, _ in procs:
            logs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
        pytest.fail(f"{world} ranks did not finish within {timeout:.0f}s")
    results = []
    for (proc, out), log in zip(procs, logs):
        assert proc.returncode == 0 and out.exists(), f"rank exited {proc.returncode}:\n{log}"
        data = json.loads(out.read_text())
        assert "error" not in data, data["error"]
        results.append(data)
    return results


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed: the agreement check runs over torch.distributed")
@pytest.mark.parametrize("world", [2, 4])
def test_agreement_over_gloo(world: int, tmp_path: Path) -> None:
    results = run_ranks(world, tmp_path)
    # Before init_process_group: a clear error, not a hang.
    assert all("init_process_group" in r["before_init"] for r in results)
    # Same device on every rank: all pass with one digest.
    digests = {r["agreed"]["digest"] for r in results}
    assert len(digests) == 1
    assert all(r["agreed"]["world_size"] == world for r in results)
    # The last rank on a B200: every rank raises, with the same message.
    messages = {r["disagreement"]["message"] for r in results}
    assert len(messages) == 1
    [message] = messages
    odd = world - 1
    others = ", ".join(map(str, range(odd)))
    assert f"the {world} ranks disagree" in message
    assert f"on rank{'s' if odd > 1 else ''} {others}: h200 sm90" in message
    assert f"on rank {odd}: b200 sm100" in message
    assert f'kv_cache_dtype: "bfloat16" on rank{"s" if odd > 1 else ""} {others}; "fp8_e4m3" on rank {odd}' in message
    # The fields named online are the ones the offline fleet check names for the same two devices.
    offline = resolve_fleet({"tp_size": world}, ["h200", "b200"], model=DS, env={})
    assert "kv_cache_dtype" in offline.split_fields
    assert all(r["disagreement"]["fields"] == list(offline.split_fields) for r in results)
    assert all(r["disagreement"]["groups"] == [list(range(odd)), [odd]] for r in results)


def test_disagreement_message_names_ranks_devices_and_fields_without_torch() -> None:
    h200 = resolve({}, device="h200", model=DS, env={})
    b200 = resolve({}, device="b200", model=DS, env={})
    records = [rank_decision(h200, 0, "node-a"), rank_decision(b200, 2, "node-b"), rank_decision(h200, 1, "node-a")]
    message = disagreement_message(records)
    assert message == disagreement_message(list(reversed(records)))  # order of arrival does not matter
    assert "decision 1 (digest " in message and "on ranks 0, 1: h200 sm90, NVIDIA H200 on node-a" in message
    assert "on rank 2: b200 sm100, NVIDIA B200 on node-b" in message
    assert 'decode_backend: "fa3" on ranks 0, 1; "trtllm" on rank 2' in message
    assert "nsa-policy resolve --device h200,b200" in message
