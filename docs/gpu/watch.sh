#!/bin/bash
# issue 15 on a GPU node: the watch in real one-GPU jobs (tests/resources/watch_jobs.py), current and affected
# versions, and bench/bench_collect.py. Wheels at $WHEELS (default .gpuwheels), as run.sh.
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
W=${WHEELS:-.gpuwheels}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $W/current/*.whl || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/aff-ds $W/affected/deepspeed-*.whl || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/aff-ppsf $W/affected/prodigy_plus*.whl || exit 9
. docs/gpu/linktree.sh
BASE=/tmp/site:/tmp/dsd:$PWD
job() {  # name pythonpath-prefix job plant [raise]
  name=$1; pre=$2; shift 2; mkdir -p /tmp/w/$name
  echo "=== $name: $*"
  PYTHONPATH=$pre$BASE timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    tests/resources/watch_jobs.py "$1" "$2" /tmp/w/$name "${3:-none}" > /tmp/w/$name/log.txt 2>&1
  echo "rc=$?"; grep -E "ds-doctor|DoctorError|Error" /tmp/w/$name/log.txt | grep -v WARNING | tail -6
  cat /tmp/w/$name/rank0.json 2>/dev/null; echo
}
job ds "" deepspeed none
job ds-s1 "" deepspeed s1 error
job acc "" accelerate none
job ppsf "" accelerate ppsf
job ppsf-1.8.51 /tmp/aff-ppsf: accelerate ppsf
job trainer "" trainer none
job ds-0.14.2 $PWD/docs/gpu/shim:/tmp/aff-ds: deepspeed none
echo "=== bench"; PYTHONPATH=$BASE python3 bench/bench_collect.py 2>&1 | tee /tmp/w/bench.txt
python3 - <<'PY'
import json, pathlib
for p in sorted(pathlib.Path("/tmp/w").glob("*/*.json")):
    if p.name.startswith("rank"):
        continue
    r = json.loads(p.read_text())
    for c in r["results"]:
        print(p.parent.name, p.name, c["case"], c["outcome"], c["device_kind"], (c["known_issue"] or {}).get("id"),
              c["notes"]["check_ms_per_rank"], [(f["invariant"], f["severity"], f["message"][:120]) for f in c["findings"]])
PY
tar czf $OUT/watch-runs.tgz -C /tmp w
