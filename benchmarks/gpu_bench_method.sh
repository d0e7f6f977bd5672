#!/usr/bin/env bash
# One device call for issue 25's open points: where fa3 breaks (flashinfer 0.6.7.post2, then 0.6.11),
# the timing method beside bench's, and bench at TP 8 and attention DP 8 again.
# Usage (on the GPU machine, from a copy of nsa_policy/ + rules/ + pyproject.toml + benchmarks/):
#   bash benchmarks/gpu_bench_method.sh WHEELS WHEELS_0611 [repeat]
#     WHEELS: as gpu_bench_session.sh without nvidia_cudnn_frontend (flashinfer imports it only if present;
#             left out to fit the 64 MiB a call carries);
#     WHEELS_0611: flashinfer_python 0.6.11 alone (the other wheels are taken from WHEELS)
#     repeat: only bench over a pool past fa3's reach, and the method again with the SM clock sampled
# Everything goes into $OUT/method.tgz; steps run in order of need and stop when the call's time runs short.
set -uo pipefail
wheels=$1 wheels11=$2 mode=${3:-all}
dst=/tmp/results/method
mkdir -p "$dst"
trap 'tar czf "$OUT/method.tgz" -C "$dst" .' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$wheels"/*.whl \
  > "$dst/install.log" 2>&1 || { echo "install failed"; tail -5 "$dst/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -c 'import torch, triton, flashinfer; print(torch.__version__, triton.__version__, flashinfer.__version__)'; } > "$dst/env.log" 2>&1
tail -1 "$dst/env.log"
left() { echo $((540 - SECONDS)); }
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  if [ "$(left)" -lt 30 ]; then echo "== $name: skipped (time)"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  echo "== $name ($(date -u +%T), limit ${limit}s)"
  timeout "$limit" "$@" > "$dst/$name.log" 2>&1
  echo "rc=$? ($(date -u +%T))"
}
if [ "$mode" = repeat ]; then
  # 512 rows at 32k need 16M tokens, so the pool is the 7,602,176 asked for (bench caps it at the need)
  step pool7602176 90 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --tp-size 8 --phase decode \
    --batch 512 --context 32k --kv-cache-dtype bfloat16 --rounds 3 --pool-tokens 7602176 --out "$dst/pool7602176"
  cat "$dst/pool7602176.log"; grep -A8 "Not measured" "$dst/pool7602176/h200-tp8.md"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 \
    > "$dst/clocks.csv" 2>&1 &
  smi=$!
  step method 300 python3 benchmarks/gpu_bench_method.py method "$dst/method.jsonl"
  kill $smi
  tail -3 "$dst/method.log"
  exit 0
fi
step probe-0.6.7.post2 150 python3 benchmarks/gpu_bench_method.py probe "$dst/probe-0.6.7.post2.json"
cat "$dst/probe-0.6.7.post2.log" | tail -20
step method 300 python3 benchmarks/gpu_bench_method.py method "$dst/method.jsonl"
tail -3 "$dst/method.log"
mkdir -p "$dst/bench"
step tp8 90 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --tp-size 8 --out "$dst/bench"
step dp8 90 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --tp-size 8 --dp-size 8 \
  --enable-dp-attention --out "$dst/bench"
grep -h "^bench\|not measured\|DISAGREES\|error" "$dst/tp8.log" "$dst/dp8.log" | head -20
# bench over a pool fa3 cannot address with 0.6.7.post2: fa3 must be listed as not measured
step pool7602176 60 python3 -m nsa_policy.cli bench --model deepseek-ai/DeepSeek-V3.2 --tp-size 8 --phase decode \
  --batch 32 --context 32k --kv-cache-dtype bfloat16 --rounds 3 --pool-tokens 7602176 --out "$dst/pool7602176"
grep -v "^  [pd]" "$dst/pool7602176.log" | tail -8
mkdir -p /tmp/wheels11 && cp "$wheels"/*.whl /tmp/wheels11/ && rm /tmp/wheels11/flashinfer_python-* && cp "$wheels11"/*.whl /tmp/wheels11/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site11 /tmp/wheels11/*.whl \
  > "$dst/install11.log" 2>&1 || echo "install 0.6.11 failed"
PYTHONPATH=/tmp/site11:$PWD step probe-0.6.11 150 python3 benchmarks/gpu_bench_method.py probe "$dst/probe-0.6.11.json"
tail -20 "$dst/probe-0.6.11.log"
