"""The mLSTM (xLSTM) cell: the chunkwise-parallel torch form, mlstm_kernels' CUDA kernel, and the token-loop
reference.

``mlstm`` chooses the path (``xl_chunk.py``): the mlstm_kernels package's Triton kernel on CUDA when it is installed,
the chunkwise torch form ``mlstm_chunkwise`` everywhere else; ``mlstm_recurrent_ref`` is the fp64 token loop that
defines both (``reference.py``). recemb has no Triton kernel of its own for the mLSTM: on a GPU, NX-AI's is the
maintained one.
"""

from recemb.kernels.mlstm.chunkwise import DEFAULT_CHUNK_SIZE, MLSTMState, mlstm_chunkwise
from recemb.kernels.mlstm.reference import mlstm_recurrent_ref, mlstm_zero_state
from recemb.kernels.mlstm.xl_chunk import XL_CHUNK, mlstm, mlstm_kernels_available, mlstm_xl_chunk

__all__ = ["DEFAULT_CHUNK_SIZE", "MLSTMState", "XL_CHUNK", "mlstm", "mlstm_chunkwise", "mlstm_kernels_available",
           "mlstm_recurrent_ref", "mlstm_xl_chunk", "mlstm_zero_state"]
