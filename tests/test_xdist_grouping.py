"""`make test` runs pytest -n 2 --dist loadgroup, and modules whose fixtures are costly (tests/test_raw_text.py's
trained models, tests/test_ldd.py's parser, the end-to-end runs compared with each other) carry an xdist_group
mark so that one worker runs them all and builds each module fixture once. Under pytest 9.2 with xdist 3.8 the
grouping silently stopped (pytest-xdist issue #1386) and every worker built those fixtures again; this runs a
small suite the same way and counts the builds."""
import os
import subprocess
import sys

GROUPED = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("costly")


@pytest.fixture(scope="module")
def costly():
    with open(os.environ["BUILDS"], "a") as sink:
        sink.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")


@pytest.mark.parametrize("i", range(6))
def test_uses_it(costly, i):
    pass
'''
OTHER = '''
import time


def test_other_{i}():
    time.sleep(0.2)
'''


def test_a_grouped_module_runs_on_one_worker_and_builds_its_fixture_once(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    for i in range(4):
        (tmp_path / f"test_other_{i}.py").write_text(OTHER.format(i=i))
    builds = tmp_path / "builds.txt"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                             "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                             str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "BUILDS": str(builds)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    workers = builds.read_text().split()
    assert len(workers) == 1 and workers[0].startswith("gw"), workers
