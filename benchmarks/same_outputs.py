"""Do two commits embed alike? Embeddings of the working tree against those of another commit, bit for bit.

    python3 benchmarks/same_outputs.py --against ee08b33

For refactors that must not change a single output. The other commit is checked out into a temporary git
worktree and imported from there (the editable install is bypassed), each side runs the same probes in its own
process, and a table says, per probe, whether the arrays are identical or how far apart they are:

- the bundled model: documents (short, a few thousand and 35,000 characters), queries with an E5 instruction,
  V = 7, and a 300,000-character text (the streaming path);
- a tiny random Mamba2 (tests/utils.py) in transformers format: the default and chunk_size = 3;
- the tiny model with LongMamba artifacts (every mode's filter keyed by the whole length) on token ids and texts;
- the tiny model with MambaExtend + LongMamba on a batch of inputs all longer than min_length, and on one of
  inputs all shorter (which #19 changed on purpose: MambaExtend no longer scales them, so against a commit before
  it this probe differs and the exit status is 1);
- a tiny random xLSTM (transformers' format) and RWKV-7 (BlinkDL's ``.pth`` and flash-linear-attention's format);
- the main job: the tiny model's ``QdrantSync`` into Qdrant Edge and into qdrant-client's local mode (passages,
  BM25, texts stored), every point's id, payload, dense and sparse vector, then a re-sync of edited documents, and
  a hybrid search's ids and scores (``--no-store`` skips these, for commits before the stores).

Needs ../shared/data/long (the books). Prints the table; writes nothing but temporary files.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBES = r'''
import os, shutil, sys, tempfile
if os.environ.get("RECEMB_OLD_TREE"):  # import the other commit's code, not the editable install
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
from pathlib import Path
import numpy as np
import torch
from recemb.core import Embedder
from recemb.core.context_extension import ContextExtension
sys.path.insert(0, sys.argv[2])  # tests/utils.py copied alone: the repository root would shadow the other commit's code
from tutils import SAMPLE_TEXT, save_transformers_checkpoint, transformers_model

out = {}
book = sorted(Path(sys.argv[3]).glob("*.txt"))[0].read_text(encoding="utf-8")
texts = ["a query about tides", "", book[:3000], book[5000:40000], SAMPLE_TEXT]
emb = Embedder.from_pretrained("recemb-mamba2-mini", device="cpu")
out["bundled documents"] = emb.encode(texts, show_progress_bar=False)
out["bundled queries (SciFact)"] = emb.encode_queries(texts[:3], instruction="SciFact", show_progress_bar=False)
out["bundled V=7"] = emb.encode(texts[:3], vertical_chunk_size=7, show_progress_bar=False)
out["bundled 300K-char stream"] = emb.encode([book[:300_000]], show_progress_bar=False)
tmp = Path(tempfile.mkdtemp())
folder = save_transformers_checkpoint(transformers_model("g1"), tmp / "m")
tiny_texts = texts[:3] + [SAMPLE_TEXT * 3]
out["tiny"] = Embedder.from_pretrained(folder, device="cpu", backend="torch").encode(tiny_texts)
out["tiny chunk_size=3"] = Embedder.from_pretrained(folder, device="cpu", backend="torch", chunk_size=3).encode(
    tiny_texts)
torch.manual_seed(0)
ids = torch.randint(3, 300, (4, 70)).tolist()
lm = tmp / "longmamba"
shutil.copytree(folder, lm)
torch.manual_seed(1)
ContextExtension(global_heads=[[True, False, True, True], [False, True, True, False]],
                 thresholds={16: (torch.rand(2, 4) * 0.3).tolist(), 64: (torch.rand(2, 4) * 0.6).tolist()},
                 train_length=8, min_length=12).save(lm)
e = Embedder.from_pretrained(lm, device="cpu", backend="torch")
out["tiny + LongMamba, ids"] = e.embed_token_ids([s[:n] for s, n in zip(ids, (70, 33, 9, 20))],
                                                 vertical_chunk_size=16).numpy()
out["tiny + LongMamba, texts"] = e.encode(tiny_texts)
both = tmp / "both"
shutil.copytree(lm, both)
ext = ContextExtension.load(lm)
ext.delta_scale = [0.7, 1.6]
ext.save(both)
e = Embedder.from_pretrained(both, device="cpu", backend="torch")
out["tiny + both methods, long inputs"] = e.embed_token_ids([s[:n] for s, n in zip(ids, (70, 33, 20, 12))],
                                                            vertical_chunk_size=16).numpy()
# Issue #19 changed this one on purpose: MambaExtend no longer scales inputs shorter than min_length.
out["tiny + both methods, short inputs"] = e.embed_token_ids([s[:n] for s, n in zip(ids, (11, 9, 5, 2))],
                                                             vertical_chunk_size=16).numpy()

from transformers import xLSTMConfig, xLSTMModel
from tutils import build_tokenizer
torch.manual_seed(0)
xlstm = xLSTMModel(xLSTMConfig(vocab_size=320, hidden_size=128, embedding_dim=128, num_blocks=2, num_hidden_layers=2,
                               num_heads=2, qk_dim_factor=0.5, v_dim_factor=1.0, chunk_size=16, pad_token_id=2,
                               bos_token_id=0, eos_token_id=1, mode="inference")).eval()
with torch.no_grad():
    for p in xlstm.parameters():
        p.add_(0.05 * torch.randn_like(p))
xlstm.save_pretrained(str(tmp / "xlstm"))
build_tokenizer(tmp / "xlstm")
out["tiny xLSTM"] = Embedder.from_pretrained(tmp / "xlstm", device="cpu").encode(tiny_texts)
from trwkv7 import pth_to_fla, random_pth_state, save_pth
state = random_pth_state(vocab_size=320, hidden_size=32, num_layers=2, head_size=8)
for name, save in (("pth", save_pth), ("fla", pth_to_fla)):
    (tmp / name).mkdir()
    save(state, tmp / name)
    build_tokenizer(tmp / name)
    out[f"tiny RWKV-7 ({name})"] = Embedder.from_pretrained(tmp / name, device="cpu").encode(tiny_texts)

if sys.argv[4] == "store":
    import json
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import open_store

    tiny = Embedder.from_pretrained(folder, device="cpu", backend="torch")
    docs = [Document(f"doc{i}.txt", book[i * 7000:(i + 1) * 7000 + i * 500], {"n": i}) for i in range(5)]
    edited = [Document(d.id, d.text[: len(d.text) // 2] if i % 2 else d.text, d.metadata)
              for i, d in enumerate(docs[1:])] + [Document("new.txt", book[60000:64000])]
    for kind in ("edge", "local"):
        for step, batch in (("first sync", docs), ("re-sync", edited)):
            with open_store(path=tmp / f"store-{kind}", kind=kind) as store:
                sync = QdrantSync(store, "c", tiny, passage_tokens=48, passage_overlap=8, store_text=True,
                                  batch_size=2)
                report = sync.sync(batch)
                points, _ = store.scroll("c", limit=100_000, with_payload=True, with_vectors=True)
                points = sorted(points, key=lambda p: str(p.id))
                tag = f"main job, {kind}, {step}"
                out[f"{tag}: ids + payloads"] = np.frombuffer(json.dumps(
                    [[str(p.id), p.payload] for p in points], sort_keys=True).encode(), dtype=np.uint8)
                out[f"{tag}: dense"] = np.array([p.vector["dense"] for p in points], dtype=np.float32)
                out[f"{tag}: BM25"] = np.concatenate([np.concatenate([np.asarray(p.vector["bm25"].indices, float),
                                                                      np.asarray(p.vector["bm25"].values, float)])
                                                     for p in points if "bm25" in p.vector])
                out[f"{tag}: report"] = np.array([report.added, report.updated, report.metadata_updated,
                                                  report.unchanged, report.deleted, report.embedded_tokens])
                hits = sync.search("the whale and the sea", limit=4)
                names = sorted({d.id for d in docs + edited})
                out[f"{tag}: search"] = np.array([[names.index(h.document_id), h.score,
                                                   -1 if h.best_passage is None else h.best_passage] for h in hits])
np.savez(sys.argv[1], **{k.replace(" ", "_"): v for k, v in out.items()}, names=np.array(list(out)))
'''


def run_probes(tree: Path | None, out: Path, work: Path, data: Path, store: bool) -> None:
    env = dict(os.environ)
    if tree is not None:  # a package folder laid out as installed: recemb/{core,kernels,models}, recemb_integrations
        pkg = work / "old-package"
        pkg.mkdir()
        if (tree / "recemb" / "core").is_dir():  # the packages' own layout
            (pkg / "recemb").symlink_to(tree / "recemb")
        else:  # commits before #45: core/ and kernels/ at the root, mapped by pyproject.toml's package-dir
            (pkg / "recemb").mkdir()
            (pkg / "recemb" / "__init__.py").write_text((tree / "recemb" / "__init__.py").read_text())
            for name, source in (("core", tree / "core"), ("kernels", tree / "kernels"),
                                 ("models", tree / "recemb" / "models")):
                (pkg / "recemb" / name).symlink_to(source)
        (pkg / "recemb_integrations").symlink_to(tree / "recemb_integrations")
        env.update(PYTHONPATH=str(pkg), RECEMB_OLD_TREE="1")
    script = work / "probes.py"
    script.write_text(PROBES)
    subprocess.run([sys.executable, str(script), str(out), str(work / "utils"), str(data),
                    "store" if store else "no-store"], check=True, env=env, cwd=work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the other commit (a revision git understands)")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "long"), help="the books")
    parser.add_argument("--no-store", action="store_true", help="skip the main job's probes")
    args = parser.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="recemb-same-") as tmp:
        work = Path(tmp)
        (work / "utils").mkdir()
        (work / "utils" / "tutils.py").write_text((ROOT / "tests" / "utils.py").read_text())
        (work / "utils" / "trwkv7.py").write_text((ROOT / "tests" / "rwkv7_utils.py").read_text())
        tree = work / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.against],
                       check=True)
        try:
            run_probes(tree, work / "other.npz", work, Path(args.data), not args.no_store)
            run_probes(None, work / "this.npz", work, Path(args.data), not args.no_store)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        other, this = np.load(work / "other.npz"), np.load(work / "this.npz")
        print(f"| probe (working tree vs {args.against}) | shape | result |\n|---|---|---|")
        differing = 0
        for name in this["names"]:
            key = str(name).replace(" ", "_")
            a, b = other[key], this[key]
            if a.shape == b.shape and np.array_equal(a, b):
                verdict = "identical"
            else:
                differing += 1
                verdict = "shape differs" if a.shape != b.shape else f"max |diff| {np.abs(a - b).max():.3g}"
            print(f"| {name} | {tuple(b.shape)} | {verdict} |")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
