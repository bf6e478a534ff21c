#!/bin/bash
# S3's Composer route on CUDA (Composer's FSDP passes device_id=torch.cuda.current_device(): CPU skips it), at the
# last affected and the first fixed release of mosaicml/composer#3493, pins ignored (Composer pins torch < 2.7.1).
# Needs .gpuwheels/current (run.sh) and .gpuwheels/composer (docs/gpu/composer-wheels.sh, run where there is an index).
. docs/gpu/setup.sh
export DS_DOCTOR_STACKS=/tmp/stacks
for v in 0.23.5 0.24.0; do
  rm -rf /tmp/r; mkdir -p /tmp/r
  timeout ${RUN_LIMIT:-280} python3 -m ds_doctor.cli run --level 3 -k "optimizer_coverage and composer" --out /tmp/r \
    --with torchvision==0.26.0 --with mosaicml==$v --ignore-pins --find-links $W/composer > $OUT/composer-$v.log 2>&1
  echo "composer $v rc=$?" | tee -a $OUT/composer-$v.log
  tail -25 $OUT/composer-$v.log
  cp /tmp/r/*.json $OUT/composer-$v.json; cp /tmp/r/*.md $OUT/composer-$v.md
done
