"""TrainingConfig is the single definition of the ``recemb train`` options, and imports no training stack."""

import argparse
import dataclasses
import subprocess
import sys

import pytest

from recemb_integrations.cli import build_parser
from recemb_integrations.training.config import TrainingConfig, cli_fields, from_cli

REQUIRED = ["train", "model", "pairs.jsonl", "--out", "out"]
# Fields with no option (metadata cli=False): set through the Python API only.
PYTHON_ONLY = {"lora_dropout", "logging_steps", "extra_args"}


def train_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["train"]


def test_every_field_is_an_option_with_the_fields_default():
    parser = train_parser()
    options = {s: a for a in parser._actions for s in a.option_strings}
    flags = {f.name: flag for f, flag in cli_fields()}
    assert set(flags) | PYTHON_ONLY == {f.name for f in dataclasses.fields(TrainingConfig)}
    assert not set(flags) & PYTHON_ONLY
    for name, flag in flags.items():
        assert f"--{flag}" in options, name
    # The user-visible spellings of today.
    assert flags["query_instruction"] == "instruction" and options["--lora"].choices == ["auto", "on", "off"]
    assert options["--loss"].choices == ["infonce", "distill"] and options["--lora"].default == "auto"
    # No option given: exactly the dataclass defaults.
    assert from_cli(build_parser().parse_args(REQUIRED)) == TrainingConfig()


# One non-default value per option.
CASES = [
    (["--loss", "distill"], "loss", "distill"),
    (["--temperature", "0.05"], "temperature", 0.05),
    (["--epochs", "2.5"], "epochs", 2.5),
    (["--max-steps", "7"], "max_steps", 7),
    (["--batch-size", "8"], "batch_size", 8),
    (["--mini-batch-size", "4"], "mini_batch_size", 4),
    (["--learning-rate", "3e-4"], "learning_rate", 3e-4),
    (["--warmup-steps", "0"], "warmup_steps", 0),
    (["--weight-decay", "0"], "weight_decay", 0.0),
    (["--max-length", "128"], "max_length", 128),
    (["--instruction", ""], "query_instruction", ""),
    (["--instruction", "SciFact"], "query_instruction", "SciFact"),
    (["--lora", "on"], "lora", True),
    (["--lora", "off"], "lora", False),
    (["--lora-r", "8"], "lora_r", 8),
    (["--lora-alpha", "32"], "lora_alpha", 32),
    (["--contrastive-weight", "0.1"], "contrastive_weight", 0.1),
    (["--seed", "3"], "seed", 3),
    (["--dtype", "bfloat16"], "dtype", "bfloat16"),
]


@pytest.mark.parametrize("argv,field,value", CASES)
def test_each_option_sets_its_field(argv, field, value):
    config = from_cli(build_parser().parse_args(REQUIRED + argv))
    assert getattr(config, field) == value and type(getattr(config, field)) is type(value)
    assert dataclasses.replace(config, **{field: getattr(TrainingConfig(), field)}) == TrainingConfig()


def test_every_option_has_a_case():
    assert {argv[0] for argv, _, _ in CASES} == {f"--{flag}" for _, flag in cli_fields()}


def test_config_and_cli_import_no_training_stack():
    code = ("import sys\nimport recemb_integrations.training.config\n"
            "from recemb_integrations.cli import build_parser\nbuild_parser()\n"
            "from recemb_integrations.training import TrainingConfig, LOSSES\n"
            "print(sorted(m for m in ('sentence_transformers', 'datasets', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr
