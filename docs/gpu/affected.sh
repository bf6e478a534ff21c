#!/bin/bash
# The affected versions of S2's and S4's known issues over the current wheels, to show the crashes live.
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
W=${WHEELS:-.gpuwheels}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $W/current/*.whl || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/aff $W/affected/*.whl || exit 9
. docs/gpu/linktree.sh
export PYTHONPATH=${SHIM:+$PWD/docs/gpu/shim:}/tmp/aff:/tmp/site:/tmp/dsd:$PWD PATH=/tmp/aff/bin:/tmp/site/bin:$PATH
python3 -c "import deepspeed, prodigyplus, importlib.metadata as m; print('ds', deepspeed.__version__, 'ppsf', m.version('prodigy-plus-schedule-free'))" 2>&1 | tail -3
rm -rf /tmp/r; mkdir -p /tmp/r
timeout ${RUN_LIMIT:-420} python3 -m ds_doctor.cli run --level 3 -k "${K:-zero_offload or optimizer_state_placement}" --out /tmp/r > $OUT/affected.log 2>&1
echo "run rc=$?" | tee -a $OUT/affected.log
tail -40 $OUT/affected.log
cp /tmp/r/*.json $OUT/affected.json; cp /tmp/r/*.md $OUT/affected.md
tar czf $OUT/affected-rundir.tgz -C /tmp/r .
