"""Set-up of the tests/hf suite; its tiny models and helpers are in ``hf_models``."""
import sys

import pytest

from hf_models import EXAMPLES, VOCAB
from torch_neuronx.testing import tiny_models

sys.path.insert(0, str(EXAMPLES))  # tests import the examples' own functions


@pytest.fixture(scope="session")
def char_tokenizer():
    return tiny_models.byte_tokenizer(VOCAB)
