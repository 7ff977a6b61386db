"""RWKV-7 time mixing (generalised delta rule): the chunked torch form, fla's CUDA kernel, and the token-loop
reference.

``rwkv7`` chooses the path (``fla.py``): flash-linear-attention's chunk kernel on CUDA when it is installed, the
chunked torch form ``rwkv7_chunked`` everywhere else; ``rwkv7_recurrent_ref`` is the fp64 token loop that defines
both (``reference.py``, the ``rwkv`` package's ``RWKV_x070_TMix_one``). recemb has no Triton kernel of its own for
RWKV-7: on a GPU, fla's is the maintained one.
"""

from recemb.kernels.rwkv7.chunked import DEFAULT_CHUNK_SIZE, rwkv7_chunked
from recemb.kernels.rwkv7.fla import fla_available, rwkv7, rwkv7_fla
from recemb.kernels.rwkv7.reference import rwkv7_recurrent_ref

__all__ = ["DEFAULT_CHUNK_SIZE", "fla_available", "rwkv7", "rwkv7_chunked", "rwkv7_fla", "rwkv7_recurrent_ref"]
