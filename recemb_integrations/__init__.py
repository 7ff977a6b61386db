"""Adapters from recemb to the retrieval stack. Importing this package imports no framework: each adapter module
imports its own framework and, when it is missing, raises an ImportError naming the extra to install."""

__all__ = []
