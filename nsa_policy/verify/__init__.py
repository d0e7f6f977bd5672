"""Proving a policy bundle: the enumerated input space, `check`, `diff`, the support matrix, case coverage.

Nothing here imports torch or flashinfer; matplotlib is imported only when a picture is drawn.
"""
