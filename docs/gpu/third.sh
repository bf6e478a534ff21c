#!/bin/bash
# The third call of 2026-11-26 (H200): Composer 0.24.0's two-rank cases (the second call's limit cut them off), and
# the FSDP2 cases in the shared-GPU mode gloo after the refusal (pytorch/pytorch#132471). Side by side, bounded.
. docs/gpu/setup.sh
export DS_DOCTOR_STACKS=/tmp/stacks
(mkdir -p /tmp/c; timeout ${RUN_LIMIT:-200} python3 -m ds_doctor.cli run --level 3 -k "optimizer_coverage and composer and ws2" \
   --out /tmp/c --with torchvision==0.26.0 --with mosaicml==0.24.0 --ignore-pins --find-links $W/composer \
   > $OUT/composer-0.24.0-ws2.log 2>&1; echo "composer rc=$? at $(date -u +%T)" >> $OUT/composer-0.24.0-ws2.log) &
(mkdir -p /tmp/g; DS_DOCTOR_SHARED_GPU=gloo timeout ${RUN_LIMIT:-200} python3 -m ds_doctor.cli run --level 3 -k "fsdp2 and ws2" \
   --timeout 60 --out /tmp/g > $OUT/gloo-fsdp2.log 2>&1; echo "gloo rc=$?" >> $OUT/gloo-fsdp2.log) &
wait
for f in $OUT/*.log; do echo "=== $f"; grep -E " (PASS|FAIL|ERROR|SKIP|XFAIL|XPASS|TIMEOUT) | rc=" $f | cut -c1-260; done
