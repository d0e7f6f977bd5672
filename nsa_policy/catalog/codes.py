"""The code registry (rules/codes.yaml): one stable code per finding, each with its documentation."""

from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from nsa_policy.base.errors import InputError
from nsa_policy.base.paths import rules_dir
from nsa_policy.base.schema_load import load_doc


class CodeDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    name: str
    level: Literal["error", "warning", "info"]
    summary: str
    explanation: str
    fix: str
    evidence: list[str] = []
    example: Optional[str] = None


class CodeRegistry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    codes: dict[str, CodeDoc]

    @field_validator("codes")
    @classmethod
    def _stable_shape(cls, v: dict) -> dict:
        for code in v:
            if not (code.startswith("NSA") and code[3:].isdigit() and len(code) == 6):
                raise ValueError(f"code {code!r} must look like NSA123")
        return v

    def get(self, code: str) -> CodeDoc:
        doc = self.codes.get(code.upper())
        if doc is None:
            raise InputError("code", code, sorted(self.codes))
        return doc


@lru_cache(maxsize=4)
def load_codes(path: Optional[Path] = None) -> CodeRegistry:
    reg, _ = load_doc(CodeRegistry, path or rules_dir() / "codes.yaml")
    return reg
