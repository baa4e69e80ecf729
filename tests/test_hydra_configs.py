"""fairseq-hydra-train builds the model fairseq-train builds, for every registered system: the model config composed
as fairseq_cli/hydra_train.py composes it (hydra's compose over fairseq's config schema, add_defaults, resolved),
with one of the system's own options set away from its default as a key of `model:`, gives the same parameters
(same seed) and the same loss and gradients on the same batch as the same options on the command line. An option
lost on the way (as every PASCAL option once was) changes the loss, the shapes or the gradients.
(tests/test_syntax_contract.py trains PASCAL through the real fairseq-hydra-train command.)"""
import pytest
import torch
from omegaconf import OmegaConf

from .helpers import USER_DIR
from .test_end_to_end import data_bin  # noqa: F401  (module fixture: a small Multi30k syntax data-bin)
from .test_dyn_stgcd import parsed_bin  # noqa: F401
from .test_ldd import ldd_bin  # noqa: F401
from .test_supar_parser import tiny_model  # noqa: F401
from .test_training_options import assert_same_step, collate, setup, step
from .test_training_reliability import METHODS, method_bin, multitask_bin  # noqa: F401
from .test_transition_decoding import transition_bin  # noqa: F401

# the stock transformer at the presets' size (the comparison's baseline) and the syntax transformer without a
# mechanism, beside every method
SYSTEMS = {"vanilla": ["--arch", "transformer_tiny_vanilla"],
           "syntax_transformer": ["--arch", "transformer_pascal_tiny", "--encoder-syntax", "none"], **METHODS}
# one option of each system away from its default (one that changes the loss, the shapes or the gradients)
OPTIONS = {
    "vanilla": {"dropout": 0.3},
    "syntax_transformer": {"dropout": 0.3},
    "pascal": {"parent_ignoring": 0.3},
    "lisa": {"lisa_loss_weight": 0.25},
    "sh": {"label_embed_dim": 6},
    "multitask": {"dropout": 0.3},
    "ldd": {"ldd_variant": "udp"},
    "gcn": {"encoder_gcn_dim": 8},
    "birnn_gcn": {"encoder_gcn_dim": 8},
    "birnn": {"dropout": 0.3},  # no option of its own
    "rgse": {"rgse_residual": "normal"},
    "lstm_gcn": {"encoder_gcn_dim": 8},
    "lstm_rgse": {"rgse_variant": "forward"},
    "linearized": {"dropout": 0.3},
    "bitran": {"bitran_prefixes": 2},
    "parent": {"parent_head": 1},
    "gcn_decoder": {"decoder_gcn_layers": 1},
    "parent_b3": {"parent_head": 1},  # (and reencode_every 3, the system's own)
    "dyn_stgcd": {"dyn_stgcd_graph_dim": 16, "dyn_stgcd_graph_loss_weight": 0.5},
}


def command_line(options):
    flags = []
    for name, value in options.items():
        flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def hydra_config(tmp_path, destdir, direction, arch, options):
    """The config fairseq-hydra-train would run, composed in-process as fairseq_cli/hydra_train.py does."""
    from fairseq.dataclass.initialize import add_defaults, hydra_init
    from fairseq.dataclass.utils import omegaconf_no_object_check
    from hydra import compose, initialize_config_dir

    model = {"_name": arch, **options}
    # fairseq's schema ("config", registered by hydra_init) under the system's keys, as its config.yaml has it
    config = {"defaults": ["config", "_self_"],
              "common": {"cpu": True, "seed": 1, "user_dir": str(USER_DIR)},
              "task": {"_name": "syntax_translation", "data": str(destdir), "source_lang": direction[0],
                       "target_lang": direction[1]},
              "model": model,
              "criterion": {"_name": "syntax_label_smoothed_cross_entropy", "label_smoothing": 0.1}}
    (tmp_path / "system.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    hydra_init("config")
    # version_base "1.1": hydra keeps it process-wide, and fairseq 0.12 composes its own configs under 1.1 rules
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.1"):
        cfg = compose(config_name="system")
    add_defaults(cfg)
    with omegaconf_no_object_check():
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return cfg


# LDD and multi-task need data-bins of their own (a SuPar parser; a multi-task preprocessing), and of the target-side
# decoders make test keeps Linearized and the GCN decoder: the others in make test-slow
SLOW = ("ldd", "multitask", "bitran", "parent", "parent_b3", "dyn_stgcd")


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in SYSTEMS])
def test_hydra_builds_and_trains_what_the_command_line_does(data_bin, method, request, tmp_path):  # noqa: F811
    from fairseq import tasks

    destdir, _, src, _, tgt = method_bin(method, data_bin, request)
    arch = SYSTEMS[method][SYSTEMS[method].index("--arch") + 1]
    extra = [a for a in SYSTEMS[method] if a not in ("--arch", arch)]  # (edge dropout 0: deterministic steps)
    options = {**{extra[i][2:].replace("-", "_"): extra[i + 1] for i in range(0, len(extra), 2)}, **OPTIONS[method]}
    task, cfg = setup(destdir, (src, tgt), "--arch", arch, *command_line(options))
    batch = [collate(task, range(6))]
    expected = step(task, cfg, batch)
    hydra_cfg = hydra_config(tmp_path, destdir, (src, tgt), arch, options)
    hydra_task = tasks.setup_task(hydra_cfg.task)
    hydra_task.build_model(hydra_cfg.model)
    hydra_task.load_dataset("train")
    built = step(hydra_task, hydra_cfg, [collate(hydra_task, range(6))])
    for name, value in options.items():  # the model's config holds the option as given
        assert str(getattr(hydra_cfg.model, name)) == str(value), name
    shapes = {name: p.shape for name, p in expected[0].named_parameters()}
    assert {name: p.shape for name, p in built[0].named_parameters()} == shapes
    for name, parameter in expected[0].state_dict().items():
        torch.testing.assert_close(built[0].state_dict()[name], parameter, rtol=0, atol=0, msg=name)
    assert_same_step(expected, built, f"{method} through hydra")
    # and the option matters: the same system at its defaults trains differently
    default_task, default_cfg = setup(destdir, (src, tgt), *SYSTEMS[method])
    default = step(default_task, default_cfg, [collate(default_task, range(6))])
    differs = ({n: p.shape for n, p in default[0].named_parameters()} != shapes
               or abs(default[1] - expected[1]) > 1e-6
               or any(not torch.allclose(default[2][n], expected[2][n]) for n in expected[2] if n in default[2]))
    assert differs, f"{method}: {OPTIONS[method]} changes nothing, so this test could not see it lost"
