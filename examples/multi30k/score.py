"""Score fairseq-generate output with sacrebleu: hypotheses are decoded with the data-bin's segmenter (its
sentencepiece model, or its word-level codec for a --word-vocabulary data-bin), so the text is what the model
produced, no tokenisation left, and compared with the kept references."""
import argparse
import json
import sys

from pathlib import Path

import sacrebleu

from fairseq_syntax.evaluation.system_outputs import parse_generate_output
from fairseq_syntax.data.channels import SyntaxManifest
from fairseq_syntax.data.segmentation import open_segmenter
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
    segmenter = parser.add_mutually_exclusive_group(required=True)
    segmenter.add_argument("--spm-model", help="the sentencepiece model the hypotheses are pieces of")
    segmenter.add_argument("--data-bin", help="the data-bin: its own segmenter (sentencepiece or words)")
    parser.add_argument("--json", help="also write the scores here")
    args = parser.parse_args()
    if args.spm_model:
        encoder = WordAlignedEncoder(args.spm_model)
    else:
        manifest = SyntaxManifest.load(args.data_bin)
        if manifest is None:
            sys.exit(f"{args.data_bin} has no syntax.json: not a fairseq-syntax data-bin")
        encoder = open_segmenter(args.data_bin, manifest)
    hypotheses, ids = read_hypotheses(args.generate_output, encoder)
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
