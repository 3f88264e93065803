#!/bin/bash
# The GPU checks of the NCCL backend and the engine, for a GPU machine without build tools.
#
#   device_check.sh pack DIR BUILD   on the build machine: copy the three programs from BUILD
#                                    (the cmake folder of README.md "Build" beside this
#                                    script), libkerashvd_core.so
#                                    and the active Python's mpich (libmpi, mpiexec, hydra)
#                                    into DIR/bin and DIR/lib, and this script into DIR
#   DIR/device_check.sh run [RANKS]  on the GPU machine: each program at 1..RANKS ranks
#                                    (default 4), --freeze at 2, the bench at 1 and 2;
#                                    a log per step under $OUT (default DIR/out)
#
# Ranks beyond one share the GPU: each gets its own NCCL_HOSTID, so any NCCL from 2.13 on
# connects them over loopback sockets. The NCCL used is the first libnccl.so.2 found under
# /opt or /usr unless LD_LIBRARY_PATH already provides one. `run` exits non-zero if any step
# failed.
set -u
case "${1:-}" in
pack)
  set -e
  dir=$2 build=$3 prefix=$(python -c 'import sys; print(sys.prefix)')
  mkdir -p "$dir/bin" "$dir/lib"
  cp "$build"/core/backend/nccl/kerashvd_{nccl_test,gpu_engine_test,gpu_engine_bench} "$dir/bin/"
  cp "$build/libkerashvd_core.so" "$prefix/lib/libmpi.so.12" "$dir/lib/"
  cp -r "$prefix/lib/mpich" "$dir/lib/"
  cp "$prefix"/bin/{mpiexec,mpiexec.hydra,hydra_pmi_proxy} "$dir/bin/"
  cp "$0" "$dir/"
  du -sh "$dir" ;;
run)
  max=${2:-4} here=$(cd "$(dirname "$0")" && pwd)
  out=${OUT:-$here/out}; mkdir -p "$out"
  nccl=$(find /opt /usr -name libnccl.so.2 2>/dev/null | head -1)
  export PATH=$here/bin:$PATH LD_LIBRARY_PATH=$here/lib:${LD_LIBRARY_PATH:-}:${nccl%/*}
  export NCCL_SOCKET_IFNAME=lo HYDRA_LAUNCHER=fork
  nvidia-smi -L
  failed=0
  step() {  # log name, seconds, ranks, program and its arguments
    local name=$1 limit=$2 n=$3; shift 3
    local args=() r t0=$(date +%s%N)
    for ((r = 0; r < n; r++)); do
      ((r)) && args+=(:)
      args+=(-n 1 -env NCCL_HOSTID "r$r" "$@")
    done
    timeout -k 5 "$limit" mpiexec "${args[@]}" >"$out/$name.log" 2>&1
    local rc=$?
    ((rc)) && failed=1
    printf '%-12s rc=%-3s %6s ms  %s\n' "$name" "$rc" \
      "$(( ($(date +%s%N) - t0) / 1000000 ))" "$(tail -1 "$out/$name.log")"
  }
  cd "$here/bin"
  for ((n = 1; n <= max; n++)); do step "nccl_$n" 120 "$n" ./kerashvd_nccl_test; done
  for ((n = 1; n <= max; n++)); do step "engine_$n" 120 "$n" ./kerashvd_gpu_engine_test; done
  step freeze_2 60 2 ./kerashvd_gpu_engine_test --freeze
  grep -q "FREEZE OK" "$out/freeze_2.log" || { echo "freeze_2: no FREEZE OK"; failed=1; }
  step bench_1 60 1 ./kerashvd_gpu_engine_bench 0.3
  step bench_2 60 2 ./kerashvd_gpu_engine_bench 0.2
  cat "$out/bench_1.log" "$out/bench_2.log"
  exit $failed ;;
*) sed -n '2,15p' "$0"; exit 2 ;;
esac
