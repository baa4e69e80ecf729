"""`fairseq-syntax-evaluate`: score translations against references, and score challenge sets.

    fairseq-syntax-evaluate --system vanilla=gen.vanilla.txt --system pascal=gen.pascal.txt --baseline vanilla \\
        --data-bin DATA_BIN --gen-subset test --out-dir results/
    fairseq-syntax-evaluate --system hyp.txt --references ref.de --sources src.en

A system file is either `fairseq-generate` output (lines `H-<id>\\t<score>\\t<pieces>`, ids in any order, the
first H line of an id is taken, pieces decoded with the sentencepiece model) or a plain file of one hypothesis
per line. Reported per system: sacrebleu BLEU, chrF++ and TER with their signatures, RIBES (nltk), BLEU per
source-length bucket, and (with --baseline) sacrebleu's paired bootstrap test against the baseline with 95%
confidence intervals; optionally UAS/LAS of generated trees against a parser's parse of the same output, and the
plots. --out-dir gets results.json, results.md and the PNG plots.

    fairseq-syntax-evaluate attention --path CHECKPOINT --data-bin DATA_BIN --index 0 --layer 0 --head 0 --out-dir D
    fairseq-syntax-evaluate challenge list
    fairseq-syntax-evaluate challenge export --direction en-de --out-dir CH [--sets paper|all|NAME,...]
    fairseq-syntax-evaluate challenge score --manifest CH/manifest.json --system NAME=FILE ... --out-dir OUT
    fairseq-syntax-evaluate parse-trees --parser SPEC --lang de --generated-trees GEN.conllu --out PARSED.conllu

`attention` plots one encoder self-attention head over one sentence (PASCAL's syntax heads: layer 0, the
first heads) and saves all heads' weights to D/attention.npz, which --attention plots again.
`challenge export` writes the unique sentence pairs of the chosen Choshen & Abend challenge sets for one
direction to CH/challenge.{src,tgt} (translate CH/challenge.{src}, e.g. preprocess it as a test split and run
fairseq-generate) and CH/manifest.json, which says which lines belong to which set; `challenge score` splits the
hypotheses by the manifest and scores every set (phenomenon x domain x distance, for that direction).
`parse-trees` parses the words of generated trees (e.g. fairseq-generate --trees-out) exactly as they are, with a
spacy:MODEL or supar:PATH parser, into CoNLL-U with the same sent_ids: the --parsed-trees of the tree scores.
"""
import logging
import sys
from typing import Optional, Sequence

from . import attention, challenge, challenge_sets, parse_trees, scoring
from .metrics import EvaluationError

# the tools, one module each: scoring (the default command; its tree scoring is in `trees`), attention, challenge,
# parse_trees.
# Reading system files is in system_outputs, the shared report helpers in reporting.


def main(argv: Optional[Sequence[str]] = None):
    """Run the command; EvaluationError for inputs that cannot be scored."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "attention":
        return attention.run_attention(attention.attention_parser().parse_args(argv[1:]))
    if argv and argv[0] == "challenge":
        return challenge.run_challenge(challenge.challenge_parser().parse_args(argv[1:]))
    if argv and argv[0] == "parse-trees":
        return parse_trees.run_parse_trees(parse_trees.parse_trees_parser().parse_args(argv[1:]))
    return scoring.run_score(scoring.score_parser(description=__doc__).parse_args(argv))


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    # importing fairseq sets the root logger to DEBUG (fairseq.tasks.text_to_speech): keep matplotlib's font
    # search and sacrebleu's progress messages off the terminal
    logging.getLogger().setLevel(logging.WARNING)
    try:
        main(argv)
    except (EvaluationError, challenge_sets.ChallengeSetError, FileNotFoundError) as error:
        print(f"fairseq-syntax-evaluate: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
