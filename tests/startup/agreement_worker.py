"""One rank of the agreement test: gloo on 127.0.0.1, run by tests/startup/test_distributed.py.

Writes a JSON result to --out: the error before any process group exists, the agreed digest when
every rank resolves for the same device, and the message raised when one rank resolves for another.
"""
from __future__ import annotations

import argparse
import json
import traceback
from datetime import timedelta

DS = "deepseek-ai/DeepSeek-V3.2"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="h200", help="the device every rank resolves for first")
    p.add_argument("--odd-device", default="b200", help="what the last rank resolves for second")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    result: dict = {"rank": a.rank}
    try:
        import torch.distributed as dist

        from nsa_policy.engines.sglang.startup import apply
        from nsa_policy.integration.distributed import AgreementError, DisagreementError, ensure_agreement

        def decide(device: str):
            args = argparse.Namespace(model_path=DS, kv_cache_dtype="auto", nsa_prefill_backend=None,
                                      nsa_decode_backend=None, page_size=None, tp_size=a.world, dp_size=1)
            return apply(args, device=device, env={})

        try:
            ensure_agreement(decide(a.device))
        except AgreementError as exc:
            result["before_init"] = str(exc)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                                world_size=a.world, timeout=timedelta(seconds=30))
        agreed = ensure_agreement(decide(a.device))
        result["agreed"] = agreed.model_dump(mode="json")
        odd = a.odd_device if a.rank == a.world - 1 else a.device
        try:
            ensure_agreement(decide(odd))
            result["disagreement"] = None
        except DisagreementError as exc:
            result["disagreement"] = {"message": str(exc), "fields": list(exc.fields),
                                      "groups": [list(g) for g in exc.groups]}
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # reported to the parent, which fails the test with it
        result["error"] = traceback.format_exc()
    with open(a.out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
