"""Qdrant Edge at 1,000,000 points (vectors only) through EdgeStore: upsert, index, reopen, latency, recall@10.

The points are the bundled model's real embeddings of the short-document corpus that benchmarks/store_scale.py caches
(about 97,000 of them; run its short section first), filled up to N with convex mixtures of two random real embeddings
plus small noise, re-normalised. The 200 queries are held-out real embeddings. Recall@10 is against exact numpy
search over the same float32 vectors (under the filter for the filtered rows: 10% of the points).

    python3 benchmarks/edge_million.py [N] [CACHE_VECTORS_FILE] [HNSW_EF,...]   # e.g. 1000000 "" 128,256,512

Targets (the scale issue): p95 <= 50 ms and recall@10 >= 0.95, unfiltered and filtered.
"""
import glob  # noqa: E401
import json
import shutil
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from qdrant_client import models as qm

from recemb_integrations.stores import SearchRequest, StoredPoint
from recemb_integrations.stores.edge import EdgeStore

cache = (sys.argv[2] if len(sys.argv) > 2 and sys.argv[2]
         else sorted(glob.glob("/tmp/recemb-store-scale-cache/*short*/vectors.npy.bin"))[0])
raw = np.fromfile(cache, dtype=np.float32)
real = raw[: (raw.size // 256) * 256].reshape(-1, 256)
real = real[np.linalg.norm(real, axis=1) > 0.5]
rng = np.random.default_rng(0)
perm = rng.permutation(len(real))
queries, real = real[perm[:200]], real[perm[200:]]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
fill = N - len(real)
i, j = rng.integers(0, len(real), fill), rng.integers(0, len(real), fill)
a = rng.uniform(0.2, 0.8, (fill, 1)).astype(np.float32)
mix = a * real[i] + (1 - a) * real[j] + 0.02 * rng.standard_normal((fill, 256)).astype(np.float32)
X = np.concatenate([real, mix])
del mix
X /= np.linalg.norm(X, axis=1, keepdims=True)
print(f"{N:,} points: {len(real):,} real embeddings, {fill:,} mixtures", flush=True)
path = "/tmp/edge_million"
shutil.rmtree(path, ignore_errors=True)
proc = psutil.Process()
store = EdgeStore(path)
store.create_collection("m", 256, False, {})
for key, schema in (("document_id", "keyword"), ("kind", "keyword"), ("group", "integer")):
    store.create_payload_index("m", key, schema)
t = time.time()
for s in range(0, N, 1024):
    store.upsert("m", [StoredPoint(str(uuid.UUID(int=k + 1)),
                                   {"document_id": f"d{k}", "kind": "passage", "group": k % 10, "tag": k % 10},
                                   {"dense": X[k].tolist()}) for k in range(s, min(N, s + 1024))])
up = time.time() - t
print(f"upsert {up:.0f} s", flush=True)
t = time.time()
store.optimize("m", show_progress_bar=False, force=True)
opt = time.time() - t
print(f"optimize {opt:.0f} s", flush=True)
store.close()
t = time.time()
store = EdgeStore(path)
store.count("m")
reopen = time.time() - t
size = sum(f.stat().st_size for f in __import__("pathlib").Path(path).rglob("*") if f.is_file()) / 1e6
groups = np.arange(N) % 10
import recemb_integrations.stores.edge_layouts as edge_module  # noqa: E402

rows = {}
for ef in [int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else str(edge_module.HNSW_EF)).split(",")]:
    edge_module.HNSW_EF = ef  # read at query time
    for name, flt in (("unfiltered", None),
                      ("filtered, indexed (group = 3)",
                       qm.Filter(must=[qm.FieldCondition(key="group", match=qm.MatchValue(value=3))])),
                      ("filtered, no index (tag = 3, ACORN)",
                       qm.Filter(must=[qm.FieldCondition(key="tag", match=qm.MatchValue(value=3))]))):
        lat, rec = [], []
        for q in queries:
            sc = X @ q
            if flt is not None:
                sc = np.where(groups == 3, sc, -9)
            truth = set(np.argpartition(-sc, 10)[:10] + 1)
            t = time.perf_counter()
            hits = store.query("m", SearchRequest(limit=10, dense=q.tolist(), filter=flt, with_payload=False))
            lat.append(time.perf_counter() - t)
            rec.append(len(truth & {uuid.UUID(h.id).int for h in hits}) / 10)
        rows[f"ef {ef}: {name}"] = {"p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 2),
                      "p95_ms": round(float(np.percentile(lat, 95)) * 1e3, 2),
                      "recall@10": round(float(np.mean(rec)), 4)}
        print(ef, name, rows[f"ef {ef}: {name}"], flush=True)
out = {"points": N, "real": len(real), "upsert_s": round(up, 1), "optimize_s": round(opt, 1),
       "reopen_s": round(reopen, 2), "store_mb": round(size), "peak_rss_mib": round(proc.memory_info().rss / 2**20),
       "rows": rows}
print(json.dumps(out))
Path(__file__).resolve().parent.joinpath("results", "edge_million.json").write_text(json.dumps(out, indent=1) + "\n")
