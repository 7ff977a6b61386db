"""The errors of model folders, shared by every architecture's loader."""

__all__ = ["CheckpointError", "ConfigError", "DamagedCheckpointError"]


class ConfigError(ValueError):
    """A model config that recemb cannot run (wrong model_type, inconsistent sizes)."""


class CheckpointError(ValueError):
    """A model folder's files do not fit each other (wrong shapes, missing or unexpected tensors)."""


class DamagedCheckpointError(CheckpointError):
    """A weight file that cannot be read as what it claims to be: truncated (an interrupted download or copy) or
    damaged. The message names the file; the way on is to download or export the model again."""
