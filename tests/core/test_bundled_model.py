"""The bundled default model: loads offline by name, fits the size budget, and retrieves far above chance."""

import json

import numpy as np
import pytest

from recemb.core import DEFAULT_MODEL, Embedder
from recemb.core.loading import bundled_model_path, resolve_model_path

FOLDER = bundled_model_path(DEFAULT_MODEL)
pytestmark = pytest.mark.skipif(FOLDER is None, reason="the bundled model is not in this checkout")


@pytest.fixture(scope="module")
def emb():
    return Embedder.from_pretrained(DEFAULT_MODEL, device="cpu")


def test_resolves_by_name_and_fits_the_budget(emb):
    assert resolve_model_path(DEFAULT_MODEL) == FOLDER == resolve_model_path(f"recemb/{DEFAULT_MODEL}")
    size = sum(f.stat().st_size for f in FOLDER.rglob("*") if f.is_file())
    assert size <= 50e6, size
    assert emb.dim == json.loads((FOLDER / "config.json").read_text())["hidden_size"]
    assert emb.tokenizer.eos_token_id == 102 and emb.tokenizer.appends_eos
    card = (FOLDER / "README.md").read_text()
    assert "python -m tools.mini_model" in card and "What it is not" in card  # the maintainer command
    training = json.loads((FOLDER / "training.json").read_text())  # the build's record: its stages, as run
    assert training["pairs"] > 0 and training["layers"]["validation"]["long_acc_by_quarter"]
    assert len(training["static"]["validation_by_epoch"]) == training["static"]["config"]["epochs"] + 1


def test_titles_find_their_own_abstracts_far_above_chance(emb):
    """Instructed titles against abstracts of held-in documents; chance is 1/40 = 0.025."""
    docs = [
        ("Tidal forces and the moon", "The gravitational pull of the moon and the sun raises the ocean surface; "
         "spring tides occur when they align at new and full moon."),
        ("Baking sourdough bread at home", "A starter of flour and water ferments with wild yeast; the dough rises "
         "slowly overnight and bakes in a hot oven."),
        ("Chess opening principles", "Control the centre, develop knights and bishops early and castle to keep "
         "the king safe before attacking."),
        ("Volcanic eruptions", "Magma rises through the crust; pressure from dissolved gases drives explosive "
         "eruptions of ash and lava."),
        ("Training a puppy", "Reward good behaviour with treats, keep sessions short and be consistent with "
         "commands such as sit and stay."),
        ("Compiling C programs", "The compiler translates source files into object code and the linker joins "
         "them with libraries into an executable."),
    ]
    q = emb.encode_queries([t for t, _ in docs])
    d = emb.encode_documents([a for _, a in docs])
    hits = (q @ d.T).argmax(1) == np.arange(len(docs))
    assert hits.mean() >= 0.5, (q @ d.T).round(3)
