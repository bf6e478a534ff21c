#!/bin/bash
# The multi-rank cases alone on a one-GPU node, ranks sharing the GPU (nccl, NCCL_HOSTID per rank), each case bounded
# by --timeout so one hung case cannot eat the device time. Wheels as run.sh. RUN_LIMIT bounds the whole run.
. docs/gpu/setup.sh
rm -rf /tmp/r; mkdir -p /tmp/r
timeout ${RUN_LIMIT:-200} python3 -m ds_doctor.cli run --level 3 -k "${K:-ws2 and not composer}" --timeout ${CASE_LIMIT:-40} \
  --out /tmp/r > $OUT/ws2.log 2>&1
echo "ws2 rc=$? at $(date -u +%T)" | tee -a $OUT/ws2.log
tail -80 $OUT/ws2.log
cp /tmp/r/*.json $OUT/ws2.json 2>/dev/null; cp /tmp/r/*.md $OUT/ws2.md 2>/dev/null
tar czf $OUT/ws2-rundir.tgz -C /tmp/r .
