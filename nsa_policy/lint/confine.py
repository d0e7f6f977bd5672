"""What lint may read besides the files it lints: only files inside the linted roots.

The linted files come from a pull request, and what lint reports (text, annotations, SARIF) is
published by the CI runner. So a file may name other files to read (`source`/`.`, compose `env_file`,
`--config`, a `.env` or requirements.txt beside it), but lint reads them only when they lie inside a
root it was asked to lint (a named folder, or a named file's folder), after symbolic links are
resolved; a path outside them is reported and never opened. Every file read is recorded, so that
`--output` can refuse to replace one of them.
"""
from __future__ import annotations

import os
from typing import Optional

from nsa_policy.base.safe_io import UnsafeInput, read_text


class OutsideTree(UnsafeInput):
    """A path a linted file names that lies outside the linted roots: not read."""


class Reader:
    def __init__(self, paths: list[str]):
        roots = []
        for p in paths:
            real = os.path.realpath(p)
            roots.append(real if os.path.isdir(real) else os.path.dirname(real))
        self.roots = tuple(dict.fromkeys(roots))
        self.read_paths: list[str] = []
        self._cache: dict[str, str] = {}

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def read(self, path: str, *, field: str, shown: Optional[str] = None) -> str:
        """The text of a file a linted file names. OutsideTree when it is outside the linted roots,
        UnsafeInput when it is not a regular, UTF-8 file within the size limit."""
        shown = shown or path
        if not self.inside(path):
            raise OutsideTree(field, shown, "is outside the linted tree; lint never reads it")
        real = os.path.realpath(path)
        if real not in self._cache:
            self.read_paths.append(path)
            self._cache[real] = read_text(real, field=field)
        return self._cache[real]

    def exists(self, path: str) -> bool:
        """Whether an optional companion file (.env, requirements.txt) is there to read: inside the roots
        and a regular file (a FIFO or a link to a device is left alone, silently: nothing named it)."""
        return self.inside(path) and os.path.isfile(path)


# A reader for callers outside a lint run (tests, the library): the file's own folder is the root.
def reader_for(path: str) -> Reader:
    return Reader([path])
