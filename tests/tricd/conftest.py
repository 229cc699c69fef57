from tests.paper.fixtures import *  # noqa: F401,F403  (the tiny_checkpoints fixture)
