"""The systems that the comparison run (examples/multi30k/compare.py) and the benchmark (bench/bench.py) put side
by side: the vanilla baseline and every syntax method, each as its Multi30k-sized architecture preset (the same
sizes, models/sizes.py). A new method joins both by adding its line here."""

BASELINE = "vanilla"
MULTI30K_SYSTEMS = {
    BASELINE: ["--arch", "transformer_multi30k"],  # stock fairseq transformer
    "pascal": ["--arch", "transformer_pascal_multi30k"],
    "lisa": ["--arch", "transformer_lisa_multi30k"],
    "sh": ["--arch", "transformer_sh_multi30k"],  # Sennrich & Haddow label embeddings
}
