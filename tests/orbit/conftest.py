"""orbit test fixtures: the shared tiny-checkpoint factory of the paper path."""
from tests.paper.fixtures import *  # noqa: F401,F403  (tiny_checkpoints)
