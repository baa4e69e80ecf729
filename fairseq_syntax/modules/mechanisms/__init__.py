"""The syntax mechanisms, one paper's mechanism per module, each registered by name for a side
(../syntax_mechanism.py: the base class, the registries and the shapes a mechanism may take)."""
