#!/bin/bash
# One call on the GPU machine for several jobs at once (docs/gpu.md, "Working on the H200").
# Runs from the repository root there, after the wheels' install. A job NAME is a folder
# .devtree/jobs/NAME/ with test.sh (GPU correctness) and bench.sh (timings), run from the
# tree .devtree/slim/NAME (a `git archive` of the job's branch without docs/ and the bench
# folders' results, their scripts kept so that a job runs an earlier session's script where
# it lies rather than a copy: the carry holds 64 MiB; `tools/device_tree.sh slim NAME REF`
# makes it), else .devtree/wt/NAME, else the repository root: every test.sh at the same
# time (correctness does not mind company), then each bench.sh alone on the GPU (timings
# do), then the lead's scripts.
#
# usage: bash tools/device_call.sh "job1 job2 ..." [lead-script-parallel] [lead-script-serial]
#   LIMIT    seconds before packing starts, whatever is left (default 530)
#   TEST_S   each test.sh's limit (170); LEADP_S the parallel lead script's (200)
#   .devtree/jobs/NAME/bench_seconds  that job's bench limit (60)
# Carried in: .devtree/data.txz (token shards, unpacked to $DATA=/tmp/data) and
# .devtree/cache/cache.txz.* (kernel caches from the last call, xz: the carry holds 64 MiB). Comes back under $OUT:
# all.tgz (every job's logs and tables) and cache.txz.* (15 MB pieces: a returned file's limit);
# `tools/device_tree.sh unpack CALL FILES_AT` opens them here.
JOBS=$1; LEADP=$2; LEADS=$3; LIMIT=${LIMIT:-530}
ROOT=$PWD; W=$OUT/w; mkdir -p "$W/lead"
export PYTHONUNBUFFERED=1 MICROGPT_CACHE_DIR=/tmp/mgcache MICROGPT_TEST_KERNEL_CACHE=/tmp/tk
T0=$(date +%s)
stamp() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a "$W/summary.log"; }
left() { echo $(( LIMIT - $(date +%s) + T0 )); }

cat .devtree/cache/cache.txz.* 2>/dev/null | tar -C /tmp -xJf - 2>/dev/null
mkdir -p /tmp/data && tar -C /tmp -xJf .devtree/data.txz 2>/dev/null
export DATA=/tmp/data
stamp "caches unpacked: $(du -sh /tmp/tk /tmp/mgcache 2>/dev/null | tr '\n' ' ')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$W/summary.log"

tree() { for d in .devtree/slim/$1 .devtree/wt/$1; do [ -d "$d" ] && { echo "$d"; return; }; done; echo .; }
for n in $JOBS; do
  mkdir -p "$W/$n"
  [ -f ".devtree/jobs/$n/test.sh" ] && (cd "$(tree "$n")" && OUT=$W/$n PYTHONPATH=/tmp/site:$PWD \
      timeout -k 5 "${TEST_S:-170}" bash "$ROOT/.devtree/jobs/$n/test.sh" > "$W/$n/test.log" 2>&1
      echo "test.sh $n rc $?" | tee -a "$W/$n/test.log" >> "$W/summary.log") &
done
[ -n "$LEADP" ] && (OUT=$W/lead PYTHONPATH=/tmp/site:$ROOT timeout -k 5 "${LEADP_S:-200}" \
    bash "$LEADP" > "$W/lead/parallel.log" 2>&1) &
wait; stamp "tests done"

for n in $JOBS; do
  [ -f ".devtree/jobs/$n/bench.sh" ] || continue
  s=$(cat ".devtree/jobs/$n/bench_seconds" 2>/dev/null || echo 60)
  [ "$(left)" -lt 20 ] && { stamp "bench $n skipped: no time"; continue; }
  [ "$s" -gt "$(left)" ] && s=$(left)
  (cd "$(tree "$n")" && OUT=$W/$n PYTHONPATH=/tmp/site:$PWD \
      timeout -k 5 "$s" bash "$ROOT/.devtree/jobs/$n/bench.sh" > "$W/$n/bench.log" 2>&1
      echo "bench.sh $n rc $?" >> "$W/summary.log")
  stamp "bench $n"
done
[ -n "$LEADS" ] && [ "$(left)" -gt 20 ] && (OUT=$W/lead PYTHONPATH=/tmp/site:$ROOT \
    timeout -k 5 "$(left)" bash "$LEADS" > "$W/lead/serial.log" 2>&1)
stamp "all done"

tar -czf "$OUT/all.tgz" -C "$W" .
tar -cf - -C /tmp tk mgcache/kernels 2>/dev/null | xz -T0 -6 | split -b 15M - "$OUT/cache.txz."
ls -la "$OUT"
