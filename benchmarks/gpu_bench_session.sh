#!/usr/bin/env bash
# One device call of `nsa-policy bench` (issue 25): install the carried wheels, then one bench run per
# parallel shape; every output goes into $OUT/bench.tgz (the tool returns at most eight files).
# Usage (on the GPU machine, from a copy of nsa_policy/ + rules/ + pyproject.toml):
#   bash benchmarks/gpu_bench_session.sh WHEELS MODE
#     WHEELS: flashinfer_python 0.6.7.post2, apache_tvm_ffi, cuda_tile, nvidia_cudnn_frontend,
#             sgl_flash_mla 1.0.0, pydantic 2.14.4 + pydantic_core, annotated_types, typing_inspection,
#             typing_extensions (cp312; typer, PyYAML, packaging, nvidia-ml-py are in the image)
#     MODE: smoke (two points per phase, TP 8) or full (the defaults at TP 8, attention DP 8, TP 4, TP 2,
#           the bundle from them, a repeat of TP 8 and attention DP, and fa3 over larger pools)
set -uo pipefail
wheels=$1 mode=$2
dst=/tmp/results/bench
mkdir -p "$dst"
trap 'tar czf "$OUT/bench.tgz" -C "$dst" .' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$wheels"/*.whl \
  > "$dst/install.log" 2>&1 || { echo "install failed"; tail -5 "$dst/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > "$dst/env.log" 2>&1
bench() {  # name, args... (into $dst, or $into when set)
  local name=$1; shift
  echo "== $name: nsa-policy bench --model deepseek-ai/DeepSeek-V3.2 $*"
  timeout 400 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --out "${into:-$dst}" "$@" \
    > "$dst/$name.log" 2>&1
  echo "rc=$?"; grep -v '^  ' "$dst/$name.log" | tail -3
}
if [ "$mode" = smoke ]; then
  python3 -m nsa_policy.cli bench > "$dst/no_model.log" 2>&1; echo "no --model: rc=$? $(cat "$dst/no_model.log")"
  bench smoke --tp-size 8 --batch 1,32 --context 4k,32k --prefill-tokens 1k --rounds 5
  cat "$dst/smoke.log"
else
  start=$SECONDS
  bench tp8 --tp-size 8
  bench dp8 --tp-size 8 --dp-size 8 --enable-dp-attention
  # the 32 and 64 heads-per-rank shapes only while the call's time allows (10 minutes a call)
  for tp in 4 2; do
    if [ $((SECONDS - start)) -lt 300 ]; then bench tp$tp --tp-size $tp; else echo "skipped tp$tp (time)"; fi
  done
  args=(); for f in "$dst"/h200-*.json; do args+=(--from-json "$f"); done
  python3 -m nsa_policy.cli bench "${args[@]}" --out "$dst/all" --write-bundle "$dst/site-h200" \
    > "$dst/bundle.log" 2>&1; echo "bundle rc=$?"; grep -v '^  [pd]' "$dst/bundle.log" | tail -8
  # the same two shapes again: the spread between two runs of the same code
  mkdir -p "$dst/repeat"
  into=$dst/repeat bench tp8-repeat --tp-size 8
  into=$dst/repeat bench dp8-repeat --tp-size 8 --dp-size 8 --enable-dp-attention
  # where fa3 stops agreeing: one layer's pool of 4M, 7M / 7.25M (2^32 bf16 elements = 7.46M tokens of 576), 16M tokens
  for pool in 4194304 7340032 7602176 16777216; do
    mkdir -p "$dst/pool$pool"
    timeout 120 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --tp-size 8 --phase decode \
      --batch 1,32 --context 32k --kv-cache-dtype bfloat16 --pool-tokens $pool --rounds 5 --out "$dst/pool$pool" \
      > "$dst/pool$pool.log" 2>&1; echo "pool $pool rc=$?"; grep '^  d' "$dst/pool$pool.log"
  done
  python3 -c 'import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/pool*/*.json")):
    d = json.load(open(p))
    print(p.split("/")[-2], [(t["backend"], pt["size"], round(t["rel_error"], 4)) for pt in d["points"] for t in pt["timings"]])' "$dst"
  grep -h '^  [pd]' "$dst"/tp8.log "$dst"/dp8.log
fi
