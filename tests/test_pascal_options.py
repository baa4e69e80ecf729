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


# Table 7 of the paper (appendix A), copied from the paper: corpus -> (h_P, q, beta_2); dropout 0.3 and 20K updates
# on the small corpora (NC11, WMT18 En-Tr), Transformer base's 0.1 and 100K updates on the others
TABLE_7 = {
    "nc11_en_de": (2, 0.4, 0.997, 0.3, 20_000),
    "nc11_de_en": (8, 0.0, 0.997, 0.3, 20_000),
    "wmt18_en_tr": (7, 0.3, 0.980, 0.3, 20_000),
    "wmt16_en_de": (5, 0.0, 0.980, 0.1, 100_000),
    "wmt17_en_de": (7, 0.3, 0.997, 0.1, 100_000),
    "wat_en_ja": (7, 0.0, 0.997, 0.1, 100_000),
}


@pytest.mark.parametrize("corpus", sorted(TABLE_7))
def test_the_papers_table_7_settings_parse_and_build(pascal_bin, corpus):
    """Each corpus's preset and training options go through fairseq's own parsing and give the paper's model:
    Transformer base (6 + 6 layers, 512, FFN 2048, 8 heads), PASCAL on h_P heads of layer 0 with q, sigma^2 = 1."""
    from fairseq import options

    from fairseq_syntax.models.presets.pascal import PAPER_GENERATION_OPTIONS, paper_training_options

    heads, q, beta2, dropout, updates = TABLE_7[corpus]
    training = paper_training_options(corpus)
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       [str(pascal_bin), "-s", "en", "-t", "de", *training])
    assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim,
            args.encoder_attention_heads) == (6, 6, 512, 2048, 8)
    assert (args.pascal_heads, args.parent_ignoring, args.dropout) == (heads, q, dropout)
    assert eval(args.adam_betas) == (0.9, beta2) and args.lr == [7e-4] and args.warmup_updates == 8000
    assert args.max_tokens * args.update_freq[0] == 32_768 and args.max_update == updates
    assert args.label_smoothing == 0.1
    assert PAPER_GENERATION_OPTIONS == ["--beam", "4", "--lenpen", "0.6"]
    if corpus == "nc11_en_de":  # one full build (a base-size model): the mechanism sees the preset's values
        pascal = pascal_of(build(pascal_bin, "--arch", f"transformer_pascal_{corpus}"))
        assert (pascal.num_pascal_heads, pascal.variance, pascal.parent_ignoring) == (heads, 1.0, q)


def test_table_7_options_refuse_an_unknown_corpus_or_gpu_count():
    from fairseq_syntax.models.presets.pascal import paper_training_options

    with pytest.raises(ValueError, match="no Table 7 setting 'nc12'"):
        paper_training_options("nc12")
    assert "--update-freq" in paper_training_options("nc11_en_de", gpus=4)
    assert paper_training_options("nc11_en_de", gpus=4)[paper_training_options("nc11_en_de", gpus=4).index(
        "--update-freq") + 1] == "2"
    with pytest.raises(ValueError, match="--gpus 3"):
        paper_training_options("nc11_en_de", gpus=3)
