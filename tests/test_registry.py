"""Every registered format has the same surface."""

from __future__ import annotations

import pytest

import rnnport
from rnnport.formats import get


@pytest.mark.parametrize("name", rnnport.formats())
def test_format_module_surface(name: str) -> None:
    module = get(name)
    for attribute in ("DESCRIPTION", "EXTRA", "FEATURES", "READ_OPTIONS", "WRITE_OPTIONS",
                      "sniff", "read", "write", "param_count"):
        assert hasattr(module, attribute), f"{name} lacks {attribute}"
    assert module.FEATURES <= {"projection", "peepholes", "cell_clip", "gate_clip",
                               "input_forget", "activations", "reset_before"}
    assert module.sniff(object()) is False
