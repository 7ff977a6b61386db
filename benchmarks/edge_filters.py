"""Filtered dense search on Qdrant Edge: plain HNSW, ACORN and exact, on a field with and without a payload index.

100,000 clustered 256-d points (200 Gaussian clusters, normalised), a filter matching 10% of them, 100 queries;
recall@10 against exact numpy search under the same filter. Why the Edge store uses ACORN only for filters on
fields without a payload index (recemb_integrations/stores/edge.py).

    python3 benchmarks/edge_filters.py [--points 100000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    args = parser.parse_args()
    import qdrant_edge as E

    n, dim = args.points, 256
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((200, dim)).astype(np.float32)
    x = centers[rng.integers(0, 200, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    queries = centers[rng.integers(0, 200, 100)] + 0.6 * rng.standard_normal((100, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    folder = tempfile.mkdtemp(prefix="recemb-edge-filters-")
    try:
        shard = E.EdgeShard.create(folder, E.EdgeConfig(vectors={"dense": E.EdgeVectorParams(
            size=dim, distance=E.Distance.Cosine)}))
        shard.update(E.UpdateOperation.create_field_index("indexed", E.PayloadSchemaType.Integer))
        for start in range(0, n, 1000):
            shard.update(E.UpdateOperation.upsert_points([
                E.Point(id=i + 1, vector={"dense": x[i].tolist()}, payload={"indexed": i % 10, "plain": i % 10})
                for i in range(start, min(n, start + 1000))]))
        began = time.perf_counter()
        shard.optimize()
        print(f"{n:,} points indexed in {time.perf_counter() - began:.0f} s\n")
        selected = np.arange(n) % 10 == 3

        def run(name, key, params):
            latencies, recalls = [], []
            condition = None if key is None else E.Filter(must=[E.FieldCondition(key=key, match=E.MatchValue(3))])
            for q in queries:
                scores = x @ q if key is None else np.where(selected, x @ q, -9.0)
                truth = set((np.argpartition(-scores, 10)[:10] + 1).tolist())
                began = time.perf_counter()
                hits = shard.query(E.QueryRequest(limit=10, query=E.Query.Nearest(q.tolist(), using="dense"),
                                                  filter=condition, params=params))
                latencies.append(time.perf_counter() - began)
                recalls.append(len(truth & {h.id for h in hits}) / 10)
            print(f"| {name} | {np.percentile(latencies, 50) * 1e3:.2f} | {np.percentile(latencies, 95) * 1e3:.2f} "
                  f"| {np.mean(recalls):.3f} |")

        print("| search | p50 ms | p95 ms | recall@10 |\n|---|---|---|---|")
        run("unfiltered, HNSW ef 128", None, E.SearchParams(hnsw_ef=128))
        for key, label in (("indexed", "indexed field"), ("plain", "field without index")):
            run(f"{label}, HNSW ef 128", key, E.SearchParams(hnsw_ef=128))
            run(f"{label}, ACORN", key, E.SearchParams(hnsw_ef=128, acorn=E.AcornSearchParams(enable=True)))
            run(f"{label}, exact", key, E.SearchParams(exact=True))
        shard.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
