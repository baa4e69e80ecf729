"""The shell scripts (CI's, the demo's, the GPU session's) at least parse: two of them run only where no test runs
them (the device machine), so a syntax error would first show there, in a session's few device minutes."""
import os
import shutil
import subprocess
import tarfile
import time

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


def test_gpu_session_returns_the_records_written_before_its_call_is_cut(tmp_path):
    """The device machine returns only what is under $OUT when a call is cut at its limit: gpu_session.sh packs the
    results while the comparison runs (a call cut during the cross-run evaluation once lost a written record).
    Here with a stand-in comparison that writes a record, then hangs, and a stand-in nvidia-smi."""
    (tmp_path / "bench").mkdir()
    shutil.copy(REPO / "bench" / "gpu_session.sh", tmp_path / "bench")
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "setup.sh").write_text("")
    (tmp_path / "examples" / "multi30k").mkdir(parents=True)
    (tmp_path / "examples" / "multi30k" / "compare.py").write_text(
        "import os, pathlib, sys, time\n"
        f"pathlib.Path({str(tmp_path / 'stand-in.pid')!r}).write_text(str(os.getpid()))\n"
        "results = pathlib.Path(sys.argv[sys.argv.index('--results-dir') + 1]) / 'p' / 'b' / 'vanilla'\n"
        "results.mkdir(parents=True)\n"
        "(results / 'seed4.json').write_text('{}')\n"
        "time.sleep(600)\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho stand-in\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, OUT=str(out), PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", GPU_PACK_EVERY="1",
               GPU_WORK=str(tmp_path / "work"))
    session = subprocess.Popen(["bash", str(tmp_path / "bench" / "gpu_session.sh"), "300", "p", "vanilla", "4", "1",
                                "fp16", ""], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        time.sleep(6)
    finally:
        os.killpg(session.pid, 9)  # the run's limit: everything is killed, nothing runs after
        session.wait()
        # `timeout` puts the stand-in in a process group of its own, out of the session's: end that one too, so
        # that the test leaves no 600 s sleep behind
        stand_in = int((tmp_path / "stand-in.pid").read_text())
        if os.getpgid(stand_in) != os.getpgid(0):  # never the test's own group
            os.killpg(os.getpgid(stand_in), 9)
    with tarfile.open(out / "results.tgz") as packed:
        assert "results/p/b/vanilla/seed4.json" in packed.getnames()
    assert not alive(stand_in, within=5), "the stand-in comparison outlived the test"


def alive(pid: int, within: float) -> bool:
    """Whether `pid` still runs (a zombie counts as ended) after waiting up to `within` seconds for it to end."""
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                running = stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            running = False
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)
