"""Fixtures of dagmoe's paper path: the tiny tokenizer factory and the four corpora."""
from pathlib import Path

import pytest

from tests.dagmoe.shards import write_fineweb_edu, write_pile, write_wikipedia
from tests.paper.fixtures import *  # noqa: F401,F403  (the tiny_checkpoints fixture)
from tests.paper.layouts import write_c4


@pytest.fixture
def paper_roots(tmp_path) -> dict[str, Path]:
    """The four corpora under tmp_path, keyed by their ``paper.*`` config keys."""
    return {"pile_root": write_pile(tmp_path / "pile"),
            "wikipedia_root": write_wikipedia(tmp_path / "wikipedia"),
            "fineweb_edu_root": write_fineweb_edu(tmp_path / "fineweb-edu"),
            "c4_root": write_c4(tmp_path / "c4", n_train=20, n_validation=60)}
