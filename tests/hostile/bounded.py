"""Run a call in a daemon thread with a deadline: a hang fails the test instead of blocking the suite."""
from __future__ import annotations

import threading
from typing import Any, Callable


def run_bounded(fn: Callable[[], Any], timeout: float = 5.0) -> dict[str, Any]:
    """{"value": result} or {"error": exception}; asserts the call finished within `timeout` seconds."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), f"no answer within {timeout} s"
    return box
