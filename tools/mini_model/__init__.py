"""The default model, ``recemb-mamba2-mini``: a small Mamba2 embedder distilled here from all-MiniLM-L6-v2.

A maintainer tool, not part of the installed package. One command, from the repository root, rebuilds the
model from offline material only
(``python -m tools.mini_model --out DIR [--work DIR | --resume DIR] [--data DIR] [--seed N] [--width W --layers L
--pool-layer P]``):

1. **Pairs** (query side, document side), documents only, never an evaluation query or qrel:
   title → body of the documents in ``shared/data/ir``; STS-B *train* sentence pairs scored ≥ 3; a sentence →
   the rest of its passage from the books in ``shared/data/long`` (War and Peace held out for the long-document
   evaluation); a docstring's summary line → its body from
   Python's standard library and (sampled) the installed packages (parsed with ``ast``, nothing imported); a manual
   page's NAME line → its DESCRIPTION. Host text that contains an evaluation query or STS-B test sentence is left
   out. About 70 % of anchors get a random retrieval instruction (``Instruct: …\\nQuery: ``), so the
   student learns to map an instructed query onto the teacher's embedding of the bare query.
2. **Teacher targets**: MiniLM embeds every anchor (without instruction) and positive, and every chunk of the long
   windows (8 × 180 words of the same books; a window's target is the mean of its chunks'); ``teacher`` caches
   them per text in the work folder. The 384-d targets are projected onto their top principal directions
   (uncentred, so cosines survive) to the student's width (at 384, a rotation).
3. **Static vectors** (``static_fit``): start from the teacher's embedding of each token alone (projected like the
   targets) times its smooth-inverse-frequency weight; sparse Adam on distillation (the sum over a text's token
   vectors → its teacher target) + a little InfoNCE, over batches of pairs and batches of windows of one book,
   each found from one of its sentences. Validation after each epoch (``validation``: held-out windows of the
   training books, STS-B dev) picks the epoch kept.
4. **Student** (``initialise``): the teacher's WordPiece tokenizer ([SEP] is the EOS); transformers' Mamba2
   initialisation, then ``pooling_init``: the pool layer (``StudentShape.pool_layer``) sums the static vectors
   and the others start as the identity: residual branches of zero, below the sum rewriting each token before it
   is summed, above it reading the running sum.
5. **Layers** (``distil``): the branches trained through per-channel gates that start at zero, the embeddings,
   the pool layer and the final norm frozen; short (query, passage) steps mixed with sentence → window steps,
   checkpointed and resumable (``--resume WORK``); validated every ``validate_every`` steps, and the best
   validated step (the start included) is what ships, in fp16.

Modules: ``data`` (pairs and long windows: ../shared/data, Python docstrings, man pages), ``texts`` (every text's
role in one table), ``teacher``, ``static_fit``, ``initialise``, ``distil``, ``validation``, ``build``
(``train_mini``: the whole run), ``card`` (the model card), ``parts`` (a model folder as the bounded files a lent
GPU machine hands back, and ``--assemble``: the folder again), ``__main__`` (the command).
"""

NAME = "recemb-mamba2-mini"
