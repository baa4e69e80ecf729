"""`fairseq-syntax-train`: fairseq-train, with bfloat16 training on GPU (and CPU).

fairseq 0.12 takes `--bf16` to mean TPU training (options.py sets args.tpu whenever bf16 is on, and the trainer then
asks torch_xla for a device; facebookresearch/fairseq#4696). Its bf16 code path itself (model in bfloat16, fp32
master weights in FP16Optimizer, no loss scaling) is device-neutral, so this entry point only undoes that one
implication unless --tpu was given. Every other option and behaviour is fairseq-train's own.
"""
import logging
import os
import sys
from typing import List, Optional

from fairseq import distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli.train import main as train_main


def configure_logging():
    """fairseq-train's log format (fairseq_cli/train.py configures it before importing fairseq, whose import
    leaves a plain root handler otherwise; this package imports fairseq first)."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=os.environ.get("LOGLEVEL", "INFO").upper(), stream=sys.stdout, force=True)


def parse_training_args(argv: Optional[List[str]] = None):
    argv = sys.argv[1:] if argv is None else argv
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=argv)
    if getattr(args, "bf16", False) and "--tpu" not in argv:
        args.tpu = False  # bf16 on the device chosen as usual (CUDA when available, else --cpu)
    return args


def cli_main(argv: Optional[List[str]] = None) -> None:
    configure_logging()
    cfg = convert_namespace_to_omegaconf(parse_training_args(argv))
    distributed_utils.call_main(cfg, train_main)


if __name__ == "__main__":
    cli_main()
