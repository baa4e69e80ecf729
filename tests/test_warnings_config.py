"""pytest.ini filters exactly the Hydra deprecation warnings fairseq's convert_namespace_to_omegaconf causes (six
per call, see the comment there), so that every warning left in the test output is worth reading."""
import subprocess
import sys

import pytest

from .helpers import REPO

HYDRA_MESSAGES = [
    "hydra.experimental.initialize() is no longer experimental",
    "hydra.experimental.compose() is no longer experimental",
    "The version_base parameter is not specified",
    "The strict flag in the compose API is deprecated",
    "Usage of deprecated keyword in package header",
    "'config' is validated against ConfigStore schema with the same name",
]
PROBE = '''
import warnings
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

def test_probe():
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, ["data-bin", "--task", "translation", "--arch", "transformer"])
    convert_namespace_to_omegaconf(args)
    warnings.warn("a warning of our own", UserWarning)
'''


def summary(tmp_path, ini):
    (tmp_path / "test_probe.py").write_text(PROBE)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "-c", str(ini), "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow  # two pytest runs that import fairseq
def test_pytest_ini_filters_exactly_fairseqs_hydra_deprecations(tmp_path):
    (tmp_path / "empty.ini").write_text("[pytest]\n")
    unfiltered = summary(tmp_path, tmp_path / "empty.ini")
    assert all(message in unfiltered for message in HYDRA_MESSAGES), unfiltered  # fairseq still causes them
    filtered = summary(tmp_path, REPO / "pytest.ini")
    assert not [message for message in HYDRA_MESSAGES if message in filtered], filtered
    assert "a warning of our own" in filtered  # other warnings still show
