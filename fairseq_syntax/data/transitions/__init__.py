"""The transition system of target-side syntax, defined once and serving preprocessing, training and beam search:
one subject per module, each importing only those below it (.importlinter): channels > output > oracle | state |
function > projectivity > tokens > errors."""
