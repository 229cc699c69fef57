"""pytest fixtures of the paper path; a conftest imports them (``from tests.paper.fixtures import *``)."""
from __future__ import annotations

import pytest

from tests.paper.checkpoints import TinyCheckpoints

__all__ = ["tiny_checkpoints"]


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> TinyCheckpoints:
    """Session-wide factory: each family is built and saved once, on first request."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()     # "Loading weights" bars say nothing in test output
    return TinyCheckpoints(tmp_path_factory.mktemp("tiny-checkpoints"))
