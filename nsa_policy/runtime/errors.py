"""Errors the runtime adapter raises at construction (never at the first call)."""
from __future__ import annotations


class AdapterConfigError(ValueError):
    """The decision, device or installed flashinfer cannot run the requested backend.

    The message names the backend, the device and what would be valid instead.
    """
