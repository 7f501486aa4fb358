"""ONNX's own conformance tests for LSTM, GRU and RNN, as the installed ``onnx`` package
generates them (``onnx/backend/test/case/node/{lstm,gru,rnn}.py``): every model reads, with
its weights given as the graph inputs they are, and runs to the expected outputs.

The models are the shipped node tests: W, R, B and P are graph inputs (``inputs=``), ``Y``
is often omitted (outputs ``["", "Y_h"]``), and some use ``layout=1`` or
``direction="reverse"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import rnnport

WEIGHTS = ("W", "R", "B", "P")


def _cases() -> list[Any]:
    import onnx.backend.test.case.node as node_cases
    from onnx.backend.test.case.node import gru, lstm, rnn  # noqa: F401  (their tests register)

    return [case for case in node_cases._NodeTestCases
            if case.model.graph.node[0].op_type in ("LSTM", "GRU", "RNN")]


CASES = {case.name: case for case in _cases()}


def test_every_generated_case_is_here() -> None:
    assert len(CASES) == 18
    assert {name.split("_")[1] for name in CASES} == {"lstm", "gru", "simple", "rnn"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance_case_reads_and_matches(name: str) -> None:
    case = CASES[name]
    model_proto = case.model
    node = model_proto.graph.node[0]
    inputs, expected = case.data_sets[0]
    fed = dict(zip([name for name in node.input if name], inputs, strict=True))
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    batch_first = attributes.get("layout", 0) == 1
    model = rnnport.read(model_proto, inputs={k: v for k, v in fed.items() if k in WEIGHTS})
    assert isinstance(model, rnnport.RNN)
    spec = model.spec

    def state(value: np.ndarray | None) -> np.ndarray | None:  # ONNX [D, B, H] or [B, D, H]
        return None if value is None else (np.swapaxes(value, 0, 1) if batch_first else value)

    h0, c0 = state(fed.get("initial_h")), state(fed.get("initial_c"))
    initial = None
    if h0 is not None:
        initial = (h0, c0 if c0 is not None else np.zeros_like(h0)) if spec.cell == "lstm" \
            else h0
    lengths = fed.get("sequence_lens")
    y, final = model.forward(fed["X"], state=initial, lengths=lengths,
                             time_major=not batch_first)
    h_n, c_n = final if spec.cell == "lstm" else (final, None)
    directions, hidden = spec.num_directions, spec.hidden_size
    if batch_first:  # ONNX: Y [B, T, D, H], Y_h [B, D, H]
        outputs = {"Y": y.reshape(*y.shape[:2], directions, hidden),
                   "Y_h": np.swapaxes(h_n, 0, 1),
                   "Y_c": None if c_n is None else np.swapaxes(c_n, 0, 1)}
    else:  # ONNX: Y [T, D, B, H], Y_h [D, B, H]
        outputs = {"Y": y.reshape(*y.shape[:2], directions, hidden).transpose(0, 2, 1, 3),
                   "Y_h": h_n, "Y_c": c_n}
    present = [output for output in node.output if output]
    assert len(present) == len(expected)
    for output, want in zip(present, expected, strict=True):
        np.testing.assert_allclose(outputs[output], want, atol=1e-5, rtol=1e-5,
                                   err_msg=f"{name}: {output}")


def test_a_weight_fed_at_run_time_without_a_value_says_how_to_give_it() -> None:
    case = CASES["test_lstm_defaults"]
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"'W' is a graph input fed at run time.*inputs=\{'W': array\}"):
        rnnport.read(case.model)
    with pytest.raises(rnnport.FormatError, match="'Q', which are no inputs of the graph"):
        rnnport.read(case.model, inputs={"Q": np.zeros(1)})
