from setuptools import find_packages, setup

setup(
    name="fairseq-syntax",
    version="0.1.0",
    description="Syntax-aware neural machine translation as a fairseq plugin",
    # preprocess/ is installed under the project's name (a top-level "preprocess" would clash with other packages)
    packages=find_packages(include=["fairseq_syntax", "fairseq_syntax.*"]) + ["fairseq_syntax_preprocess"],
    package_dir={"fairseq_syntax_preprocess": "preprocess"},
    python_requires=">=3.10",
    # Runtime requirements are pinned in requirements/ and installed by the Makefile: fairseq-fixed
    # must be compiled against the installed torch, which pip's dependency resolution cannot express.
    install_requires=[],
    entry_points={
        "console_scripts": [
            "fairseq-syntax-preprocess=fairseq_syntax_preprocess.cli:cli_main",
            "fairseq-syntax-train-parser=fairseq_syntax_preprocess.train_parser:cli_main",
            "fairseq-syntax-evaluate=fairseq_syntax.evaluation.cli:cli_main",
            "fairseq-syntax-train=fairseq_syntax.train_cli:cli_main",
        ]
    },
)
