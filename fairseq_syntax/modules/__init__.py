from .score_modifiers import SCORE_MODIFIERS, ScoreModifier, register_score_modifier  # noqa: F401
from .syntax_attention import ScoreModification, SyntaxBiasedSelfAttention, SyntaxEncoderLayer  # noqa: F401
from . import pascal  # noqa: F401  (registers "pascal")
