#!/bin/bash
# Issue 23 on a one-GPU node, in this order (each bounded; outputs under $OUT):
#  1. level 3 with every ws2 case on CUDA, ranks sharing the GPU over NCCL (NCCL_HOSTID per rank), then over gloo
#  2. a real NCCL hang (tests/resources/hang_probes.py, `missing`) with TORCH_NCCL_DUMP_ON_TIMEOUT: the Flight
#     Recorder's NCCL dumps through `ds-doctor triage DIR`, and NCCL's own watchdog log through `ds-doctor triage LOG`
#  3. two `--nnodes` processes over NCCL on the one GPU (node 0 and node 1 on 127.0.0.1)
# Wheels as run.sh ($WHEELS, default .gpuwheels).
. docs/gpu/setup.sh
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0))" > $OUT/env.txt 2>&1
for mode in nccl-hostid gloo; do
  rm -rf /tmp/r-$mode; mkdir -p /tmp/r-$mode
  DS_DOCTOR_SHARED_GPU=$mode timeout ${RUN_LIMIT:-420} python3 -m ds_doctor.cli run --level ${LEVEL:-3} -k "${K:-ws2}" \
    --out /tmp/r-$mode > $OUT/shared-$mode.log 2>&1
  echo "shared $mode rc=$?" | tee -a $OUT/shared-$mode.log; tail -30 $OUT/shared-$mode.log
  cp /tmp/r-$mode/*.json $OUT/shared-$mode.json; cp /tmp/r-$mode/*.md $OUT/shared-$mode.md
done
rm -rf /tmp/h; mkdir -p /tmp/h
DS_DOCTOR_EXTRA_PROBES=tests.resources.hang_probes TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 \
  timeout 300 python3 -m ds_doctor.cli run --level 3 -k "hangs and missing" --timeout 60 --out /tmp/h > $OUT/hang.log 2>&1
echo "hang rc=$?" | tee -a $OUT/hang.log; tail -20 $OUT/hang.log
tar czf $OUT/hang-rundir.tgz -C /tmp/h .
for d in $(find /tmp/h -type d -name flight -o -type d -name nccl-watchdog); do
  echo "== triage $d"; timeout 120 python3 -m ds_doctor.cli triage "$d" 2>&1 | tail -30
done > $OUT/hang-triage.txt
for f in $(find /tmp/h -name torchrun.log); do
  echo "== triage $f"; timeout 120 python3 -m ds_doctor.cli triage "$f" 2>&1 | tail -30; cp "$f" $OUT/nccl-watchdog-$(basename $(dirname "$f")).log
done >> $OUT/hang-triage.txt
rm -rf /tmp/n; mkdir -p /tmp/n/0 /tmp/n/1
for n in 0 1; do
  NCCL_HOSTID=ds-doctor-node$n timeout 400 python3 -m ds_doctor.cli run --nnodes 2 --node-rank $n --rdzv-endpoint 127.0.0.1:29411 --nproc 1 -k "comm" \
    --out /tmp/n/$n > $OUT/nnodes-$n.log 2>&1 &
done
wait; tail -20 $OUT/nnodes-0.log; cp /tmp/n/0/*.json $OUT/nnodes.json 2>/dev/null; cp /tmp/n/0/*.md $OUT/nnodes.md 2>/dev/null
