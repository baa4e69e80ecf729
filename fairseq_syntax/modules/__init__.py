from .syntax_mechanism import (  # noqa: F401
    DECODER_MECHANISMS,
    ENCODER_MECHANISMS,
    MechanismChoice,
    MechanismChoices,
    ScoreModification,
    ScoreModifier,
    SyntaxMechanism,
    register_decoder_mechanism,
    register_encoder_mechanism,
)
from .syntax_attention import SyntaxBiasedSelfAttention  # noqa: F401
from .syntax_layers import SyntaxDecoderLayer, SyntaxEncoderLayer  # noqa: F401
from .mechanisms import graph_convolution, graph_decoder, label_embedding, ldd, lisa, parent, pascal, rgse  # noqa: F401
