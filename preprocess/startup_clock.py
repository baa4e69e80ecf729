"""The clock that times preprocessing's startup (imports, parser loading), which preprocess.json reports apart.

cli.py imports this module first, so the clock starts before the heavy imports (torch, fairseq, the parsers).
"""
import time

IMPORT_START = time.time()  # startup (imports, parser loading) is reported separately
