"""recemb: recurrent language models (Mamba2, xLSTM, RWKV-7) as text embedders with constant memory in the input
length.

A text is read in vertical chunks that go through every layer before the next, each layer's recurrent state carried
across chunks. The code lives in ``recemb.core`` (the architecture-neutral encoder protocol and engine: the
architectures under ``recemb.core.architectures``, loading, vertical chunking, ``Embedder``) and
``recemb.kernels`` (the chunk-parallel ops: Mamba2's SSD scan, xLSTM's mLSTM cell, RWKV-7's delta rule).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
