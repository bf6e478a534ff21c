#!/bin/bash
# First GPU run: install the wheels the image lacks, record NVML, run ds-doctor --level 3.
. docs/gpu/setup.sh
{ date -u; nvidia-smi; uname -a; which python3; python3 -c "import torch,deepspeed,accelerate,transformers,sys;print(sys.version);print('torch',torch.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version(),torch.cuda.get_device_name(0),'ds',deepspeed.__version__,'acc',accelerate.__version__,'tf',transformers.__version__)"; nvcc --version; python3 -m pip list 2>/dev/null | grep -i -E "nvidia-ml|pynvml|prodigy|py-spy"; } > $OUT/env.txt 2>&1
python3 -m tests.resources.nvml.record "one NVIDIA H100 80GB HBM3 (device kind nvidia-h100-x1), Firecracker VM, healthy, idle, $(date -u +%F)" > $OUT/nvml_h100_x1.json 2>$OUT/nvml.err
rm -rf /tmp/r; mkdir -p /tmp/r
timeout ${RUN_LIMIT:-480} python3 -m ds_doctor.cli run --level ${LEVEL:-3} --out /tmp/r "$@" > $OUT/run.log 2>&1
echo "run rc=$?" | tee -a $OUT/run.log
tail -60 $OUT/run.log
cp /tmp/r/*.json $OUT/report.json; cp /tmp/r/*.md $OUT/report.md
tar czf $OUT/rundir.tgz -C /tmp/r . ; ls -la $OUT
