"""The decoder contract (models/decoders.py, SyntaxDecoder): every registered decoder is on it, fairseq's own
decoder reads as its defaults, and no caller asks a decoder whether it has a contract attribute."""
import ast
import inspect
from pathlib import Path

import pytest

import fairseq_syntax  # noqa: F401  (registers the decoders)
from fairseq_syntax.models.decoders import DECODERS, FAIRSEQ_DECODER, SyntaxDecoder, contract_of

from .helpers import REPO

CONTRACT = [name for name, value in vars(SyntaxDecoder).items()
            if not name.startswith("_") and (not callable(value) or isinstance(value, staticmethod))
            or name in ("add_decoder_args", "hypothesis_trees")]


def test_every_registered_decoder_is_on_the_contract():
    assert {"transformer", "bitran", "dyn_stgcd"} <= set(DECODERS)
    for name, decoder in DECODERS.items():
        assert issubclass(decoder, SyntaxDecoder), name
        for attribute in CONTRACT:
            assert hasattr(decoder, attribute), (name, attribute)


def test_fairseq_decoder_and_no_decoder_read_as_the_defaults():
    from fairseq.models.transformer import TransformerDecoderBase

    plain = object.__new__(TransformerDecoderBase)  # fairseq's own decoder class, nothing of ours on it
    for decoder in (plain, None):
        contract = contract_of(decoder)
        assert contract is FAIRSEQ_DECODER
        assert (contract.takes_batch_features, contract.syntax_features, contract.token_constraint,
                contract.predicts_some_positions, contract.predicts_graph, dict(contract.auxiliary_loss_weights)) == (
                    False, (), None, False, False, {})
    with pytest.raises(NotImplementedError, match="generates no graph"):
        FAIRSEQ_DECODER.hypothesis_trees(None, [])


def test_no_caller_asks_a_decoder_for_a_contract_attribute_with_getattr_or_hasattr():
    names = {"takes_batch_features", "syntax_features", "optional_syntax_features", "source_features",
             "auxiliary_loss_weights", "token_constraint", "predicts_some_positions", "predicts_graph",
             "add_decoder_args", "hypothesis_trees"}
    assert names <= set(CONTRACT)
    found = []
    for path in sorted((REPO / "fairseq_syntax").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # getattr(model, ...) stays: a model of another family has no such attribute; a decoder always does
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in names
                    and "decoder" in ast.unparse(node.args[0])):
                found.append(f"{Path(path).relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_the_contract_documents_every_attribute():
    source = inspect.getsource(SyntaxDecoder)
    for attribute in CONTRACT:
        lines = source.splitlines()
        line = next(i for i, text in enumerate(lines) if text.strip().startswith((f"{attribute}:", f"def {attribute}")))
        documented = lines[line - 1].strip().startswith("#") or '"""' in lines[line + 1]
        assert documented, attribute


def test_a_token_constraint_module_is_a_submodule_that_the_contract_reads():
    """nn.Module keeps a module attribute in _modules, where a class attribute of the contract would hide it (the
    generator then saw no constraint): the contract's token_constraint reads the submodule, and None where unset."""
    import torch.nn as nn

    class Decoder(nn.Module, SyntaxDecoder):
        def __init__(self, constraint):
            super().__init__()
            self.token_constraint = constraint

    constraint = nn.Linear(2, 2)
    with_one, without = Decoder(constraint), Decoder(None)
    assert contract_of(with_one).token_constraint is constraint
    assert "token_constraint.weight" in with_one.state_dict()
    assert contract_of(without).token_constraint is None and not without.state_dict()
