#!/usr/bin/env bash
# Build side environments that run sglang's own start-up code (CPU, device emulated).
#
#   scripts/sglang_oracle/build_envs.sh [RELEASE ...]     # default: 0.5.10 0.5.13 0.5.20 0.5.23
#   scripts/sglang_oracle/build_envs.sh all               # every release 0.5.10 ... 0.5.23 (incl. posts)
#
# Layout (outside the repo; never committed), $SGENV defaults to /work/sgenv:
#   venv-<group>/       one venv per dependency group: torch 2.13.0 (CPU) + what importing
#                       sglang's start-up code needs, constrained by the group's newest
#                       release's own `==` pins (Requires-Dist)
#   pkgs/<X>/sglang     `pip install --no-deps --target pkgs/<X> sglang==<X>`
#   stubs/torchvision   a stand-in for torchvision (its PyPI builds need CUDA torch; only
#                       multimodal code uses it, but 0.5.10-0.5.20 import it at start-up)
#   wheels/             the downloaded sglang wheels
#   envs.json           release -> {python, pythonpath}: what scripts/sglang_oracle/run.py reads
#
# Idempotent: a venv whose marker file exists and a release whose pkgs/<X> imports are skipped.
# Run a release:  PYTHONPATH=$SGENV/pkgs/<X>:$SGENV/stubs $SGENV/venv-<group>/bin/python ...
set -euo pipefail

SGENV=${SGENV:-/work/sgenv}
PYTHON=${SGENV_PYTHON:-/root/.pyenv/versions/3.11.7/bin/python3.11}
# torch 2.13.0 CPU from local disk; sglang asks for 2.9-2.14 CUDA builds, the start-up
# code only needs torch to import and torch.cuda.get_device_capability to be patchable.
TORCH_WHEEL=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}

ALL_RELEASES="0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23"

# release -> dependency group: releases whose `==` pins on the packages installed here agree
# (transformers, tokenizers, apache-tvm-ffi, xgrammar, openai, sentencepiece, compressed-tensors)
group_of() {
  case "$1" in
    0.5.10|0.5.10.post1) echo t5.3 ;;
    0.5.11|0.5.12|0.5.12.post1) echo t5.6 ;;
    0.5.13|0.5.13.post1|0.5.14) echo t5.8 ;;
    0.5.15|0.5.15.post1|0.5.16|0.5.17|0.5.18|0.5.19|0.5.20) echo t5.12 ;;
    0.5.21) echo t5.12-xg027 ;;
    0.5.22|0.5.23) echo t5.19 ;;
    *) echo "unknown release $1; known: $ALL_RELEASES" >&2; return 1 ;;
  esac
}
# the group's newest release: its == pins constrain the group's venv
pin_release_of() {
  case "$1" in
    t5.3) echo 0.5.10.post1 ;; t5.6) echo 0.5.12.post1 ;; t5.8) echo 0.5.14 ;;
    t5.12) echo 0.5.20 ;; t5.12-xg027) echo 0.5.21 ;; t5.19) echo 0.5.23 ;;
  esac
}
# what importing the start-up code (server_args, arg_groups, model_config, environ) needs
COMMON="numpy orjson pybase64 requests triton packaging pillow starlette pyzmq tqdm IPython pydantic aiohttp psutil msgspec transformers tokenizers safetensors huggingface-hub sentencepiece dill gguf compressed-tensors apache-tvm-ffi"
extras_of() {
  case "$1" in
    t5.3|t5.6|t5.8) echo "openai partial-json-parser einops" ;;
    t5.12|t5.12-xg027) echo "openai partial-json-parser xgrammar einops" ;;
    t5.19) echo "einops" ;;
  esac
}

# pip warns once per package about the machine's file:// index dirs it lacks: drop that noise
quiet_pip() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

wheel_of() {  # download (once) and print the path of sglang==X's wheel
  local x=$1 w
  w=$(ls "$SGENV"/wheels/sglang-"$x"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$w" ]; then
    quiet_pip pip download -q --no-deps -d "$SGENV/wheels" "sglang==$x" >&2
    w=$(ls "$SGENV"/wheels/sglang-"$x"-*.whl | head -1)
  fi
  echo "$w"
}

write_stubs() {
  # Every stub module answers any attribute with a placeholder that raises when used: transformers
  # sees torchvision (find_spec) and imports names from it at import time; nothing calls them on
  # the start-up path.
  local d="$SGENV/stubs/torchvision"
  rm -rf "$d"; mkdir -p "$d/transforms/v2" "$d/io"
  cat > "$d/_stub.py" <<'EOF2'
"""Stand-in for torchvision in sglang side environments (CPU torch; no PyPI torchvision build loads)."""
import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


class Placeholder:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stub: {self._name} is not available in the sglang side environment")

    def __getattr__(self, item):
        return Placeholder(f"{self._name}.{item}")


def module_getattr(module_name):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(f"{module_name}.{name}")
    return __getattr__
EOF2
  for m in "" transforms transforms/v2 io; do
    mod="torchvision${m:+.${m//\//.}}"
    cat > "$d/${m:+$m/}__init__.py" <<EOF2
from torchvision._stub import InterpolationMode, ImageReadMode, module_getattr  # noqa: F401
__getattr__ = module_getattr("$mod")
EOF2
  done
  for f in transforms/functional transforms/v2/functional; do
    cat > "$d/$f.py" <<EOF2
from torchvision._stub import InterpolationMode, module_getattr  # noqa: F401
__getattr__ = module_getattr("torchvision.${f//\//.}")
EOF2
  done
  echo '__version__ = "0.0.0+stub"' >> "$d/__init__.py"
}

build_group() {
  local g=$1 venv="$SGENV/venv-$1" pinrel cons
  pinrel=$(pin_release_of "$g")
  if [ "$(cat "$venv/.built" 2>/dev/null)" = "$pinrel" ]; then log "venv-$g: present"; return; fi
  log "venv-$g: building (pins of sglang==$pinrel)"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade "pip<26" >/dev/null 2>&1 || true
  # torch first, pinned, from local disk
  quiet_pip "$venv/bin/pip" install -q "$TORCH_WHEEL"
  # constraints: the release's own == pins (no environment markers), torch* left out
  cons="$venv/constraints.txt"
  unzip -p "$(wheel_of "$pinrel")" '*.dist-info/METADATA' \
    | sed -n 's/^Requires-Dist: //p' | grep -v ';' | grep '==' | sed 's/\[[^]]*\]//' \
    | grep -v -i -E '^(torch|torchvision|torchaudio|torchcodec|torchao)==' > "$cons"
  echo "torch==2.13.0+cpu" >> "$cons"
  # shellcheck disable=SC2046
  quiet_pip "$venv/bin/pip" install -q -c "$cons" $COMMON $(extras_of "$g")
  echo "$pinrel" > "$venv/.built"
  log "venv-$g: done ($(du -sh "$venv" | cut -f1))"
}

install_release() {
  local x=$1 g target
  g=$(group_of "$x"); target="$SGENV/pkgs/$x"
  if [ -f "$target/.built" ]; then log "pkgs/$x: present"; return; fi
  rm -rf "$target"
  quiet_pip "$SGENV/venv-$g/bin/pip" install -q --no-deps --target "$target" "$(wheel_of "$x")"
  touch "$target/.built"
}

check_release() {  # import the start-up code and build the parser
  local x=$1 g
  g=$(group_of "$x")
  PYTHONPATH="$SGENV/pkgs/$x:$SGENV/stubs" "$SGENV/venv-$g/bin/python" - "$x" <<'EOF'
import argparse, sys, importlib.metadata as md
import sglang
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
v = md.version("sglang")
assert v == sys.argv[1], (v, sys.argv[1])
# the release's own == pins that this shared venv does not meet (installed packages only)
import re
meta = md.distribution("sglang").read_text("METADATA") or ""
off = []
for req in re.findall(r"^Requires-Dist: (.+)$", meta, re.M):
    m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?==([^;\s]+)$", req.strip())
    if not m or m.group(1).lower().startswith("torch"):
        continue
    try:
        have = md.version(m.group(1))
    except md.PackageNotFoundError:
        continue
    if have != m.group(2):
        off.append(f"{m.group(1)}=={m.group(2)} (have {have})")
print(f"sglang {v} from {sglang.__file__}: parser with {len(p._actions)} actions; "
      f"pins not met: {', '.join(off) or 'none'}")
EOF
}

write_envs_json() {
  "$PYTHON" - "$SGENV" <<'EOF'
import json, os, subprocess, sys
root = sys.argv[1]
out = {}
for x in sorted(os.listdir(os.path.join(root, "pkgs"))):
    if not os.path.exists(os.path.join(root, "pkgs", x, ".built")):
        continue
    g = subprocess.run(["bash", "-c", f'source "{os.environ.get("BUILD_SCRIPT")}" --lib; group_of {x}'],
                       capture_output=True, text=True).stdout.strip()
    py = os.path.join(root, f"venv-{g}", "bin", "python")
    if os.path.exists(os.path.join(root, f"venv-{g}", ".built")):
        out[x] = {"python": py, "pythonpath": [os.path.join(root, "pkgs", x), os.path.join(root, "stubs")],
                  "group": g}
with open(os.path.join(root, "envs.json"), "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
print(f"{len(out)} releases in {root}/envs.json")
EOF
}

if [ "${1:-}" = "--lib" ]; then return 0 2>/dev/null || exit 0; fi

releases="${*:-0.5.10 0.5.13 0.5.20 0.5.23}"
[ "$releases" = "all" ] && releases=$ALL_RELEASES
mkdir -p "$SGENV/wheels" "$SGENV/pkgs"
write_stubs
for x in $releases; do
  build_group "$(group_of "$x")"
  install_release "$x"
  check_release "$x"
done
BUILD_SCRIPT="$(readlink -f "$0")" write_envs_json
du -sh "$SGENV"/venv-* "$SGENV"/pkgs 2>/dev/null || true
