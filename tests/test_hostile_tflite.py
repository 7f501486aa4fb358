"""TFLite files with many ``WHILE`` operators sharing one body: each body is evaluated once
per read, whatever the number of loops naming it, and the evaluation counts against the
``work`` limit."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import rnnport
from rnnport.errors import LimitError
from rnnport.formats.tflite import FORMAT, loops, networks
from rnnport.formats.tflite.reader import parameter_arrays
from rnnport.io import tflite_schema

GOLDEN = Path(__file__).parent / "golden" / "tflite"
KERAS3 = Path(__file__).parent / "golden" / "tflite_keras3"  # LSTM loops: two states
COPIES = 200


def _path(name: str) -> Path:
    folder, _, case = name.rpartition("/")
    return (KERAS3 if folder == "keras3" else GOLDEN) / f"{case}.tflite"


def _many_loops(name: str, copies: int) -> bytes:
    """Golden file ``name`` with ``copies`` more WHILE operators, each a copy of its loop
    (the same inputs, condition and body) writing tensors of its own."""
    flatbuffers = pytest.importorskip("flatbuffers")
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")

    model = schema.ModelT.InitFromPackedBuf(_path(name).read_bytes(), 0)
    main = model.subgraphs[0]
    loop = next(op for op in main.operators if op.builtinOptions is not None and
                hasattr(op.builtinOptions, "bodySubgraphIndex"))
    for _ in range(copies):
        twin = copy.deepcopy(loop)
        outputs = []
        for tensor in loop.outputs:
            fresh = copy.deepcopy(main.tensors[tensor])
            fresh.name = fresh.name + f"_{len(main.tensors)}".encode()
            main.tensors.append(fresh)
            outputs.append(len(main.tensors) - 1)
        twin.outputs = outputs
        main.operators.append(twin)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


class _Counted:
    """Counts the loop bodies evaluated and the body operations computed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies = self.nodes = 0
        body = loops._Body
        counter = self

        class Counted(body):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                counter.bodies += 1
                super().__init__(*args, **kwargs)

            def _compute(self, *args: Any, **kwargs: Any) -> Any:
                counter.nodes += 1
                return super()._compute(*args, **kwargs)

        monkeypatch.setattr(loops, "_Body", Counted)


@pytest.mark.parametrize("name", ["simple_rnn", "gru_sequences", "keras3/lstm"])
def test_loops_sharing_a_body_evaluate_it_once(monkeypatch: pytest.MonkeyPatch,
                                               name: str) -> None:
    once = _Counted(monkeypatch)
    single = FORMAT.read(_path(name))
    assert once.bodies == 1
    per_body = once.nodes

    many = _Counted(monkeypatch)
    data = _many_loops(name, COPIES)
    found = networks(data).entries
    assert len(found) == COPIES + 1
    assert many.bodies == 1 and many.nodes == per_body
    many.bodies = many.nodes = 0
    assert FORMAT.read(data, node=found[0][0]) == single  # not evaluated again for the read
    assert many.bodies == 1 and many.nodes == per_body


def test_a_body_past_the_work_limit_is_refused() -> None:
    data = _many_loops("gru_sequences", 1)
    decoded = tflite_schema.decode_model(data)  # the decoder's own visits count on their own
    with rnnport.limits(work=0.001), pytest.raises(LimitError) as error:
        FORMAT.read(decoded)
    assert error.value.limit == "work"
    assert "recognising its WHILE loops has taken" in str(error.value)
    assert "rnnport.limits(work=" in str(error.value)
    assert len(networks(data).entries) == 2  # within the default limit


def test_tensors_sharing_one_quantization_table_decode_it_once() -> None:
    """A thousand tensors pointing at one table of 100,000 scales (a 420 KB file): decoded
    once, not a thousand times (3.2 GB of Python floats)."""
    from hostile_cases import tflite_shared_quantization

    data = tflite_shared_quantization(1000, 100_000)
    tensors = tflite_schema.decode_model(data).subgraphs[0].tensors
    assert len(tensors) == 1000 and len(tensors[0].quantization.scale) == 100_000
    assert all(tensor.quantization is tensors[0].quantization for tensor in tensors)
    assert tensors[0].shape is tensors[999].shape


def test_numbers_decoded_past_the_expansion_limit_are_refused() -> None:
    from hostile_cases import tflite_shared_quantization

    data = tflite_shared_quantization(2, 100_000)
    with rnnport.limits(expansion=0.5), pytest.raises(LimitError) as error:
        tflite_schema.decode_model(data, source="m.tflite")
    assert error.value.limit == "expansion"
    assert str(error.value).startswith("m.tflite: subgraphs[0].tensors[0].quantization.scale: "
                                       "decoding a vector of 100,000 values would bring")


def test_a_loop_body_evaluates_alike_wherever_read_is_called_from() -> None:
    """The evaluator follows a body's values without recursion: a chain 240 deep reads
    the same 150 frames below the recursion limit as at the top."""
    from hostile_cases import deep_call
    from tflite_edits import deep_loop_body

    data = deep_loop_body(_path("simple_rnn"), 240)
    assert data is not None
    expected = FORMAT.read(_path("simple_rnn"))
    assert FORMAT.read(data) == expected
    assert deep_call(150, lambda: FORMAT.read(data)) == expected
    with pytest.raises(rnnport.UnsupportedFeatureError, match=r"nests more than 256 operations"):
        deep_call(150, lambda: FORMAT.read(deep_loop_body(_path("simple_rnn"), 300)))


def test_constants_widened_to_float32_are_built_once_per_buffer_and_charged() -> None:
    """Four weight tensors naming one float16 buffer: widened once. A float16 constant's
    float32 values are charged against the expansion limit before they are built."""
    from tflite_edits import edited

    def share(model: Any) -> None:
        graph = model.subgraphs[0]
        for tensor in graph.tensors[10:13]:  # the input weights of the f, c and o gates
            tensor.buffer = graph.tensors[9].buffer
    data = edited(GOLDEN / "lstm_float16.tflite", share)
    arrays = dict(parameter_arrays(data))
    widened = [arrays[f"arith.constant{k}"] for k in (8, 9, 10, 11)]
    assert all(array is widened[0] for array in widened)
    assert rnnport.read(data, fmt="tflite").layers()[0].params[0][0]["weight_ih"].shape == (16, 3)
    decoded = tflite_schema.decode_model(_path("lstm_float16").read_bytes())
    with rnnport.limits(expansion=1e-6), pytest.raises(LimitError) as error:
        FORMAT.read(decoded)
    assert error.value.limit == "expansion"
    assert "its constants read as float32 would take" in str(error.value)
