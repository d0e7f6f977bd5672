"""On a machine with 2+ NVIDIA GPUs: does `--device auto` pick the GPU CUDA gives the rank?

Usage: python3 benchmarks/gpu_rank_device_check.py OUT.json
For several CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER / LOCAL_RANK settings (indices, reversed
order, GPU UUIDs), a child process with that environment records what torch.cuda says cuda:LOCAL_RANK
is (UUID, PCI bus id) and what nsa_policy.integration.discovery.read_node picked; the two must name
the same physical GPU. torch is used here only as the oracle (the policy path never imports it).
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from nsa_policy.integration.discovery import read_node
node = read_node()
rank = node.rank_index
p = torch.cuda.get_device_properties(rank)
uuid = str(getattr(p, "uuid", "") or "")
bus = "%04x:%02x:%02x" % (getattr(p, "pci_domain_id", 0), getattr(p, "pci_bus_id", -1), getattr(p, "pci_device_id", -1))
print(json.dumps({"torch": {"index": rank, "name": p.name, "uuid": uuid, "pci": bus},
                  "nsa": {"index": rank, "name": node.rank_gpu.name, "uuid": node.rank_gpu.uuid,
                          "pci": node.rank_gpu.pci_bus_id, "nvml_index": node.rank_gpu.nvml_index,
                          "source": node.rank_source, "order": node.order, "notes": list(node.notes)}}))
"""


def _same(torch_side: dict, nsa: dict) -> bool:
    # torch's uuid prints without the 'GPU-' prefix; NVML's bus id is '00000000:19:00.0'
    uuid_ok = bool(torch_side["uuid"]) and (nsa["uuid"] or "").lower().endswith(torch_side["uuid"].lower())
    bus = (nsa["pci"] or "").lower()
    pci_ok = bus.endswith(torch_side["pci"].split(":", 1)[1]) if torch_side["pci"] else False
    return uuid_ok or pci_ok


def main(out_path: str) -> int:
    sys.path.insert(0, str(ROOT))
    from nsa_policy.integration.discovery import read_node

    base = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_RANK")}
    node = read_node(env=base)
    n = len(node.gpus)
    uuids = [g.uuid for g in node.gpus]
    settings: list[dict[str, str]] = []
    for order in ("", "PCI_BUS_ID"):
        for rank in range(n):
            settings.append({"CUDA_DEVICE_ORDER": order, "LOCAL_RANK": str(rank)})
        rev = ",".join(str(i) for i in reversed(range(n)))
        settings.append({"CUDA_DEVICE_ORDER": order, "CUDA_VISIBLE_DEVICES": rev, "LOCAL_RANK": "0"})
        if n > 1:
            settings.append({"CUDA_DEVICE_ORDER": order, "CUDA_VISIBLE_DEVICES": rev, "LOCAL_RANK": "1"})
    if all(uuids):
        settings.append({"CUDA_VISIBLE_DEVICES": ",".join(reversed([u for u in uuids if u])), "LOCAL_RANK": "0"})
        settings.append({"CUDA_VISIBLE_DEVICES": (uuids[-1] or "")[:12], "LOCAL_RANK": "0"})  # a unique prefix
    rows = []
    for s in settings:
        env = {**base, **{k: v for k, v in s.items() if v}}
        proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], env=env, capture_output=True, text=True)
        row: dict = {"env": s}
        if proc.returncode:
            row["error"] = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            row["agree"] = False
        else:
            row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            row["agree"] = _same(row["torch"], row["nsa"])
        rows.append(row)
    record = {"measured_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "gpus": [g.model_dump(mode="json") for g in node.gpus], "driver": node.driver_version,
              "rows": rows, "agree": sum(r["agree"] for r in rows), "total": len(rows)}
    Path(out_path).write_text(json.dumps(record, indent=1))
    print(f"{record['agree']}/{record['total']} settings: discovery names the GPU torch gives cuda:LOCAL_RANK")
    return 0 if record["agree"] == record["total"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu_rank_device_check.json"))
