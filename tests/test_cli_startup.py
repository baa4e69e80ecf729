"""What every command prints before doing anything: no advice to install packages (fairseq's text_to_speech task
logged "Please install tensorboardX" at import, in every command, until tensorboardX joined requirements/)."""
import pytest

from .helpers import USER_DIR, run_cli


@pytest.mark.parametrize("command", [  # make test: fairseq-train (which imports the most); make test-slow all
    pytest.param(["fairseq-syntax-preprocess", "--help"], marks=pytest.mark.slow),
    pytest.param(["fairseq-syntax-evaluate", "--help"], marks=pytest.mark.slow),
    ["fairseq-train", "--user-dir", USER_DIR, "--task", "syntax_translation", "--help"],
], ids=lambda command: command[0])
def test_commands_start_without_install_advice(command):
    result = run_cli(*command)
    output = result.stdout + result.stderr
    assert "usage:" in output
    assert "tensorboardX" not in output and "Please install" not in output, output[:2000]


def test_tensorboard_logging_has_a_writer():
    """--tensorboard-logdir writes through tensorboardX (torch.utils.tensorboard needs the absent `tensorboard`):
    without it fairseq warns and logs nothing there."""
    from fairseq.logging import progress_bar
    assert progress_bar.SummaryWriter is not None
