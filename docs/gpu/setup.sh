# Sourced first by every GPU script: the environment they share. The wheels the GPU image lacks ($WHEELS, default
# .gpuwheels, carried with `run`'s carry: its current/ folder is shared/gpu-wheels/current) installed with no index
# into /tmp/site, ds-doctor importable as ds_doctor from this checkout (linktree.sh), DeepSpeed's JIT builds for
# Hopper with the plain capability (the image's 9.0a stops them: known issue ds_cuda_arch_variant_suffix).
set -o pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
W=${WHEELS:-.gpuwheels}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $W/current/*.whl || exit 9
. docs/gpu/linktree.sh
export PYTHONPATH=/tmp/site:/tmp/dsd:$PWD PATH=/tmp/site/bin:$PATH
