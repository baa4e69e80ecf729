#!/usr/bin/env bash
# One GPU session's checks in one command on the device machine (docs/results.md, "GPU checks"): the CUDA tests
# given as pytest -k (in the background) beside a comparison profile on the GPU, within a time limit. What comes
# back under $OUT: gpu.txt (card, driver, versions), cuda-tests.log, compare.log, results.tgz (results/PROFILE/:
# the results files of every run finished there, written apart from the committed ones, whose runs compare.py
# would otherwise train without recording; runs.json; the runs' train logs).
#
# Before, here (the device machine has no package registry; its working tree is limited to 64 MiB):
#   bash bench/gpu_fairseq_wheel.sh                # optional, saves ~2.5 device minutes: fairseq-fixed's wheel
#   bash bench/gpu_bundle.sh [WHEEL]               # .gpu/: the wheels, fairseq-fixed, the test data
#   tar -cJf .gpu/data-bins.tar.xz -C OUT/data NAME   # optional: data-bins made here by compare.py --out OUT
#                                                  # (not OUT/data/NAME.command: its paths are this machine's)
# On the device (run with carry [".gpu"]):
#   bash bench/gpu_session.sh SECONDS PROFILE SYSTEMS SEEDS JOBS PRECISION "PYTEST -k EXPRESSION"
# (SECONDS: the whole script, setup and packing included; give the run call a timeout_s at least 10 s above it)
# (PRECISION: fp32, fp16 or bf16; each training job has one CPU thread: on the GPU it only feeds the kernels)
# A comparison longer than one command (the 10-minute limit; e.g. the full ldd-multi30k profile): give
# GPU_WORK=work/compare-gpu to both calls. The work then lies in an ignored folder of the working tree, which the warm
# machine keeps between calls (the next call must come before its idle release, ~30 s); the second call's compare.py
# resumes every unfinished training from its checkpoint_last.pt. Without it the work is in /tmp/compare-gpu.
set -uo pipefail
seconds=${1:?seconds for the comparison}; profile=${2:?profile}; systems=${3:?systems}; seeds=${4:?seeds}
jobs=${5:-4}; precision=${6:-fp32}; tests=${7:-}
cd "$(dirname "$0")/.."
source .gpu/setup.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
work=$(realpath -m "${GPU_WORK:-/tmp/compare-gpu}")
mkdir -p "$work/data"
if [ -f .gpu/data-bins.tar.xz ]; then
  tar -xJf .gpu/data-bins.tar.xz -C "$work/data"
  # compare.py resolves supar:@NAME to a parser file (parsers/NAME.supar, else OUT/parsers/NAME.supar, else it
  # trains one) before it sees that the data-bin exists: the given data-bins are not parsed again, so an empty
  # stand-in spares carrying the parsers (7 MB each; a data-bin it would have to make fails on it loudly)
  mkdir -p "$work/parsers"
  for name in en_ewt de_gsd_pud; do [ -e "parsers/$name.supar" ] || : > "$work/parsers/$name.supar"; done
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, fairseq; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'fairseq', fairseq.__version__)"
  nproc; } > "$OUT/gpu.txt" 2>&1
if [ -n "$tests" ]; then
  # beside the comparison, on 2 workers of 2 threads; stopped by SIGINT, pytest still prints the failures so far
  # with their tracebacks (a plain kill once left 2 failures without a word of why)
  OMP_NUM_THREADS=2 timeout -s INT -k 5 $((seconds - SECONDS - 25)) python3 -m pytest -v -rfE --tb=long \
    -p no:cacheprovider -n 2 tests -k "$tests" \
    > "$OUT/cuda-tests.log" 2>&1 &
fi
pack() {  # the results so far, replaced whole (a call cut at its limit returns what $OUT holds then)
  local part=/tmp/results.$BASHPID.tgz paths
  paths=$(cd "$work" && ls -d results/"$profile" runs.json systems/*/*/*/train.log 2>/dev/null)
  [ -n "$paths" ] && tar -czf "$part" -C "$work" $paths && mv "$part" "$OUT/results.tgz"
}
# every GPU_PACK_EVERY (30) s while the comparison runs: a call cut by the run's own limit once lost a record
# written 100 s before it
( while sleep "${GPU_PACK_EVERY:-30}"; do pack; done ) &
packer=$!
# SECONDS: the whole script, setup included, with 15 s left for the last pack
timeout $((seconds - SECONDS - 15)) python3 examples/multi30k/compare.py --profile "$profile" --systems "$systems" \
  --seeds "$seeds" --jobs "$jobs" --threads 1 --device cuda $([ "$precision" = fp32 ] || echo "--$precision") \
  --out "$work" --results-dir "$work/results" > "$OUT/compare.log" 2>&1
rc=$?
# timeout ends compare.py, not the trainings it started: those of this comparison (their command lines hold its
# folder; a bare `pkill -f fairseq-train` once ended another comparison's training on the machine it was tried on)
pkill -f -- "$work/"
kill "$packer"
echo "compare.py exit $rc after ${SECONDS}s" >> "$OUT/compare.log"
wait
pack || echo "no results to pack" >> "$OUT/compare.log"
tail -5 "$OUT/compare.log"; tail -3 "$OUT/cuda-tests.log" 2>/dev/null
exit $rc  # compare.py's: 124 when cut by its time limit
