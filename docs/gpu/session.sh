#!/bin/bash
# One device call for a one-GPU node (issue 33's session, 15 minutes of device time): each step bounded, its results
# under $OUT as it ends (8 files at most come back). Wheels as run.sh ($WHEELS, default .gpuwheels, with composer/).
#  1. level 3 with every case, the ws2 ones with ranks sharing the one GPU (nccl, NCCL_HOSTID per rank)
#  2. S3's Composer route at the last affected and the first fixed release (composer.sh)
#  3. a real NCCL hang through `ds-doctor triage` (shared.sh's second step)
. docs/gpu/setup.sh
{ date -u; nvidia-smi; python3 -c "import torch,deepspeed,accelerate,transformers,sys;print(sys.version);print('torch',torch.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version(),torch.cuda.get_device_name(0),'ds',deepspeed.__version__,'acc',accelerate.__version__,'tf',transformers.__version__)"; nvcc --version | tail -2; } > $OUT/env.txt 2>&1
python3 -m tests.resources.nvml.record "one NVIDIA GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)), healthy, idle, $(date -u +%F)" > $OUT/nvml.json 2>/dev/null
rm -rf /tmp/r; mkdir -p /tmp/r
timeout ${RUN_LIMIT:-300} python3 -m ds_doctor.cli run --level 3 --out /tmp/r > $OUT/run.log 2>&1
echo "level3 rc=$? at $(date -u +%T)" | tee -a $OUT/run.log
tail -45 $OUT/run.log
cp /tmp/r/*.json $OUT/report.json; cp /tmp/r/*.md $OUT/report.md
tar czf $OUT/rundir.tgz --exclude='*.pt' --exclude='*.safetensors' --exclude='*.bin' -C /tmp/r .
mkdir -p /tmp/c
for v in 0.23.5 0.24.0; do
  rm -rf /tmp/c/$v; mkdir -p /tmp/c/$v
  DS_DOCTOR_STACKS=/tmp/stacks timeout ${COMPOSER_LIMIT:-75} python3 -m ds_doctor.cli run --level 3 \
    -k "optimizer_coverage and composer" --out /tmp/c/$v --with torchvision==0.26.0 --with mosaicml==$v --ignore-pins \
    --find-links $W/composer > /tmp/c/composer-$v.log 2>&1
  echo "composer $v rc=$? at $(date -u +%T)" | tee -a /tmp/c/composer-$v.log; tail -12 /tmp/c/composer-$v.log
done
tar czf $OUT/composer.tgz --exclude='*.pt' -C /tmp/c .
rm -rf /tmp/h; mkdir -p /tmp/h
DS_DOCTOR_EXTRA_PROBES=tests.resources.hang_probes TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 \
  timeout ${HANG_LIMIT:-60} python3 -m ds_doctor.cli run --level 3 -k "hangs and missing" --timeout 30 --out /tmp/h > /tmp/h/hang.log 2>&1
echo "hang rc=$? at $(date -u +%T)" | tee -a /tmp/h/hang.log; tail -12 /tmp/h/hang.log
for f in $(find /tmp/h -type d -name flight) $(find /tmp/h -name torchrun.log); do
  echo "== triage $f"; timeout 20 python3 -m ds_doctor.cli triage "$f" 2>&1 | tail -15
done > /tmp/h/triage.txt 2>&1
cat /tmp/h/triage.txt | head -40
tar czf $OUT/hang.tgz -C /tmp h
