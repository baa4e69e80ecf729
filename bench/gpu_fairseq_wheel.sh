#!/usr/bin/env bash
# Builds fairseq-fixed's cp312 wheel here, against the GPU image's torch and numpy, so that the device machine
# installs it (seconds) instead of compiling it (~2.5 of its device minutes; docs/results.md, GPU checks).
# fairseq's setup.py imports torch, and the PyPI torch of that version is a CUDA build that imports only with its
# nvidia-* wheels: they come too, into a throwaway venv (~3.5 GB, ~1 min from the registry). The build itself is
# 2-5 min on 2 cores. Needs a Python 3.12 (PYTHON312, else pyenv's or python3.12 on PATH).
# Usage: bash bench/gpu_fairseq_wheel.sh [TORCH_VERSION [NUMPY_VERSION]]   (default: the H100 image's, 2.11.0 and
# 2.5.2), then bash bench/gpu_bundle.sh work/gpu-wheel/fairseq_fixed-*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
torch_version=${1:-2.11.0}; numpy_version=${2:-2.5.2}
python312=${PYTHON312:-}
if [ -z "$python312" ]; then
  python312=$(ls "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
  python312=${python312:-$(command -v python3.12 || true)}
fi
[ -n "$python312" ] || { echo "no Python 3.12 found: set PYTHON312" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python312" -m venv "$work/venv"
# setuptools < 82: torch's own pin; no CUDA_HOME: only the CPU extensions, as on the device (setup.sh)
"$work/venv/bin/pip" install -q "torch==$torch_version" "numpy==$numpy_version" "setuptools<82" cython wheel
"$work/venv/bin/python" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$work/sdist" \
  fairseq-fixed==0.12.3.1
mkdir -p work/gpu-wheel
env -u CUDA_HOME "$work/venv/bin/pip" wheel -q --no-index --no-deps --no-build-isolation -w work/gpu-wheel \
  "$work"/sdist/fairseq_fixed-0.12.3.1.tar.gz
ls work/gpu-wheel/fairseq_fixed-*-cp312-*.whl
