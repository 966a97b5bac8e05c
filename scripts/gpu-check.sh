#!/usr/bin/env bash
# gpu-check.sh -- the one prepared check of the CUDA backend on a GPU machine
# (shared/PLATFORM.md "The GPU machine"). It never builds: binaries are built here and
# carried there, with the shared libraries the GPU machine lacks.
#
# Two modes:
#   scripts/gpu-check.sh --prepare [BUILD_DIR]   HERE, on the build machine (no GPU needed).
#       Packs BUILD_DIR's (default build) executor_cuda_tests, llmplan_cuda_peak and, when
#       built, executor_cuda_nccl_tests and the llmplan CLI -- stripped -- with every
#       shared library they need except glibc's, libstdc++/libgcc_s (the GPU image's are
#       newer) and CUDA's own (cuBLAS, NCCL: found there), into BUILD_DIR/gpu-bundle/bundle.tar.xz (about 25 MB;
#       OpenBLAS alone is 36 MB unpacked).
#   scripts/gpu-check.sh [BUNDLE_DIR]            THERE, from the repository root: runs the
#       check from BUNDLE_DIR (default build/gpu-bundle) and writes ${OUT:-results}/.
#
# Build here, then prepare (the steps a session runs before its device call):
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
#   cmake --build build -j2 --target executor_cuda_tests executor_cuda_nccl_tests llmplan_cuda_peak llmplan
#   scripts/gpu-check.sh --prepare
# and run it with the device tool, carrying only the bundle:
#   run(command="bash scripts/gpu-check.sh", carry=["build/gpu-bundle"], timeout_s=600)
# (Linking SQLite statically into the CLI is the CLI's concern; whatever it links shared is
# carried like OpenBLAS.)
#
# Flow there, about 10 minutes at most in all (LLMPLAN_CHECK_BUDGET_S, default 540 s: a
# step that would not fit in what is left is skipped and says so):
#   1. unpack the bundle; find libcublasLt/libcublas/libnccl (ldconfig, then the Python
#      wheels' nvidia/*/lib via `python3 -c 'import nvidia'`, then find /); LD_LIBRARY_PATH
#   2. nvidia-smi and ldd of every binary, before anything else runs
#   3. executor_cuda_tests (every CUDA op against its CPU twin): log and JUnit XML
#   3b. executor_cuda_nccl_tests: the NCCL communicator's 1-rank collectives; with >= 2 GPUs
#      also the 2-rank runs (dp2 ZeRO 0-3, tp2, pp2, cp2 ring and all-gather, MoE ep2;
#      mpirun, one GPU per rank) against the CPU
#   4. llmplan_cuda_peak: measured bf16 GEMM peak (8192^3, cuBLASLt) and copy bandwidth
#   5. training benchmark with `llmplan execute --backend cuda`: GPT-2 124M (1 GPU), the
#      single-rank equivalent of a llama2-7b dp8 plan with --layers 4, and rank proxies of
#      rank 4 of a llama2-7b dp2 tp2 pp2 (SP, interleaved) plan and of CP rank 1 of a cp2
#      plan at 8k tokens; tokens/s, MFU against step 4's peak, measured vs predicted peak
#      memory and step time
#   6. summary.md: one table row per step (status, seconds, key numbers)
# Diagnostics (environment): LLMPLAN_CHECK_SKIP_TESTS=1 skips step 3; LLMPLAN_CHECK_GEMMS
# adds GEMM shapes to step 4; LLMPLAN_CUDA_OP_TIMES=1 makes step 5 print time per CUDA op.
# Results in ${OUT:-results}/: summary.md, check.log (everything), tests.log, tests.xml,
# peak.txt, bench.log, bench_*.json, calibrate.log, calibration*.json.
set -u

# ---------------------------------------------------------------- --prepare (here)
if [ "${1:-}" = "--prepare" ]; then
  cd "$(dirname "$0")/.." || exit 1
  build=${2:-build}
  bundle="$build/gpu-bundle"
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  bins=()
  for b in tests/executor_cuda/executor_cuda_tests executor/cuda/llmplan_cuda_peak cli/llmplan \
    tests/executor_cuda/executor_cuda_nccl_tests; do
    if [ -x "$build/$b" ]; then
      bins+=("$build/$b")
      strip -o "$stage/bin/$(basename "$b")" "$build/$b" || cp "$build/$b" "$stage/bin/"
    elif [ "$b" != cli/llmplan ] && [ "$b" != tests/executor_cuda/executor_cuda_nccl_tests ]; then
      echo "gpu-check --prepare: $build/$b is missing: build it first (see the top of this script)" >&2
      exit 1
    fi
  done
  # Shared libraries to carry: all that ldd resolves, less the system's core and CUDA's own.
  skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libnccl)'
  for b in "${bins[@]}"; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
      if ! [[ $name =~ $skip ]]; then cp -L "$path" "$stage/lib/$name"; fi
    done
  done
  rm -rf "$bundle"
  mkdir -p "$bundle"
  tar -C "$stage" -cJf "$bundle/bundle.tar.xz" bin lib || exit 1
  (cd "$stage" && ls -l bin lib) >"$bundle/MANIFEST"
  git rev-parse HEAD >>"$bundle/MANIFEST" 2>/dev/null
  rm -rf "$stage"
  echo "gpu-check --prepare: $bundle ($(du -sh "$bundle" | cut -f1)):"
  cat "$bundle/MANIFEST"
  exit 0
fi

# ---------------------------------------------------------------- the check (there)
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-results}"
mkdir -p "$out"
bundle=${1:-build/gpu-bundle}
budget=${LLMPLAN_CHECK_BUDGET_S:-540}
log="$out/check.log"
: >"$log"
rows=()  # summary table rows: "| step | status | s | notes |"

say() { echo "$*" | tee -a "$log"; }
left() { echo $((budget - SECONDS)); }
row() { rows+=("| $1 | $2 | $3 | $4 |"); }

say "== gpu-check $(date -u +%FT%TZ) on $(hostname), budget ${budget} s, results in $out"

# 1. Unpack, find the CUDA libraries.
root=$(mktemp -d /tmp/llmplan-gpu.XXXX)
if [ -f "$bundle/bundle.tar.xz" ]; then
  tar -C "$root" -xJf "$bundle/bundle.tar.xz" 2>>"$log" ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle/bundle.tar.xz" "$root"
  cat "$bundle/MANIFEST" >>"$log" 2>/dev/null
else
  say "no $bundle/bundle.tar.xz: using the build tree's binaries directly (no carried libraries)"
  mkdir -p "$root/bin" "$root/lib"
  for b in build/tests/executor_cuda/executor_cuda_tests build/executor/cuda/llmplan_cuda_peak build/cli/llmplan \
    build/tests/executor_cuda/executor_cuda_nccl_tests; do
    [ -x "$b" ] && ln -s "$PWD/$b" "$root/bin/"
  done
fi
bin="$root/bin"
libpath="$root/lib"
for lib in libcublasLt.so.13 libcublas.so.13 libnccl.so.2; do
  if ldconfig -p 2>/dev/null | grep -q "$lib"; then say "$lib: from ldconfig"; continue; fi
  dir=$(timeout 60 python3 - "$lib" 2>/dev/null <<'PY'
import glob, os, sys
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
for r in roots:
    hits = sorted(glob.glob(os.path.join(r, "**", sys.argv[1] + "*"), recursive=True))
    if hits:
        print(os.path.dirname(hits[0]))
        break
PY
)
  if [ -z "$dir" ]; then
    dir=$(timeout 60 find / -xdev \( -path /proc -o -path /sys \) -prune -o -name "$lib*" -path '*nvidia*' -print 2>/dev/null |
      head -1 | xargs -r dirname)
  fi
  if [ -n "$dir" ]; then
    say "$lib: $dir"
    case ":$libpath:" in *":$dir:"*) ;; *) libpath="$libpath:$dir" ;; esac
  else
    say "$lib: NOT FOUND"
  fi
done
run_env() { LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
export LLMPLAN_DATA_DIR="$PWD"  # presets (models/, data/) from this tree, not the build machine's path

# 2. The machine and the binaries' libraries, before anything runs.
say "== nvidia-smi"
command -v nvidia-smi >/dev/null || say "nvidia-smi: not on PATH"
nvidia-smi 2>&1 | tee -a "$log"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
missing=0
for b in "$bin"/*; do
  say "== ldd $(basename "$b")"
  deps=$(run_env ldd "$b" 2>&1)
  printf '%s\n' "$deps" | tee -a "$log"
  if grep -q "not found" <<<"$deps"; then missing=1; fi
done
if [ "$missing" = 1 ]; then
  say "a library is missing (see 'not found' above); the steps below will fail to start"
  row "libraries" "FAIL" "$SECONDS" "ldd: not found (see check.log)"
else
  row "libraries" "ok" "$SECONDS" "LD_LIBRARY_PATH=$libpath"
fi

# 3. The op tests.
t0=$SECONDS
if [ "$(left)" -lt 60 ]; then
  row "executor_cuda_tests" "skipped" 0 "no time left"
elif [ -n "${LLMPLAN_CHECK_SKIP_TESTS:-}" ]; then
  row "executor_cuda_tests" "skipped" 0 "LLMPLAN_CHECK_SKIP_TESTS set"
else
  say "== executor_cuda_tests"
  run_env timeout $(($(left) - 260 > 60 ? $(left) - 260 : 60)) "$bin/executor_cuda_tests" \
    --gtest_output="xml:$out/tests.xml" >"$out/tests.log" 2>&1
  rc=$?
  cat "$out/tests.log" >>"$log"
  passed=$(grep -o '\[  PASSED  \] [0-9]* test' "$out/tests.log" | grep -o '[0-9]*' | head -1)
  failed=$(grep -o '\[  FAILED  \] [0-9]* test' "$out/tests.log" | grep -o '[0-9]*' | head -1)
  seed=$(grep -o 'seed [0-9]*' "$out/tests.log" | head -1)
  case $rc in
    0) status=ok ;;
    77) status="skipped (no device)" ;;
    124) status="TIMEOUT" ;;
    *) status="FAIL (rc $rc)" ;;
  esac
  row "executor_cuda_tests" "$status" $((SECONDS - t0)) "passed ${passed:-0}, failed ${failed:-0}; $seed"
  grep -E '^\[  FAILED  \]' "$out/tests.log" | sort -u | tee -a "$log"
fi

# 3b. The NCCL communicator (tests/executor_cuda/nccl_test.cpp): a 1-rank communicator's
# collectives always; with >= 2 GPUs also the 2-rank training runs under mpirun against
# the CPU (the test starts mpirun itself and skips, saying why, when there is none).
t0=$SECONDS
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ ! -x "$bin/executor_cuda_nccl_tests" ]; then
  row "executor_cuda_nccl_tests" "skipped" 0 "not in the bundle (built without NCCL)"
elif [ "$(left)" -lt 60 ]; then
  row "executor_cuda_nccl_tests" "skipped" 0 "no time left"
else
  filter='NcclWorld1.*'
  limit=60
  if [ "${gpus:-0}" -ge 2 ] && [ "$(left)" -ge 240 ]; then
    filter='NcclWorld1.*:NcclDist.*'
    limit=180
  fi
  say "== executor_cuda_nccl_tests ($filter; $gpus GPU(s))"
  run_env timeout "$limit" "$bin/executor_cuda_nccl_tests" --gtest_filter="$filter" \
    --gtest_output="xml:$out/nccl_tests.xml" >"$out/nccl_tests.log" 2>&1
  rc=$?
  cat "$out/nccl_tests.log" >>"$log"
  passed=$(grep -o '\[  PASSED  \] [0-9]* test' "$out/nccl_tests.log" | grep -o '[0-9]*' | head -1)
  failed=$(grep -o '\[  FAILED  \] [0-9]* test' "$out/nccl_tests.log" | grep -o '[0-9]*' | head -1)
  skipped=$(grep -o '\[  SKIPPED \] [0-9]* test' "$out/nccl_tests.log" | grep -o '[0-9]*' | head -1)
  case $rc in
    0) status=ok ;;
    77) status="skipped (no device)" ;;
    124) status="TIMEOUT" ;;
    *) status="FAIL (rc $rc)" ;;
  esac
  row "executor_cuda_nccl_tests" "$status" $((SECONDS - t0)) \
    "$filter: passed ${passed:-0}, failed ${failed:-0}, skipped ${skipped:-0}"
  grep -E '^\[  (FAILED|SKIPPED) \]|^step [0-9]+:' "$out/nccl_tests.log" | sort -u | tee -a "$log"
fi

# 4. Measured peaks.
t0=$SECONDS
peak=""
if [ "$(left)" -lt 30 ]; then
  row "llmplan_cuda_peak" "skipped" 0 "no time left"
else
  say "== llmplan_cuda_peak"
  run_env timeout 120 "$bin/llmplan_cuda_peak" --m 8192 --n 8192 --k 8192 --warmup 5 --iters 20 >"$out/peak.txt" 2>&1
  rc=$?
  cat "$out/peak.txt" | tee -a "$log"
  peak=$(sed -n 's/^peak_bf16_tflops=//p' "$out/peak.txt")
  copy=$(sed -n 's/^copy_tb_s=//p' "$out/peak.txt")
  case $rc in 0) status=ok ;; 77) status="skipped (no device)" ;; *) status="FAIL (rc $rc)" ;; esac
  row "llmplan_cuda_peak" "$status" $((SECONDS - t0)) \
    "bf16 GEMM ${peak:-?} TFLOP/s (8192^3), copy ${copy:-?} TB/s"
  # Extra GEMM shapes to look at (LLMPLAN_CHECK_GEMMS="m,n,k m,n,k"), e.g. a model's layers.
  for shape in ${LLMPLAN_CHECK_GEMMS:-}; do
    IFS=, read -r gm gn gk <<<"$shape"
    run_env timeout 60 "$bin/llmplan_cuda_peak" --m "$gm" --n "$gn" --k "$gk" --warmup 3 --iters 10 2>&1 | grep "^bf16 gemm" | tee -a "$out/peak.txt" "$log"
  done
fi

# 5. Training benchmark: `llmplan execute --backend cuda` on plans from `llmplan sweep`
# (--gpu h200, so the prediction is for this GPU), flash attention (the tensor-core kernels
# for 16-bit storage). Each report gives tokens/s, measured and predicted step time and peak
# device memory; MFU = the planner's model FLOPs per measured second / step 4's GEMM peak.
LLMPLAN="${LLMPLAN:-$bin/llmplan}"
[ -x "$LLMPLAN" ] || LLMPLAN=build/cli/llmplan
export LLMPLAN_DB="$root/profiles.db"
bench() {  # bench NAME ARGS...
  local name=$1
  shift
  local t0=$SECONDS
  if [ "$(left)" -lt 60 ]; then
    row "bench $name" "skipped" 0 "no time left"
    return
  fi
  say "== bench $name: llmplan execute $*"
  run_env timeout 150 "$LLMPLAN" execute "$@" --json "$out/bench_$name.json" >>"$out/bench.log" 2>&1
  local rc=$?
  local notes
  notes=$(python3 - "$out/bench_$name.json" "${peak:-0}" 2>/dev/null <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
peak = float(sys.argv[2]) * 1e12
g = lambda k: r.get(k, float("nan"))
mfu = g("model_flops_per_s") / peak if peak > 0 else float("nan")
st, pst = g("step_time_s"), g("predicted_step_time_s")
pm, ppm = g("peak_memory_bytes"), g("predicted_peak_memory_bytes")
print(f"{g('tokens_per_s'):.0f} tok/s, MFU {100 * mfu:.1f}%, step {st:.4f} s (predicted {pst:.4f}, "
      f"{100 * (st / pst - 1):+.1f}%), peak memory {pm / 2**30:.2f} GiB (predicted {ppm / 2**30:.2f}, "
      f"{100 * (pm / ppm - 1):+.1f}%); {r.get('label', '')}")
PY
)
  row "bench $name" "$([ $rc = 0 ] && echo ok || echo "FAIL (rc $rc)")" $((SECONDS - t0)) "${notes:-see bench.log}"
}
if [ -x "$LLMPLAN" ]; then
  "$LLMPLAN" sweep --model gpt2-124m --gpus 1 --gpu h200 --seq 1024 --global-batch 64 --precision bf16 --amp O2 \
    --micro-batch 16 --recompute none --flash on --top 3 --json "$out/gpt2.json" >>"$out/bench.log" 2>&1
  "$LLMPLAN" sweep --model llama2-7b --gpus 8 --gpu h200 --seq 4096 --global-batch 256 --precision bf16 --amp O2 \
    --tp 1 --pp 1 --zero 1 --micro-batch 1 --recompute none --flash on --top 3 \
    --json "$out/llama7b.json" >>"$out/bench.log" 2>&1
  bench gpt2-124m "$out/gpt2.json" --backend cuda --steps 20 --warmup 5
  # Calibration from the GPT-2 run alone (the only run in this fresh profile database), then
  # the llama run predicted with it: does a speed measured on one model carry to another
  # model on this GPU? (The uncalibrated prediction is the report's without --calibration.)
  t0=$SECONDS
  if run_env "$LLMPLAN" calibrate --backend cuda --out "$out/calibration.json" >"$out/calibrate.log" 2>&1; then
    scale=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["compute_scale"])' "$out/calibration.json" 2>/dev/null)
    row "calibrate (from the GPT-2 run)" ok $((SECONDS - t0)) "compute_scale ${scale:-?} (see calibrate.log)"
    cal=(--calibration "$out/calibration.json")
  else
    row "calibrate" "FAIL" $((SECONDS - t0)) "see calibrate.log"
    cal=()
  fi
  bench llama2-7b-4layers "$out/llama7b.json" --backend cuda --layers 4 --grad-accum 4 --steps 8 --warmup 2 "${cal[@]}"
  # Tensor and pipeline parallel on this one GPU: a rank proxy (its share of the work and
  # memory, the collectives modelled) of rank 4 of a dp2 tp2 pp2 plan = TP rank 0 of the
  # last stage: the vocabulary-parallel head and loss, SP, interleaved 1F1B chunks.
  "$LLMPLAN" sweep --model llama2-7b --gpus 8 --gpu h200 --seq 4096 --global-batch 256 --precision bf16 --amp O2 \
    --tp 2 --pp 2 --sp on --micro-batch 1 --recompute none --flash on --top 3 \
    --json "$out/llama7b_tp2pp2.json" >>"$out/bench.log" 2>&1
  bench llama2-7b-tp2-pp2-rank4 "$out/llama7b_tp2pp2.json" --backend cuda --proxy-rank 4 --layers 4 --grad-accum 8 \
    --steps 4 --warmup 1 "${cal[@]}"
  # Context parallel (the ring) on this GPU: a proxy of CP rank 1 of a cp2 plan at 8k
  # tokens -- query and key slices on the SIMT flash kernels (the tensor-core ones take
  # whole sequences), the partials merged.
  "$LLMPLAN" sweep --model llama2-7b --gpus 8 --gpu h200 --seq 8192 --global-batch 64 --precision bf16 --amp O2 \
    --tp 1 --pp 1 --cp 2 --micro-batch 1 --recompute none --flash on --top 3 \
    --json "$out/llama7b_cp2.json" >>"$out/bench.log" 2>&1
  bench llama2-7b-cp2-rank1 "$out/llama7b_cp2.json" --backend cuda --proxy-rank 1 --layers 2 --grad-accum 2 \
    --steps 3 --warmup 1 "${cal[@]}"
else
  say "== bench: skipped (no llmplan binary)"
  row "bench" "skipped" 0 "no llmplan binary in the bundle"
fi

# 6. Summary.
nvidia-smi --query-gpu=memory.used,clocks.sm --format=csv 2>&1 | tee -a "$log"
{
  echo "# gpu-check $(date -u +%FT%TZ)"
  echo
  echo "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
  echo
  echo "| step | status | s | notes |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "total ${SECONDS} s of a ${budget} s budget"
} >"$out/summary.md"
cat "$out/summary.md" | tee -a "$log"
rm -rf "$root"
grep -q "| FAIL\|| TIMEOUT" "$out/summary.md" && exit 1
exit 0
