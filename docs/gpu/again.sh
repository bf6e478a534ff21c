#!/bin/bash
# The second call of 2026-11-26 (H200): Composer's route again after its loader got a DistributedSampler (world size 2),
# two `--nnodes` processes over NCCL on the one GPU, each with its own NCCL_HOSTID (two hosts would differ in it;
# on one host NCCL otherwise refuses the duplicate GPU), and the gloo mode of a shared GPU on the ZeRO and
# equivalence cases. Side by side, each bounded; wheels as run.sh and composer.sh.
. docs/gpu/setup.sh
export DS_DOCTOR_STACKS=/tmp/stacks
L=${RUN_LIMIT:-220}
for v in 0.23.5 0.24.0; do
  (mkdir -p /tmp/c-$v; timeout $L python3 -m ds_doctor.cli run --level 3 -k "optimizer_coverage and composer" --out /tmp/c-$v \
    --with torchvision==0.26.0 --with mosaicml==$v --ignore-pins --find-links $W/composer > $OUT/composer-$v.log 2>&1
   echo "composer $v rc=$? at $(date -u +%T)" >> $OUT/composer-$v.log) &
done
(mkdir -p /tmp/s-gloo; DS_DOCTOR_SHARED_GPU=gloo timeout $L python3 -m ds_doctor.cli run --level 3 \
   -k "ws2 and (zero_offload or equivalence) and not resume" --timeout 60 --out /tmp/s-gloo > $OUT/shared-gloo.log 2>&1
 echo "shared gloo rc=$?" >> $OUT/shared-gloo.log) &
for n in 0 1; do
  (mkdir -p /tmp/n/$n; NCCL_HOSTID=ds-doctor-node$n timeout $L python3 -m ds_doctor.cli run --nnodes 2 --node-rank $n \
     --rdzv-endpoint 127.0.0.1:29411 --nproc 1 -k "comm" --timeout 60 --out /tmp/n/$n > $OUT/nnodes-$n.log 2>&1
   echo "nnodes $n rc=$?" >> $OUT/nnodes-$n.log) &
done
wait
cat /tmp/c-0.23.5/*.md > $OUT/composer-0.23.5.md 2>/dev/null
for f in $OUT/*.log; do echo "=== $f"; grep -E " (PASS|FAIL|ERROR|SKIP|XFAIL|XPASS|TIMEOUT) | rc=" $f | cut -c1-230; done
