"""Per-rank agreement inside the engine (issue 22): a rank process the engine starts (sglang's scheduler,
vLLM's worker) decides again on its own GPU from what the starting process exported, logs it with the
shared decision id and its rank, and compares. The plugins' own code runs here, with the engine's calls
stood in for: sglang's load_plugins() called from a function named as sglang's scheduler entry
(run_scheduler_process) and its HookRegistry; vLLM's WorkerBase.__init__. The GPU is read through NVML:
a fake pynvml (tests/fixtures/fake_nvml) replaying tests/fixtures/nvml_mixed_node.json (synthetic: NVML
index 0 and 3 are B200s, 1 and 2 H200s). The same paths run against the real wheels in
scripts/plugin_harness/rank_run.py (benchmarks/results/plugins/rank-*.json)."""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from nsa_policy.engines.sglang import plugin as sglang_plugin
from nsa_policy.engines.vllm import plugin as vllm_plugin
from nsa_policy.integration import plugin_common as pc
from nsa_policy.integration.decision_log import read_decision_log

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DATA = ROOT / "tests" / "data" / "plugins"


def _recorded(name: str) -> tuple[dict, dict]:
    """An applied sglang 0.5.23 / vLLM 0.33.0 start-up recorded on sm90 (h200): (inputs, model config)."""
    lines = (DATA / name).read_text().splitlines()
    models = json.loads(lines[0])["models"]
    rec = next(r for r in map(json.loads, lines[1:]) if r["status"] == "applied" and r["policy_device"] == "h200")
    return rec, models[rec["model"]]


@pytest.fixture
def node(monkeypatch, tmp_path):
    """NVML answers from the mixed node; the plugin's variables set as the starting process leaves them."""
    spec = importlib.util.spec_from_file_location("pynvml", FIXTURES / "fake_nvml" / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("FAKE_NVML_NODE", str(FIXTURES / "nvml_mixed_node.json"))
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_RANK", "RANK", pc.VIEW_VAR, pc.DECISION_ID_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NSA_POLICY_DEVICE", "auto")
    log = tmp_path / "decisions.jsonl"
    monkeypatch.setenv("NSA_POLICY_LOG", str(log))
    return log


def _start_sglang(monkeypatch, mode: str) -> dict:
    """The starting process as the resolution hook leaves it: decided on h200, view and id exported."""
    rec, model = _recorded("sglang-0.5.23.jsonl")
    inputs = {"fields": dict(rec["read"]), "model": model, "env": dict(rec["env"]), "bundle": "default",
              "release": "0.5.23"}
    monkeypatch.setenv("NSA_POLICY", mode)
    parent = sglang_plugin.decide_from_inputs(inputs, "h200")
    assert not parent.errors and parent.device == "h200"
    pc.decision_id(seed={"engine": "sglang", **inputs})
    pc.export_view(parent, inputs=inputs)
    return inputs


class FakeHookRegistry:
    registered: list = []

    @classmethod
    def register(cls, target, hook, kind):
        cls.registered.append((target, hook, kind))


@pytest.fixture
def sglang_hooks(monkeypatch):
    """sglang's plugin modules the plugin imports (HookRegistry records, resolution hooks accept)."""
    FakeHookRegistry.registered = []
    hook_registry = types.ModuleType("sglang.srt.plugins.hook_registry")
    hook_registry.HookRegistry = FakeHookRegistry
    hook_registry.HookType = types.SimpleNamespace(BEFORE="before")
    resolution = types.ModuleType("sglang.srt.arg_groups.resolution_hooks")
    resolution.register_resolution_hook = lambda name: (lambda fn: fn)
    for name in ("sglang", "sglang.srt", "sglang.srt.plugins", "sglang.srt.arg_groups"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", hook_registry)
    monkeypatch.setitem(sys.modules, "sglang.srt.arg_groups.resolution_hooks", resolution)
    monkeypatch.setattr(sglang_plugin, "_registered", [])
    monkeypatch.setattr(sglang_plugin, "_REFUSALS", [])
    return FakeHookRegistry


def load_plugins():
    sglang_plugin.register()  # what sglang's load_plugins() calls for the entry point


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank, pipe_writer):
    """Named and shaped as sglang's scheduler entry: it calls load_plugins() first."""
    load_plugins()


def test_sglang_rank_on_the_same_gpu_agrees_and_logs_with_the_shared_id(monkeypatch, node, sglang_hooks):
    _start_sglang(monkeypatch, "fill")
    shared = pc.decision_id(create=False)
    run_scheduler_process(types.SimpleNamespace(tp_size=2), None, gpu_id=1, tp_rank=1, pp_rank=0, dp_rank=None,
                          pipe_writer=None)  # NVML index 1: an H200, as the starting process decided on
    [entry] = read_decision_log(node)
    assert entry.origin == "plugin.sglang" and entry.decision.device == "h200"
    ctx = entry.context
    assert ctx["status"] == "rank_check" and ctx["agreement"] == "agrees" and ctx["rank"] == 1
    assert ctx["decision_id"] == shared and ctx["gpu_id"] == 1 and ctx["device_asked"] == "auto:1"
    assert ctx["digest"] == ctx["parent_digest"]
    assert sglang_hooks.registered == [] and sglang_plugin._REFUSALS == []


def test_sglang_rank_on_another_gpu_disagrees_logged_in_fill(monkeypatch, node, sglang_hooks, caplog):
    _start_sglang(monkeypatch, "fill")
    with caplog.at_level("ERROR", logger=sglang_plugin.LOGGER.name):
        run_scheduler_process(types.SimpleNamespace(tp_size=4), None, gpu_id=0, tp_rank=0, pp_rank=1, dp_rank=None,
                              pipe_writer=None)  # NVML index 0: a B200
    [entry] = read_decision_log(node)
    assert entry.decision.device == "b200" and entry.context["agreement"] == "disagrees"
    assert entry.context["rank"] == 4  # pp_rank 1 x tp_size 4 + tp_rank 0
    assert entry.context["digest"] != entry.context["parent_digest"]
    assert "disagree on the DSA decision" in caplog.text and "the starting process" in caplog.text
    assert "rank 4" in caplog.text and "b200" in caplog.text
    assert sglang_hooks.registered == []  # fill: logged, the rank starts


def test_sglang_rank_disagreement_refuses_in_enforce_before_the_scheduler(monkeypatch, node, sglang_hooks):
    _start_sglang(monkeypatch, "enforce")
    run_scheduler_process(types.SimpleNamespace(tp_size=1), None, gpu_id=3, tp_rank=0, pp_rank=0, dp_rank=None,
                          pipe_writer=None)  # NVML index 3: a B200
    [(target, hook, kind)] = sglang_hooks.registered
    assert target == "sglang.srt.managers.scheduler.Scheduler.__init__" and kind == "before"
    with pytest.raises(pc.PluginRefused, match="disagree on the DSA decision"):
        hook(object(), None, None)  # the Scheduler's construction, before its model loads


def test_sglang_enforce_without_hook_registry_stops_the_rank(monkeypatch, node, sglang_hooks):
    _start_sglang(monkeypatch, "enforce")
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", None)  # import fails
    with pytest.raises(SystemExit, match="disagree"):  # escapes load_plugins' `except Exception`
        run_scheduler_process(types.SimpleNamespace(tp_size=1), None, gpu_id=0, tp_rank=0, pp_rank=0, dp_rank=None,
                              pipe_writer=None)


def test_sglang_not_a_scheduler_or_no_parent_does_nothing(monkeypatch, node, sglang_hooks):
    _start_sglang(monkeypatch, "enforce")
    load_plugins()  # the launcher itself (or the detokenizer): no rank, no check
    assert not node.exists()
    monkeypatch.delenv(pc.VIEW_VAR)
    run_scheduler_process(types.SimpleNamespace(tp_size=1), None, gpu_id=0, tp_rank=0, pp_rank=0, dp_rank=None,
                          pipe_writer=None)  # the starting process exported nothing: nothing to compare
    assert not node.exists() and sglang_hooks.registered == []


def test_sglang_rank_check_failure_is_logged_in_fill_refused_in_enforce(monkeypatch, node, sglang_hooks, caplog):
    _start_sglang(monkeypatch, "fill")
    monkeypatch.setenv("FAKE_NVML_NODE", str(FIXTURES / "no-such-node.json"))  # NVML unusable on this rank
    with caplog.at_level("ERROR", logger=sglang_plugin.LOGGER.name):
        run_scheduler_process(types.SimpleNamespace(tp_size=1), None, gpu_id=0, tp_rank=0, pp_rank=0, dp_rank=None,
                              pipe_writer=None)
    assert "rank check" in caplog.text and "continues" in caplog.text and sglang_hooks.registered == []
    monkeypatch.setenv("NSA_POLICY", "enforce")
    run_scheduler_process(types.SimpleNamespace(tp_size=1), None, gpu_id=0, tp_rank=0, pp_rank=0, dp_rank=None,
                          pipe_writer=None)
    [(_, hook, _)] = sglang_hooks.registered
    with pytest.raises(pc.PluginRefused, match="could not decide"):
        hook()


# ---------------------------------------------------------------- vLLM: WorkerBase.__init__

@pytest.fixture
def worker_base(monkeypatch):
    """vllm.v1.worker.worker_base.WorkerBase with vLLM's constructor signature."""
    module = types.ModuleType(vllm_plugin.WORKER_BASE)

    class WorkerBase:
        def __init__(self, vllm_config, local_rank, rank, distributed_init_method, is_driver_worker=False):
            self.local_rank, self.rank = local_rank, rank

    class Worker(WorkerBase):  # vLLM's GPU worker calls the base constructor by keyword
        def __init__(self, vllm_config, local_rank, rank, distributed_init_method, is_driver_worker=False):
            super().__init__(vllm_config=vllm_config, local_rank=local_rank, rank=rank,
                             distributed_init_method=distributed_init_method, is_driver_worker=is_driver_worker)

    module.WorkerBase, module.Worker = WorkerBase, Worker
    for name in ("vllm", "vllm.v1", "vllm.v1.worker"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, vllm_plugin.WORKER_BASE, module)
    monkeypatch.setattr(vllm_plugin, "_wrap", lambda: None)  # create_engine_config: process 0's seam, not here
    return module


def _start_vllm(monkeypatch, mode: str) -> None:
    rec, model = _recorded("vllm-0.33.0.jsonl")
    inputs = {"fields": dict(rec["read"]), "model": model, "bundle": "default", "release": "0.33.0"}
    monkeypatch.setenv("NSA_POLICY", mode)
    parent = vllm_plugin.decide_from_inputs(inputs, "h200")
    assert not parent.errors
    pc.decision_id(seed={"engine": "vllm", **inputs})
    pc.export_view(parent, inputs=inputs)


def test_vllm_worker_checks_at_init(monkeypatch, node, worker_base, caplog):
    _start_vllm(monkeypatch, "audit")
    vllm_plugin.register()  # load_general_plugins() in the worker process
    worker_base.Worker(None, local_rank=2, rank=6, distributed_init_method="tcp://x:1")  # NVML 2: H200
    with caplog.at_level("ERROR", logger=vllm_plugin.LOGGER.name):
        worker_base.Worker(None, local_rank=0, rank=4, distributed_init_method="tcp://x:1")  # NVML 0: B200
    agrees, disagrees = read_decision_log(node)
    assert (agrees.context["rank"], agrees.context["local_rank"], agrees.context["agreement"]) == (6, 2, "agrees")
    assert (disagrees.context["rank"], disagrees.decision.device, disagrees.context["agreement"]) == (4, "b200", "disagrees")
    assert agrees.context["decision_id"] == disagrees.context["decision_id"] == pc.decision_id(create=False)
    assert "disagree on the DSA decision" in caplog.text
    vllm_plugin.register()  # loaded twice: wrapped once
    assert worker_base.WorkerBase.__init__.__wrapped__.__name__ == "__init__"


def test_vllm_worker_disagreement_refused_in_enforce(monkeypatch, node, worker_base):
    _start_vllm(monkeypatch, "enforce")
    vllm_plugin.register()
    with pytest.raises(pc.PluginRefused, match="disagree on the DSA decision"):
        worker_base.Worker(None, local_rank=3, rank=3, distributed_init_method="tcp://x:1")  # NVML 3: B200


def test_vllm_process_zero_registers_no_worker_check(monkeypatch, node, worker_base):
    monkeypatch.setenv("NSA_POLICY", "enforce")
    original = worker_base.WorkerBase.__init__
    vllm_plugin.register()  # process 0: nothing exported yet
    assert worker_base.WorkerBase.__init__ is original


# ---------------------------------------------------------------- the deployment's decision id

def test_deployment_id_is_the_same_on_every_node_and_differs_between_deployments():
    node0 = {"engine": "sglang", "release": "0.5.23", "read": {"model_path": "/models/ds", "tp_size": 16},
             "rendezvous": {"dist_init_addr": "10.0.0.1:5000", "nnodes": 2}, "node_rank": 0}
    node1 = {**node0, "node_rank": 1, "read": {**node0["read"], "host": "10.0.0.2"}}
    assert pc.deployment_id(node0) == pc.deployment_id(node1)
    other = {**node0, "rendezvous": {"dist_init_addr": "10.0.0.9:5000", "nnodes": 2}}
    assert pc.deployment_id(other) != pc.deployment_id(node0)
    assert pc.deployment_id({**node0, "release": "0.5.22"}) != pc.deployment_id(node0)
    env: dict[str, str] = {}
    assert pc.decision_id(env, seed=node1) == pc.deployment_id(node0) == env[pc.DECISION_ID_VAR]
    assert pc.decision_id({pc.DECISION_ID_VAR: "job-7-attempt-2"}, seed=node0) == "job-7-attempt-2"  # the user's wins
