#!/bin/bash
# Run HERE (with an index), before a GPU session: the wheels S3's Composer route needs on the GPU image (Python 3.12,
# torch 2.11, no index), into .gpuwheels/composer (carried with `run`'s carry). torch itself is never among them.
set -euo pipefail
D=${1:-.gpuwheels/composer}
mkdir -p "$D"
BIN=(--python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
     --only-binary=:all: --no-deps -q -d "$D")
# torchvision matching the image's torch 2.11 (composer imports it at start-up); Composer on both sides of #3502
for spec in torchvision==0.26.0 mosaicml==0.23.5 mosaicml==0.24.0; do python3 -m pip download "${BIN[@]}" "$spec"; done
# what both need that the image lacks (as --ignore-pins resolved it here for 0.23.5, torch's CUDA parts left out)
python3 -m pip download "${BIN[@]}" "torchmetrics==1.3.2" "torch-optimizer==0.3.0" "pytorch-ranger==0.1.1" \
  "coolname==2.2.0" "tabulate==0.9.0" "importlib-metadata==6.11.0" zipp "mosaicml-cli==0.6.42" \
  "lightning-utilities==0.15.3" backoff arrow argcomplete gql graphql-core yarl multidict propcache websockets \
  tenacity termcolor protobuf python-dateutil questionary prompt-toolkit wcwidth ruamel-yaml validators tzdata six
du -sh "$D"
