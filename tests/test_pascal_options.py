"""PASCAL's options are used as given or refused when the model is built (fairseq's own argument parsing, the
architecture presets, task.build_model): no 0 that silently means "all heads" or "variance 1", no probability
outside [0, 1]."""
import pytest

import fairseq_syntax  # noqa: F401

from .test_bad_input import GOOD, GOOD_DE, preprocess
from .test_end_to_end import load_task


@pytest.fixture(scope="module")
def pascal_bin(tmp_path_factory):
    """A few parsed lines: enough for the task's dictionaries and syntax manifest."""
    return preprocess(tmp_path_factory.mktemp("pascal-options"), GOOD, GOOD_DE)


def build(destdir, *extra):
    task, cfg = load_task(destdir, *extra)  # --arch transformer_pascal_tiny unless extra says otherwise
    return task.build_model(cfg.model)


def pascal_of(model):
    return model.encoder.layers[0].self_attn.score_modifier


BAD = [
    (["--pascal-heads", "0"], r"--pascal-heads must be a number of heads from 1 to 4 \(4: all the layer's attention "
                              r"heads\), got 0$"),
    (["--pascal-heads", "-1"], r"--pascal-heads must be a number of heads from 1 to 4 .*got -1"),
    (["--pascal-heads", "5"], r"--pascal-heads must be a number of heads from 1 to 4 .*got 5"),
    (["--pascal-variance", "0"], r"--pascal-variance must be a positive number .*got 0\.0"),
    (["--pascal-variance", "-2"], r"--pascal-variance must be a positive number .*got -2\.0"),
    (["--pascal-variance", "nan"], r"--pascal-variance must be a positive number .*got nan"),
    (["--parent-ignoring", "1.5"], r"--parent-ignoring must be a probability from 0 to 1 .*got 1\.5"),
    (["--parent-ignoring", "-0.1"], r"--parent-ignoring must be a probability from 0 to 1 .*got -0\.1"),
    (["--pascal-combination", "max"], r"--pascal-combination must be multiply or add, got 'max'"),
    (["--pascal-combination", "add", "--pascal-parent-only"], r"--pascal-parent-only is a hard mask"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[" ".join(extra) for extra, _ in BAD])
def test_bad_pascal_option_is_refused_at_build(pascal_bin, extra, message):
    with pytest.raises(ValueError, match=message):
        build(pascal_bin, *extra)


def test_pascal_presets_and_edge_values_build(pascal_bin):
    tiny = pascal_of(build(pascal_bin))  # the preset: 2 of 4 heads, sigma^2 = 1, q = 0
    assert (tiny.num_pascal_heads, tiny.variance, tiny.parent_ignoring) == (2, 1.0, 0.0)
    edges = pascal_of(build(pascal_bin, "--pascal-heads", "4", "--pascal-variance", "0.25", "--parent-ignoring", "1"))
    assert (edges.num_pascal_heads, edges.variance, edges.parent_ignoring) == (4, 0.25, 1.0)
    multi30k = pascal_of(build(pascal_bin, "--arch", "transformer_pascal_multi30k"))
    assert (multi30k.num_pascal_heads, multi30k.parent_ignoring) == (2, 0.3)
    # transformer_pascal leaves --pascal-heads unset: all heads (made small here, only the heads matter)
    base = pascal_of(build(pascal_bin, "--arch", "transformer_pascal", "--encoder-layers", "1", "--decoder-layers",
                           "1", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32"))
    assert base.num_pascal_heads == 8
    # the paper's variants, through fairseq's own argument parsing (appendix B, Table 3b)
    assert pascal_of(build(pascal_bin, "--pascal-combination", "add")).combination == "add"
    variant = pascal_of(build(pascal_bin, "--pascal-parent-only"))
    assert variant.parent_only and variant.combination == "multiply"
    assert not tiny.parent_only and tiny.combination == "multiply"
