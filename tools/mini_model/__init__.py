"""The default model, ``recemb-mamba2-mini``: a small Mamba2 embedder distilled here from all-MiniLM-L6-v2.

A maintainer tool, not part of the installed package. One command, from the repository root, rebuilds the
model from offline material only (``python -m tools.mini_model --out DIR [--data DIR] [--seed N]``):

1. **Pairs** (query side, document side), documents only, never an evaluation query or qrel:
   title → body of the documents in ``shared/data/ir``; STS-B *train* sentence pairs scored ≥ 3; a sentence →
   the rest of its passage from the books in ``shared/data/long`` (War and Peace held out for the long-document
   evaluation); a docstring's summary line → its body from
   Python's standard library (parsed with ``ast``, nothing imported); a manual page's NAME line → its
   DESCRIPTION. About 70 % of anchors get a random retrieval instruction (``Instruct: …\\nQuery: ``), so the
   student learns to map an instructed query onto the teacher's embedding of the bare query.
2. **Teacher targets**: MiniLM embeds every anchor (without instruction) and positive; the 384-d targets are
   projected onto their top principal directions (uncentred, so cosines survive) to the student's width.
3. **Student**: the teacher's WordPiece tokenizer ([SEP] is the EOS); transformers' Mamba2 initialisation, then
   ``pooling_init``: layer 0 is set to sum static token vectors, and layers 1.. start as the identity. The vectors
   are fitted first (``learn_static_vectors``): starting from the teacher's embedding of each token alone
   (projected like the targets) times its smooth-inverse-frequency weight, Adam moves them until the sum over a
   training text points at that text's teacher target. The untrained student is thus a model2vec-style embedder
   (about 0.9× the teacher's nDCG@10 on the shared collections), not noise.
4. **Training**: ``recemb_integrations.training`` in distillation mode (cosine distance to the teacher +
   0.1 × InfoNCE at τ = 0.02), full fine-tuning, fixed seed; weights saved in fp16 (fp32 on load).

Modules: ``data`` (the pairs: ../shared/data, Python docstrings, man pages), ``initialise`` (teacher targets
and their cache, the student's configuration and initialisation), ``build`` (``train_mini``: the whole run),
``card`` (the model card), ``__main__`` (the command). Being built for issue #34 and not yet part of the command:
``teacher`` (the teacher's embeddings cached per text; a long text's target as the mean of its chunks'),
``static_fit`` (static vectors fitted by distillation + InfoNCE, sentence → long-window batches from one book) and
``distil`` (the layers above the sum trained at a higher learning rate than the embeddings and layer 0, with mixed
short and long steps, checkpointed and resumable).
"""

NAME = "recemb-mamba2-mini"
