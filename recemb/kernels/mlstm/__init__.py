"""The mLSTM (xLSTM) cell: chunkwise-parallel torch form and its token-loop reference.

``mlstm_chunkwise`` is the production path (pure torch, any device); ``mlstm_recurrent_ref`` is the fp64 token
loop that defines it (``reference.py``). No Triton kernels: xLSTM runs the torch form everywhere.
"""

from recemb.kernels.mlstm.chunkwise import DEFAULT_CHUNK_SIZE, MLSTMState, mlstm_chunkwise
from recemb.kernels.mlstm.reference import mlstm_recurrent_ref, mlstm_zero_state

__all__ = ["DEFAULT_CHUNK_SIZE", "MLSTMState", "mlstm_chunkwise", "mlstm_recurrent_ref", "mlstm_zero_state"]
