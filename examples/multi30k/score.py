"""Score fairseq-generate output with sacrebleu: hypotheses are decoded with the data-bin's sentencepiece model
(so the text is exactly what the model produced, no tokenisation left) and compared with the kept references."""
import argparse
import json
import sys

from pathlib import Path

import sacrebleu

from fairseq_syntax.evaluation.system_outputs import parse_generate_output
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder


def read_hypotheses(path, encoder):
    with open(path, encoding="utf-8") as f:
        pieces, _ = parse_generate_output(f.read().splitlines(), Path(path))
    ids = sorted(pieces)
    return [encoder.decode(pieces[i].split()) for i in ids], ids


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("generate_output")
    parser.add_argument("references", help="the data-bin's {split}.{tgt}.txt")
    parser.add_argument("--spm-model", required=True)
    parser.add_argument("--json", help="also write the scores here")
    args = parser.parse_args()
    hypotheses, ids = read_hypotheses(args.generate_output, WordAlignedEncoder(args.spm_model))
    with open(args.references, encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f]
    if ids != list(range(len(references))):
        sys.exit(f"{args.generate_output} has {len(ids)} hypotheses for {len(references)} references")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    print(f"{bleu_score}  signature: {bleu.get_signature()}")
    print(f"{chrf_score}  signature: {chrf.get_signature()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bleu": bleu_score.score, "bleu_signature": str(bleu.get_signature()),
                       "chrf": chrf_score.score, "chrf_signature": str(chrf.get_signature()),
                       "sentences": len(hypotheses)}, f, indent=2)


if __name__ == "__main__":
    main()
