"""A run without the shared data must not look like a green suite: it says how many tests it skipped for it."""
import os
import re
import subprocess
import sys

from .helpers import REPO


def test_a_run_without_the_shared_data_counts_its_skips_loudly(tmp_path):
    # one module whose tests need the data root (the data_root fixture) beside tests that do not
    env = {**os.environ, "DATA_ROOT": str(tmp_path / "no-data"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "tests/test_transitions.py", "-k", "ewt or conllu"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    skipped = re.search(r"(\d+) skipped", output)
    assert run.returncode == 0 and skipped, output[-3000:]
    loud = f"{skipped.group(1)} tests SKIPPED for lack of the shared data at {tmp_path / 'no-data'}"
    assert loud in output, output[-3000:]
