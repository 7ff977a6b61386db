"""RWKV-7 time mixing (generalised delta rule): chunked torch form and its token-loop reference.

``rwkv7_chunked`` is the production path (pure torch, any device); ``rwkv7_recurrent_ref`` is the fp64 token
loop that defines it (``reference.py``, the ``rwkv`` package's ``RWKV_x070_TMix_one``). No Triton kernels:
RWKV-7 runs the torch form everywhere.
"""

from recemb.kernels.rwkv7.chunked import DEFAULT_CHUNK_SIZE, rwkv7_chunked
from recemb.kernels.rwkv7.reference import rwkv7_recurrent_ref

__all__ = ["DEFAULT_CHUNK_SIZE", "rwkv7_chunked", "rwkv7_recurrent_ref"]
