"""Pause the cyclic garbage collector over a block whose new objects all stay alive.

Start-up work (importing modules, unpickling a compiled bundle, a plugin's first decision) allocates
tens of thousands of objects and frees almost none, so the collector's passes over them find nothing.
Inside an engine they are worse: a pass there walks the engine's own heap (torch, the model code:
400,000 objects in sglang 0.5.23's start-up), and one falling into the plugin's unpickling took
270 ms of its 310 ms. The pause defers collection, it does not skip it: the state before the block is
restored after it, and a nested pause leaves it to the outer one.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
