"""The shell scripts (CI's, the demo's, the GPU session's) at least parse: two of them run only where no test runs
them (the device machine), so a syntax error would first show there, in a session's few device minutes."""
import subprocess

import pytest

from .helpers import REPO

SCRIPTS = [".ci/run", "bench/gpu_bundle.sh", "bench/gpu_fairseq_wheel.sh", "bench/gpu_session.sh",
           "examples/multi30k/demo.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_script_parses(script):
    result = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_shell_script_is_listed():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "*.sh"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert set(tracked.stdout.split()) <= set(SCRIPTS)
