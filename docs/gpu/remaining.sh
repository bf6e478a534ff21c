#!/bin/bash
# What 2026-11-26's first session left unrun on a GPU, side by side on one node (16 cores, one GPU; each bounded, outputs
# under $OUT): Composer's route at the last affected and the first fixed release of mosaicml/composer#3493, the
# comm cases at world size 2 over NCCL with the ranks sharing the GPU (reduce_scatter and broadcast never ran), the
# gloo mode of a shared GPU, and two `--nnodes` processes over NCCL on the one GPU. Wheels as run.sh and composer.sh.
. docs/gpu/setup.sh
export DS_DOCTOR_STACKS=/tmp/stacks
L=${RUN_LIMIT:-240}
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0))" > $OUT/env.txt 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> $OUT/env.txt 2>&1
for v in 0.23.5 0.24.0; do
  (mkdir -p /tmp/c-$v; timeout $L python3 -m ds_doctor.cli run --level 3 -k "optimizer_coverage and composer" --out /tmp/c-$v \
    --with torchvision==0.26.0 --with mosaicml==$v --ignore-pins --find-links $W/composer > $OUT/composer-$v.log 2>&1
   echo "composer $v rc=$? at $(date -u +%T)" >> $OUT/composer-$v.log; cp /tmp/c-$v/*.md $OUT/composer-$v.md) &
done
(mkdir -p /tmp/s-nccl; timeout $L python3 -m ds_doctor.cli run --level 3 -k "comm and ws2" --timeout 60 --out /tmp/s-nccl \
   > $OUT/comm-nccl.log 2>&1; echo "comm nccl rc=$?" >> $OUT/comm-nccl.log; cp /tmp/s-nccl/*.md $OUT/comm-nccl.md) &
(mkdir -p /tmp/s-gloo; DS_DOCTOR_SHARED_GPU=gloo timeout $L python3 -m ds_doctor.cli run --level 3 \
   -k "ws2 and (comm or zero_offload or equivalence)" --timeout 60 --out /tmp/s-gloo > $OUT/shared-gloo.log 2>&1
 echo "shared gloo rc=$?" >> $OUT/shared-gloo.log; cp /tmp/s-gloo/*.md $OUT/shared-gloo.md) &
for n in 0 1; do
  (mkdir -p /tmp/n/$n; timeout $L python3 -m ds_doctor.cli run --nnodes 2 --node-rank $n --rdzv-endpoint 127.0.0.1:29411 \
     --nproc 1 -k "comm" --timeout 60 --out /tmp/n/$n > $OUT/nnodes-$n.log 2>&1; echo "nnodes $n rc=$?" >> $OUT/nnodes-$n.log) &
done
wait
cp /tmp/n/0/*.md $OUT/nnodes.md 2>/dev/null
for f in $OUT/*.log; do echo "=== $f"; tail -12 $f; done
