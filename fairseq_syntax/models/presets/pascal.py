"""Architecture presets of the PASCAL family (Bugliarello & Okazaki, 2020), and the paper's per-corpus settings
(appendix A, Table 7) as presets plus the training options that go with them.

Table 7 gives, per corpus, the number of PASCAL heads h_P, the parent ignoring probability q and Adam's beta_2
(lr 7e-4 everywhere); the text beside it: Transformer base, PASCAL in the first layer, sigma^2 = 1, Vaswani et al.'s
schedule with 8,000 warm-up steps, label smoothing 0.1, batches of 32K tokens, 20K updates and dropout 0.3 on the
small corpora (NC11, WMT18 En-Tr), 100K updates (dropout 0.1, Transformer base's) on the large ones, beam 4 with
length penalty 0.6. An architecture preset can only hold the model's part (`transformer_pascal_<corpus>`: h_P, q,
dropout); `paper_training_options(corpus)` gives the fairseq-train options of the rest, PAPER_GENERATION_OPTIONS
those of fairseq-generate (docs/methods.md, "PASCAL")."""
from dataclasses import dataclass
from typing import List

from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer


# ---- the paper's settings (Table 7) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class PaperSetting:
    """One column of Table 7 and the training text beside it (appendix A)."""
    pascal_heads: int  # h_P, of the layer's 8
    parent_ignoring: float  # q
    adam_beta2: float
    small_data: bool  # 20K updates and dropout 0.3 ("on small-scale data"), else 100K updates and dropout 0.1

    @property
    def dropout(self) -> float:
        return 0.3 if self.small_data else 0.1

    @property
    def max_update(self) -> int:
        return 20_000 if self.small_data else 100_000


PAPER_SETTINGS = {
    "nc11_en_de": PaperSetting(2, 0.4, 0.997, small_data=True),
    "nc11_de_en": PaperSetting(8, 0.0, 0.997, small_data=True),
    "wmt18_en_tr": PaperSetting(7, 0.3, 0.980, small_data=True),
    "wmt16_en_de": PaperSetting(5, 0.0, 0.980, small_data=False),
    "wmt17_en_de": PaperSetting(7, 0.3, 0.997, small_data=False),
    "wat_en_ja": PaperSetting(7, 0.0, 0.997, small_data=False),
}
PAPER_LR = 7e-4
PAPER_WARMUP = 8_000
PAPER_BATCH_TOKENS = 32_768  # "a batch size of 32K tokens", over the paper's 16 GPUs


def _paper_preset(corpus: str, setting: PaperSetting) -> Preset:
    return Preset(f"Table 7, {corpus}: Transformer base, PASCAL on {setting.pascal_heads} of the 8 heads of encoder "
                  f"layer 0, sigma^2 = 1, q = {setting.parent_ignoring}, dropout {setting.dropout}.",
                  defaults=dict(pascal_heads=setting.pascal_heads, parent_ignoring=setting.parent_ignoring,
                                dropout=setting.dropout))


# ---- the presets: the family's, this project's sizes, Table 7's (transformer_pascal_<corpus>) --------------------

_PRESETS = register_family("syntax_transformer", "transformer_pascal", {
    "": Preset("Transformer base (6+6 layers, 512, 8 heads) with PASCAL in the first encoder layer, all heads, "
               "sigma^2=1."),
    "_multi30k": Preset(
        "Sized for ~30k sentence pairs (Multi30k): 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3; PASCAL on 2 of "
        "the 4 heads of encoder layer 0, sigma^2 = 1, parent ignoring q = 0.3.\n\n"
        "This project's own setting, not the paper's. Bugliarello & Okazaki's small-data models (NC11, Table 7) are "
        "base transformers (6+6 layers, 512, 8 heads, dropout 0.3) with 2 of 8 heads PASCAL and q = 0.4 for En-De (8 "
        "of 8 and q = 0 for De-En). Here the model is smaller, half of the layer's heads are PASCAL (the paper's "
        "En-De: a quarter) and q is 0.3 (the paper's En-De: 0.4); --pascal-heads and --parent-ignoring override "
        "both.",
        MULTI30K, dict(pascal_heads=2, parent_ignoring=0.3)),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads of which 2 are PASCAL.", TINY, dict(pascal_heads=2)),
    **{f"_{corpus}": _paper_preset(corpus, setting) for corpus, setting in PAPER_SETTINGS.items()},
}, base=base_syntax_transformer, defaults=dict(encoder_syntax="pascal", pascal_variance=1.0, parent_ignoring=0.0))
transformer_pascal = _PRESETS["transformer_pascal"]
transformer_pascal_multi30k = _PRESETS["transformer_pascal_multi30k"]
transformer_pascal_tiny = _PRESETS["transformer_pascal_tiny"]


def paper_training_options(corpus: str, gpus: int = 1) -> List[str]:
    """fairseq-train options (after the data-bin and --user-dir) of Table 7's `corpus` on `gpus` GPUs: the preset,
    Adam (0.9, beta_2), lr 7e-4 with 8,000 inverse-square-root warm-up steps, label smoothing 0.1, the 32K-token
    batch as --max-tokens 4096 times --update-freq, and the paper's number of updates."""
    if corpus not in PAPER_SETTINGS:
        raise ValueError(f"no Table 7 setting {corpus!r}: one of {', '.join(PAPER_SETTINGS)}")
    if gpus < 1 or PAPER_BATCH_TOKENS % (4096 * gpus):
        raise ValueError(f"--gpus {gpus}: the 32K-token batch is 8 x 4096 tokens, so 1, 2, 4 or 8 GPUs")
    setting = PAPER_SETTINGS[corpus]
    return ["--task", "syntax_translation", "--arch", f"transformer_pascal_{corpus}",
            "--optimizer", "adam", "--adam-betas", f"(0.9, {setting.adam_beta2})", "--lr", str(PAPER_LR),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(PAPER_WARMUP), "--warmup-init-lr", "1e-07",
            "--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--max-tokens", "4096", "--update-freq", str(PAPER_BATCH_TOKENS // (4096 * gpus)),
            "--max-update", str(setting.max_update)]


PAPER_GENERATION_OPTIONS = ["--beam", "4", "--lenpen", "0.6"]

