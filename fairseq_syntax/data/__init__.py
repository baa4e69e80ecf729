from .channels import (  # noqa: F401
    CHANNELS,
    TREE_CHANNELS,
    ChannelSpec,
    LabelDictionary,
    SentenceSyntax,
    SideManifest,
    SyntaxManifest,
    channel_prefix,
    label_dict_path,
)
from .subword import collate_source_syntax, parent_first_positions, parent_middle_positions, piece_labels  # noqa: F401
