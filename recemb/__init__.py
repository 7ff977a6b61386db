"""recemb: recurrent language models as constant-memory text embedders.

The code lives in ``recemb.core`` (model, state, loading, Embedder) and ``recemb.kernels`` (SSD scan).
"""

__version__ = "0.1.0"
