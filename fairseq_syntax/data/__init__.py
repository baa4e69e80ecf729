from .channels import (  # noqa: F401
    CHANNELS,
    TREE_CHANNELS,
    ChannelSpec,
    SideChannelError,
    LabelDictionary,
    SentenceSyntax,
    SideManifest,
    SyntaxManifest,
    channel_prefix,
    label_dict_path,
    register_channel,
)
from .features import FEATURES, BatchFeature, collate_features, register_feature  # noqa: F401
from .subword import parent_first_positions, parent_middle_positions, piece_labels  # noqa: F401
