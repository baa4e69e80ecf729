"""The systems that the comparison run (examples/multi30k/compare.py) and the benchmark (bench/bench.py) put side
by side: the vanilla baseline and every syntax method, each as its Multi30k-sized architecture preset (the same
sizes, models/sizes.py). A new method joins both by adding its line here."""
from pathlib import Path
from typing import List, Optional

BASELINE = "vanilla"
MULTI30K_SYSTEMS = {
    BASELINE: ["--arch", "transformer_multi30k"],  # stock fairseq transformer
    "pascal": ["--arch", "transformer_pascal_multi30k"],
    "lisa": ["--arch", "transformer_lisa_multi30k"],
    "sh": ["--arch", "transformer_sh_multi30k"],  # Sennrich & Haddow label embeddings
    "multitask": ["--arch", "transformer_multitask_multi30k"],  # Currey & Heafield: a stock transformer ...
}
# ... on a data-bin of its own: systems whose method lives in the data, with the fairseq-syntax-preprocess options
# that make their data-bin from the same lines (and the shared data-bin's sentencepiece model, so hypotheses
# decode and score alike). Such a data-bin carries no channels of the target side.
OWN_DATA_BIN_OPTIONS = {"multitask": ["--multitask-parse"]}


def own_data_bin_command(system: str, shared: Path, destdir: Path, raw: Path, src: str, tgt: str, src_parser: str,
                         splits=("train", "valid", "test")) -> Optional[List]:
    """The fairseq-syntax-preprocess arguments of `system`'s own data-bin, or None if it trains on the shared one."""
    if system not in OWN_DATA_BIN_OPTIONS:
        return None
    prefixes = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}
    return ["-s", src, "-t", tgt, *[arg for split in splits for arg in (prefixes[split], raw / split)],
            "--source-parser", src_parser, "--spm-model", shared / "spm.model", "--destdir", destdir,
            "--workers", "2", *OWN_DATA_BIN_OPTIONS[system]]
