#!/bin/bash
# rule (e): usage .chk.sh <tracker-key> <issues|discussions> <N>
# greps every owner/repo spelling of the tracker, case-insensitive, no digit after N, outside .venv/build/.git
key=$1; kind=$2; n=$3
case $key in
  ds) repos="deepspeedai/DeepSpeed microsoft/DeepSpeed";;
  acc) repos="huggingface/accelerate";;
  tf) repos="huggingface/transformers";;
  peft) repos="huggingface/peft";;
  trl) repos="huggingface/trl";;
  torch) repos="pytorch/pytorch";;
  nccl) repos="NVIDIA/nccl";;
  lf) repos="hiyouga/LLaMA-Factory hiyouga/LlamaFactory";;
  ax) repos="axolotl-ai-cloud/axolotl OpenAccess-AI-Collective/axolotl";;
  swift) repos="modelscope/ms-swift modelscope/swift";;
  orl) repos="OpenRLHF/OpenRLHF";;
  verl) repos="volcengine/verl verl-project/verl";;
esac
hit=0
# [48i] greps /work/main, which holds every earlier sample under bench/triage_fresh/ (2026-11-29 .. 2026-11-29h)
for r in $repos; do
  url="github.com/$r/$kind/$n"
  out=$(grep -rIi --exclude-dir=.venv --exclude-dir=build --exclude-dir=.git -F -e "$url" /work/main 2>/dev/null | grep -iE "github\.com/$r/$kind/$n([^0-9]|$)")
  if [ -n "$out" ]; then hit=1; echo "HIT $url:"; echo "$out" | cut -c1-200 | head -5; fi
done
[ $hit = 0 ] && echo "CLEAR $key $kind/$n"
