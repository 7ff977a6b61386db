"""The commands that make models: ``recemb export`` (a sentence-transformers folder), ``recemb train`` (the
E5-mistral fine-tune) and ``recemb calibrate`` (training-free context extension)."""

from __future__ import annotations

import argparse

from recemb_integrations.cli import resources
from recemb_integrations.cli.options import positive_int
from recemb_integrations.cli.output import EXIT_OK, CommandError, emit
from recemb_integrations.formats import DOCUMENT_SUFFIXES
from recemb_integrations.sources import read_text

__all__ = ["add_calibrate_command", "add_export_command", "add_train_command", "cmd_calibrate", "cmd_export",
           "cmd_train"]


def add_export_command(commands) -> None:
    p = commands.add_parser("export", help="write a checkpoint as a sentence-transformers folder",
                            description="Turn a Mamba2 (transformers, mamba_ssm or mistral_inference format), xLSTM "
                            "(transformers) or RWKV-7 (.pth or flash-linear-attention) checkpoint, or a recemb "
                            "folder, into a sentence-transformers folder whose backbone also loads with its own "
                            "library (transformers' Mamba2Model / xLSTMModel, flash-linear-attention's RWKV7Model).")
    p.add_argument("source", help="model folder or Hugging Face id")
    p.add_argument("destination", help="output folder")
    p.add_argument("--tokenizer", help="tokenizer folder or id, when SOURCE has none (mamba_ssm checkpoints)")
    p.add_argument("--dtype", help="weight dtype to write, e.g. bfloat16 (default: fp32)")
    p.add_argument("--quantize", choices=["int8"], help="record that the model loads with int8 in_proj weights "
                   "(the weights are written in fp32; model_kwargs={'quantize': None} loads it unquantised)")
    p.add_argument("--max-seq-length", type=int, help="truncate inputs (default: never)")
    p.add_argument("--vertical-chunk-size", type=int, help="default V for the module (default: automatic)")
    p.add_argument("--name", help="model name used in the model card (default: DESTINATION's name)")
    p.set_defaults(run=cmd_export)


def add_train_command(commands) -> None:
    # The training options are TrainingConfig's fields (a plain dataclass: no training stack is imported).
    from recemb_integrations.training.config import add_cli_options

    p = commands.add_parser("train", help="fine-tune a Mamba2 embedder (InfoNCE or distillation)",
                            description="The E5-mistral recipe through sentence-transformers' trainer: InfoNCE at "
                            "temperature 0.02 with in-batch and hard negatives, instructions on queries only, EOS "
                            "pooling, LoRA for large backbones. DATA is JSON lines with 'anchor', 'positive', "
                            "optional 'negative' (string or list), 'instruction' and 'label' (teacher embeddings, "
                            "for --loss distill).")
    p.add_argument("model", help="model folder or id to start from")
    p.add_argument("data", help="training pairs, JSON lines")
    p.add_argument("--out", required=True, help="output folder (sentence-transformers format, merged weights)")
    add_cli_options(p)  # --loss ... --dtype
    p.add_argument("--tokenizer", help="tokenizer folder or id, when MODEL has none")
    p.add_argument("--name", help="model name for the model card")
    p.set_defaults(run=cmd_train)


def add_calibrate_command(commands) -> None:
    p = commands.add_parser("calibrate", help="calibrate MambaExtend / LongMamba context extension for a model",
                            description="Training-free context extension. LongMamba: global heads and Δ thresholds "
                            "per target length from windows of the training length. MambaExtend: per-layer Δ scales "
                            "(SPSA or gradient) so a long text's embedding agrees with the mean of its "
                            "training-length passages. Writes context_extension.json into the model folder (or "
                            "--out), where it loads automatically.")
    p.add_argument("model", help="model folder or bundled name")
    p.add_argument("texts", nargs="+", help="long calibration texts: files, folders or globs")
    p.add_argument("--method", choices=["longmamba", "mambaextend", "both"], default="both")
    p.add_argument("--train-length", type=int, required=True, help="the length the model was trained at (tokens)")
    p.add_argument("--min-length", type=positive_int, help="both methods act on inputs of at least this many tokens "
                                                           "(default: 1.5 × the train length)")
    p.add_argument("--windows", type=int, default=100, help="LongMamba calibration windows")
    p.add_argument("--theta", type=float, default=0.05, help="LongMamba: global heads keep a decay above this")
    p.add_argument("--clamp-top", type=float, default=0.1, help="LongMamba: Δ outlier quantile clipped")
    p.add_argument("--documents", type=int, default=8, help="MambaExtend calibration documents")
    p.add_argument("--document-length", type=int, help="MambaExtend document tokens (default 8 × train length)")
    p.add_argument("--optimizer", choices=["spsa", "gradient"], default="spsa", help="MambaExtend optimiser")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write a calibrated copy of the model here instead of into MODEL")
    p.add_argument("--device", help="cpu, cuda, ...")
    p.set_defaults(run=cmd_calibrate)


def cmd_export(args: argparse.Namespace) -> int:
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    out = export_sentence_transformers(
        args.source, args.destination, tokenizer=args.tokenizer, dtype=args.dtype, quantize=args.quantize,
        max_seq_length=args.max_seq_length, vertical_chunk_size=args.vertical_chunk_size, model_name=args.name,
    )
    emit(args, {"destination": str(out)}, f"wrote a sentence-transformers model to {out}")
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    from recemb.core.files import check_model_destination
    from recemb_integrations.training import train
    from recemb_integrations.training.config import from_cli

    check_model_destination(args.out)  # before the training, not after

    config = from_cli(args)
    summary = train(args.model, args.data, args.out, config, tokenizer=args.tokenizer, model_name=args.name)
    brief = {k: summary[k] for k in ("rows", "steps", "seconds", "train_loss", "final_logged_loss", "lora")}
    emit(args, brief, f"trained {brief['steps']} steps on {brief['rows']} pairs in {brief['seconds']} s "
                      f"(mean loss {brief['train_loss']:.4f}, last logged {brief['final_logged_loss']}); "
                      f"saved to {args.out}")
    return EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from recemb.core import Embedder, resolve_model_path
    from recemb.core.architectures.mamba2.calibration import calibrate

    sources = resources.collect_files(args.texts)
    if sources.missing:
        raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]}")
    if not sources.files:
        raise CommandError(f"no {'/'.join(DOCUMENT_SUFFIXES)} files under {' '.join(args.texts)}")
    texts = []
    for f in sources.files:
        try:
            texts.append(read_text(f))
        except (ValueError, OSError) as e:
            raise CommandError(f"{f}: cannot read its text ({e})") from e
    folder = resolve_model_path(args.model)
    out = folder
    if args.out is not None:  # a calibrated copy: never merged into a folder of someone else's files
        import shutil

        from recemb.core.files import check_model_destination

        out = check_model_destination(args.out)
        shutil.copytree(folder, out, dirs_exist_ok=True)
    embedder = Embedder.from_pretrained(out, device=args.device, context_extension="off")
    ext = calibrate(
        embedder, texts, method=args.method, train_length=args.train_length,
        windows=args.windows, theta=args.theta, clamp_top=args.clamp_top, documents=args.documents,
        document_length=args.document_length, optimizer=args.optimizer, iterations=args.iterations,
        seed=args.seed, save_to=str(out), min_length=args.min_length,
    )
    data = {"folder": str(out), "mode": ext.mode, "delta_scale": ext.delta_scale,
            "global_heads_per_layer": [int(sum(g)) for g in ext.global_heads] if ext.global_heads else None,
            "target_lengths": sorted(ext.thresholds)}
    emit(args, data, f"wrote {out / 'context_extension.json'} ({ext.mode}); it loads with the model "
                     "(switch with --context-extension)")
    return EXIT_OK
