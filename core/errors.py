"""The errors of model folders, shared by every architecture's loader."""

__all__ = ["CheckpointError", "ConfigError"]


class ConfigError(ValueError):
    """A model config that recemb cannot run (wrong model_type, inconsistent sizes)."""


class CheckpointError(ValueError):
    """A model folder's files do not fit each other (wrong shapes, missing or unexpected tensors)."""
