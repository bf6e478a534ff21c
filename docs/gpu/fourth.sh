#!/bin/bash
# Prepared 2026-11-26 (a session without a GPU) for the next one lent: what this session built that only a GPU
# node can show, in one bounded call (~6 min on an H100/H200). Each part writes a log under $OUT; the summary at
# the end is what goes into docs/gpu-runs.md.
# - comm in bf16 over NCCL (its bf16 reduction kernels), at 1 and 2 ranks sharing the GPU
# - compute's known-answer matmul at the GPU's size (8192), with its time: the detection budget of docs/nightly.md
# - the planted faulty GPU (one low mantissa bit of rank 1's product) in a real two-rank NCCL launch
# - the node's own fault records as the GPU node has them (dmesg Xid as this user, AER, IB, dcgmi if installed)
# - the equivalence routes that need the new code on CUDA: deepspeed-z2-offload-ga4, deepspeed-z0-bf16,
#   accelerate-sync-each-batch, and a planted divergence with the per-module gradient note
#   (on a CUDA build of torch rank 0's reference is still started afresh, not forked: can_fork)
# - level 2 with the launches one after another and at once (DS_DOCTOR_LAUNCHES): time, outcomes, measures
. docs/gpu/setup.sh
L=${RUN_LIMIT:-240}
(mkdir -p /tmp/a; timeout $L python3 -m ds_doctor.cli run --level 3 -k "comm or compute" --timeout 120 --out /tmp/a \
   --json > $OUT/smoke.json 2> $OUT/smoke.log; echo "smoke rc=$?" >> $OUT/smoke.log)
(mkdir -p /tmp/b; DS_DOCTOR_EXTRA_PROBES=tests.resources.faulty_gpu_probes DS_DOCTOR_TEST_BAD_GPU=1 timeout 120 \
   python3 -m ds_doctor.cli run -k faulty_gpu --out /tmp/b > $OUT/faulty-gpu.log 2>&1; echo "faulty rc=$?" >> $OUT/faulty-gpu.log)
(python3 -m ds_doctor.cli env --json > $OUT/env.json 2> $OUT/env.log; \
 python3 -c "import json; from ds_doctor.hardware.records import read_node_records; print(json.dumps(read_node_records(), indent=1)[:20000])" \
   > $OUT/node-records.json 2>> $OUT/env.log)
(mkdir -p /tmp/e; DS_DOCTOR_EXTRA_PROBES=tests.resources.equivalence_planted timeout $L python3 -m ds_doctor.cli run --level 3 \
   -k "equivalence and (z2-offload-ga4 or z0-bf16 or sync-each-batch) or equivalence_planted and ddp-averaged-by-hand" \
   --timeout 120 --out /tmp/e > $OUT/equivalence.log 2>&1; echo "equivalence rc=$?" >> $OUT/equivalence.log)
# level 2 with its launches one after another, then at once taking turns (DS_DOCTOR_LAUNCHES=together, not the
# default on a GPU until this shows the same outcomes and like measures): wall time, outcomes, timed measures
for mode in one-by-one together; do (mkdir -p /tmp/l-$mode; start=$(date +%s.%N); DS_DOCTOR_LAUNCHES=$mode timeout $L \
   python3 -m ds_doctor.cli run --level 2 --out /tmp/l-$mode --json > $OUT/level2-$mode.json 2> $OUT/level2-$mode.log; \
   echo "level2 $mode rc=$? wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" >> $OUT/level2-$mode.log); done
python3 - <<'PY' >> $OUT/level2-together.log 2>&1
import json, os
one, two = (json.load(open(f"{os.environ['OUT']}/level2-{m}.json")) for m in ("one-by-one", "together"))
a, b = ({c["case"]: c for c in r["results"]} for r in (one, two))
print("outcomes differ:", [k for k in a if a[k]["outcome"] != b.get(k, {}).get("outcome")])
for k in a:
    m = a[k]["measures"].get("busbw_gbps") or a[k]["measures"].get("tflops")
    if m:
        print(k, "one-by-one", m, "together", b[k]["measures"].get("busbw_gbps") or b[k]["measures"].get("tflops"))
PY
python3 - <<'PY' >> $OUT/smoke.log 2>&1
import json, os
r = json.load(open(os.environ["OUT"] + "/smoke.json"))
for c in r["results"]:
    ka = c["notes"].get("known_answer")
    print(c["case"], c["outcome"], c["duration_s"], c["measures"].get("tflops") or c["measures"].get("busbw_gbps"), ka)
PY
for f in $OUT/*.log; do echo "=== $f"; grep -E " (PASS|FAIL|ERROR|SKIP|XFAIL|XPASS|TIMEOUT) | rc=|known_answer|'wrong" $f | cut -c1-300; done
head -c 3000 $OUT/node-records.json
