#!/usr/bin/env bash
# One device call of the runtime measurements (issue 12): install the carried wheels, then checks,
# tests and timings; every log goes into $OUT/<part>.tgz (one file: the tool returns at most eight). Usage (on the GPU machine, repo root):
#   bash benchmarks/gpu_runtime_session.sh transforms .whl_sg   # sglang 0.5.23 wheel, no flashinfer
#   bash benchmarks/gpu_runtime_session.sh mla .whl             # flashinfer + sgl-flash-mla
#   bash benchmarks/gpu_runtime_session.sh diff .whl .whl_diff  # that tier and the runtime tests only
#   bash benchmarks/gpu_runtime_session.sh mla .whl .whl_diff   # + the differential test's H200 tier:
#     .whl_diff holds sglang-0.5.10-py3-none-any.whl, cp312 wheels of the compiled packages its import
#     needs beyond the image (msgspec, orjson, pybase64, pyzmq), typing_inspection, and pure.zip (the
#     pure-Python ones, copied from the sglang side environment: compressed_tensors, dill, distro, gguf,
#     IPython, loguru, openai, partial_json_parser, sniffio, starlette, traitlets)
#   bash benchmarks/gpu_runtime_session.sh diff23 .whl_diff23  # the 0.5.23 / flashinfer 0.7.4 H200 tier only:
#     .whl_diff23 holds flashinfer074.zip (flashinfer 0.7.4's *.py and *.json files, data/ and the csrc/
#     folders left out, experimental/ fused_moe/ moe_ep/ only where its import reached them on the
#     development machine, and its dist-info), sglang023.zip (sglang 0.5.23's *.py files, the other
#     files of the folders its DSA backend's import reaches, kernels/jit/include and csrc, dist-info),
#     transformers.zip (transformers 5.19.0, 0.5.23's pin, the folders its import reaches, every model
#     package's __init__), pure.zip (compressed_tensors, dill, distro, gguf, IPython, loguru, openai,
#     partial_json_parser, sniffio, starlette, traitlets from the 0.5.23 side environment) and cp312
#     wheels: apache_tvm_ffi (flashinfer's), pydantic 2.14.4 + pydantic_core 2.50.5, annotated_types,
#     typing_inspection, typing_extensions, msgspec, orjson, pybase64, pyzmq
set -uo pipefail
part=$1 wheels=$2 diff=${3:-}
dst=/tmp/results/$part
mkdir -p "$dst"
trap 'tar czf "$OUT/$part.tgz" -C "$dst" .' EXIT
if [ "$part" = diff23 ]; then
  mkdir -p /tmp/fi23 /tmp/sg23 /tmp/sg23deps
  { python3 -m zipfile -e "$wheels"/flashinfer074.zip /tmp/fi23 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fi23 \
      "$wheels"/apache_tvm_ffi-*.whl "$wheels"/pydantic*.whl "$wheels"/annotated_types-*.whl \
      "$wheels"/typing_inspection-*.whl "$wheels"/typing_extensions-*.whl &&
    python3 -m zipfile -e "$wheels"/sglang023.zip /tmp/sg23 &&
    python3 -m zipfile -e "$wheels"/pure.zip /tmp/sg23deps &&
    python3 -m zipfile -e "$wheels"/transformers.zip /tmp/sg23deps &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sg23deps \
      $(ls "$wheels"/*.whl | grep -v apache_tvm_ffi); } > "$dst/install.log" 2>&1 \
    || { echo "diff23: install failed"; tail -5 "$dst/install.log"; exit 1; }
  # pytest sees flashinfer 0.7.4 (with tvm_ffi) and nsa_policy's pydantic; sglang's side adds its own
  # path in its process
  export PYTHONPATH=/tmp/fi23:$PWD PYTHONUNBUFFERED=1 NSA_POLICY_SGLANG23_H200_PATH=/tmp/sg23:/tmp/sg23deps
  { date -u; nvidia-smi; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_capability())'
    python3 -c 'import flashinfer, flashinfer.mla; print("flashinfer", flashinfer.__version__, flashinfer.__file__)'; } > "$dst/env.log" 2>&1
  tail -2 "$dst/env.log"
  # sglang's side once on its own, its record kept (the test records it again in its own folder)
  PYTHONPATH=$NSA_POLICY_SGLANG23_H200_PATH:$PYTHONPATH timeout 120 python3 -W ignore \
    tests/runtime/sglang_call_recorder.py 0.5.23 "$dst/sglang_0.5.23_real_calls.json" real > "$dst/recorder.log" 2>&1
  echo "recorder rc=$?"; tail -3 "$dst/recorder.log"
  timeout 150 python3 -m pytest -v -p no:cacheprovider -rs -k h200_tier_sglang_0523 \
    tests/runtime/test_sglang_differential.py > "$dst/pytest_h200_tier_0523.log" 2>&1
  tail -3 "$dst/pytest_h200_tier_0523.log"
  timeout 90 python3 -m pytest -q -p no:cacheprovider -rs -k "not h200_tier" tests/runtime/test_sglang_differential.py \
    > "$dst/pytest_differential.log" 2>&1
  tail -4 "$dst/pytest_differential.log"
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls "$wheels"/*.whl | grep -v '/sglang-') || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > "$dst/env.log" 2>&1
[ "$part" = diff ] || python3 benchmarks/gpu_runtime_check.py --out "$dst" > "$dst/gpu_runtime_check.log" 2>&1
[ "$part" = diff ] || tail -3 "$dst/gpu_runtime_check.log"
if [ "$part" = transforms ]; then
  python3 -m pytest -q -p no:cacheprovider tests/runtime/test_transforms.py > "$dst/pytest.log" 2>&1
  tail -2 "$dst/pytest.log"
  python3 benchmarks/gpu_decode_host_probe.py --out "$dst" --sglang-wheels "$wheels" > "$dst/probe.log" 2>&1
  tail -4 "$dst/probe.log"
  python3 benchmarks/bench_runtime.py --skip-mla --sglang-wheels "$wheels" --out "$dst" > "$dst/bench.log" 2>&1
else
  if [ -n "$diff" ]; then
    mkdir -p /tmp/sg010 /tmp/sgdeps
    python3 -m zipfile -e "$diff"/sglang-0.5.10-py3-none-any.whl /tmp/sg010 && \
      python3 -m zipfile -e "$diff"/pure.zip /tmp/sgdeps && \
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sgdeps \
        $(ls "$diff"/*.whl | grep -v '/sglang-') \
      > "$dst/diff_install.log" 2>&1 || echo "differential tier: install failed" | tee -a "$dst/diff_install.log"
    export NSA_POLICY_SGLANG_H200_PATH=/tmp/sg010:/tmp/sgdeps
  fi
  python3 -m pytest -v -p no:cacheprovider -rs -k h200_tier tests/runtime/test_sglang_differential.py \
    > "$dst/pytest_h200_tier.log" 2>&1
  tail -3 "$dst/pytest_h200_tier.log"
  python3 -m pytest -q -p no:cacheprovider -rs -k "not h200_tier" tests/runtime > "$dst/pytest.log" 2>&1
  tail -4 "$dst/pytest.log"
  [ "$part" = diff ] && exit 0
  python3 benchmarks/gpu_flashmla_check.py --out "$dst" > "$dst/gpu_flashmla_check.log" 2>&1
  tail -3 "$dst/gpu_flashmla_check.log"
  python3 benchmarks/bench_runtime.py --skip-transforms --out "$dst" > "$dst/bench.log" 2>&1
fi
grep -v '^{' "$dst/bench.log" | tail -60
