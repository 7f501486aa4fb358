"""Flax (linen, NNX) and Equinox: reading their parameters against the libraries' own
outputs (golden files from ``tools/golden_jax.py``), writing every golden Keras and PyTorch
case for them and running it in the real library, and the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from golden_cases import load, names

import rnnport
from rnnport.errors import FormatError, UnknownOptionError, UnsupportedFeatureError

GOLDEN = Path(__file__).parent / "golden" / "jax"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"]
TOLERANCE = 1e-5


def _case(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, Any]]:
    """The case's parameter tree (nested dicts of NumPy arrays), arrays and meta."""
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    tree: dict[str, Any] = {}
    for key, value in arrays.items():
        if not key.startswith("params/"):
            continue
        node = tree
        *scopes, leaf = key.split("/")[1:]
        for scope in scopes:
            node = node.setdefault(scope, {})
        node[leaf] = value
    return tree, arrays, json.loads(str(arrays["meta"]))


def _fmt(name: str) -> str:
    return "equinox" if name.startswith("equinox") else "flax"


def _equinox_source(tree: dict[str, Any]) -> Any:
    """The golden Equinox parameters as the format reads them: a cell's fields, or a list."""
    if set(tree) <= {"weight_ih", "weight_hh", "bias", "bias_n"}:
        return tree
    return [tree[key] for key in sorted(tree, key=int)]


def _source(name: str, tree: dict[str, Any]) -> Any:
    return _equinox_source(tree) if name.startswith("equinox") else tree


def _options(meta: dict[str, Any]) -> dict[str, Any]:
    options = meta.get("options", {})
    return {key: options[key] for key in ("activation_fn",) if options.get(key) == "relu"}


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_parameters_compute_the_librarys_output(name: str) -> None:
    tree, arrays, meta = _case(name)
    model = rnnport.read(_source(name, tree), _fmt(name), **_options(meta))
    lengths = arrays.get("lengths")
    y, _ = model.forward(arrays["x"], lengths=lengths)
    want = arrays["y"]
    if lengths is not None:  # the library computes past each length too: compare valid steps
        valid = np.arange(want.shape[1])[None, :] < lengths[:, None]
        y, want = y[valid], want[valid]
    np.testing.assert_allclose(y, want, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST if n.startswith("linen")))
def test_msgpack_checkpoints_read_as_the_tree(name: str) -> None:
    tree, _, meta = _case(name)
    path = GOLDEN / f"{name}.msgpack"
    from_tree = rnnport.read(tree, "flax", **_options(meta))
    assert rnnport.read(path, **_options(meta)) == from_tree
    assert rnnport.read(path.read_bytes(), "flax", **_options(meta)) == from_tree


def test_golden_shapes() -> None:
    assert rnnport.read(_case("linen_gru")[0], "flax").spec.cell == "gru"
    stacked = rnnport.read(_case("linen_stack_bi_lstm")[0], "flax")
    assert isinstance(stacked, rnnport.RNN) and stacked.spec.num_layers == 2
    assert stacked.spec.bidirectional
    assert rnnport.read(_case("linen_simple_relu")[0], "flax",
                        activation_fn="relu").spec.cell == "rnn_relu"
    assert not rnnport.read(_equinox_source(_case("equinox_gru_nobias")[0]),
                            "equinox").spec.bias


def test_reading_and_writing_parameters_import_no_framework() -> None:
    code = ("import sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from test_jax import _case, _source, _fmt, _options, MANIFEST\n"
            "import rnnport\n"
            "for name in MANIFEST:\n"
            "    tree, _, meta = _case(name)\n"
            "    rnnport.read(_source(name, tree), _fmt(name), **_options(meta))\n"
            f"stacked = rnnport.read({str(GOLDEN / 'linen_stack_lstm.msgpack')!r})\n"
            "rnnport.write(stacked, 'flax'); rnnport.write(stacked, 'flax', api='nnx')\n"
            "rnnport.write(stacked, 'equinox')\n"
            "bad = [m for m in ('jax', 'flax', 'equinox', 'msgpack', 'torch', 'tensorflow') "
            "if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the real libraries run what rnnport writes ----------------------------------------------


def _flax_output(module: Any, x: np.ndarray) -> np.ndarray:
    import jax.numpy as jnp

    return np.asarray(module(jnp.asarray(x)))


def _equinox_output(cells: Any, x: np.ndarray) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    def run(cell: Any, sequence: Any) -> Any:
        hidden = cell.hidden_size
        lstm = type(cell).__name__ == "LSTMCell"
        start = (jnp.zeros(hidden), jnp.zeros(hidden)) if lstm else jnp.zeros(hidden)

        def step(state: Any, value: Any) -> Any:
            new = cell(value, state)
            return new, new[0] if lstm else new
        return jax.lax.scan(step, start, sequence)[1]

    def layer(item: Any, sequence: Any) -> Any:
        if isinstance(item, dict):  # {"forward": cell, "backward": cell}
            backward = run(item["backward"], sequence[::-1])[::-1]
            return jnp.concatenate([run(item["forward"], sequence), backward], axis=-1)
        return run(item, sequence)

    layers = cells if isinstance(cells, list) else [cells]

    def whole(sequence: Any) -> Any:
        for item in layers:
            sequence = layer(item, sequence)
        return sequence
    return np.asarray(jax.vmap(whole)(jnp.asarray(x)))


WRITTEN = [(name, api) for name in names() for api in ("linen", "nnx", "equinox")]


@pytest.mark.parametrize(("name", "api"), WRITTEN)
def test_golden_cases_written_run_in_the_library(name: str, api: str) -> None:
    """Every golden Keras and PyTorch case rnnport can write for the library: the library
    computes the framework's output from what rnnport wrote, and reading it back is exact."""
    case = load(name)
    model = case.read()
    if model.dtype == np.float64:  # JAX computes in float32
        model = model.astype(np.float32)
    fmt = "equinox" if api == "equinox" else "flax"
    options = {} if api == "equinox" else {"api": api}
    try:
        written = rnnport.write(model, fmt, module=True, **options)
    except UnsupportedFeatureError as error:  # a refusal naming what the library lacks
        assert f"the {fmt} format cannot hold" in str(error) or "no recurrent candidate " \
            "bias" in str(error), error
        return
    x = case.arrays["x"].astype(np.float32)
    y = _equinox_output(written, x) if api == "equinox" else _flax_output(written, x)
    np.testing.assert_allclose(y, model.forward(x)[0], rtol=0, atol=TOLERANCE)
    if case.lengths is None and case.initial_state(model) is None and \
            np.dtype(case.meta["dtype"]) != np.float64:  # the framework's own output
        np.testing.assert_allclose(y, case.arrays["y"], rtol=0, atol=TOLERANCE)
    tree = rnnport.write(model, fmt, **options)
    back = rnnport.read(tree, fmt, **rnnport.formats.get(fmt).read_back_options(model))
    assert _same(rnnport.write(back, fmt, **options), tree)


def _same(first: Any, second: Any) -> bool:
    """Equal nested dicts and lists of equal arrays (None where a bias is left out)."""
    if isinstance(first, dict):
        return isinstance(second, dict) and first.keys() == second.keys() and \
            all(_same(first[key], second[key]) for key in first)
    if isinstance(first, list):
        return isinstance(second, list) and len(first) == len(second) and \
            all(_same(a, b) for a, b in zip(first, second, strict=True))
    if first is None or second is None:
        return first is second
    return bool(np.array_equal(first, second)) and first.dtype == second.dtype


# -- refusals --------------------------------------------------------------------------------


def test_a_module_with_an_unknown_gate_function_is_refused() -> None:
    from flax import nnx

    module = nnx.RNN(nnx.LSTMCell(3, 4, gate_fn=lambda v: v / 2, rngs=nnx.Rngs(0)))
    with pytest.raises(UnsupportedFeatureError, match="a function rnnport has no name for"):
        rnnport.read(module)
    named = rnnport.read(module, gate_fn="hard_sigmoid")
    assert named.spec.activations[0][0] == "HardSigmoid"


def test_a_module_says_its_functions() -> None:
    import jax
    from flax import nnx

    module = nnx.RNN(nnx.GRUCell(3, 4, gate_fn=jax.nn.hard_sigmoid, rngs=nnx.Rngs(0)))
    spec = rnnport.read(module).spec
    assert [name for name, _, _ in spec.activations] == ["HardSigmoid", "Tanh"]


def test_a_tree_missing_a_gate_is_refused() -> None:
    tree, _, _ = _case("linen_lstm")
    del tree["params"]["cell"]["hg"]
    with pytest.raises(FormatError, match="no Flax recurrent cell"):
        rnnport.read(tree, "flax")


def test_shapes_that_disagree_are_refused() -> None:
    tree, _, _ = _case("linen_gru")
    cell = tree["params"]["cell"]
    cell["iz"]["kernel"] = cell["iz"]["kernel"][:2]
    with pytest.raises(FormatError, match="iz/kernel: shape \\[2, 4\\]; expected \\[3, 4\\]"):
        rnnport.read(tree, "flax")
    fields = dict(_case("equinox_gru")[0])
    fields["bias_n"] = fields["bias_n"][:2]
    with pytest.raises(FormatError, match="bias_n"):
        rnnport.read(fields, "equinox")


def test_unknown_functions_and_cells_are_refused_by_name() -> None:
    tree, _, _ = _case("linen_lstm")
    with pytest.raises(UnknownOptionError, match="gate_fn='hard_tanh'"):
        rnnport.read(tree, "flax", gate_fn="hard_tanh")
    import flax.linen as nn
    import jax

    variables = nn.RNN(nn.MGUCell(4)).init(jax.random.key(0), np.zeros((1, 2, 3), np.float32))
    with pytest.raises(UnsupportedFeatureError, match="MGUCell"):
        rnnport.read(jax.tree_util.tree_map(np.asarray, variables), "flax")


def test_an_nnx_gru_cannot_hold_a_recurrent_candidate_bias() -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4), seed=1)
    with pytest.raises(UnsupportedFeatureError, match="api='linen'"):
        rnnport.write(model, "flax", api="nnx")
    assert rnnport.write(model, "flax")["params"]["cell"]["hn"]["bias"].shape == (4,)


def test_equinox_has_no_simple_rnn() -> None:
    with pytest.raises(UnsupportedFeatureError, match="no simple RNN cell"):
        rnnport.write(rnnport.RNN.random(rnnport.Spec("rnn_tanh", 3, 4)), "equinox")


def test_a_written_msgpack_is_what_flax_serialization_writes(tmp_path: Path) -> None:
    import flax.serialization

    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4, num_layers=2, bidirectional=True),
                               seed=6, dtype=np.float32)
    tree = rnnport.write(model, "flax", path=tmp_path / "model.msgpack")
    data = (tmp_path / "model.msgpack").read_bytes()
    assert data == flax.serialization.to_bytes(tree)
    assert _same(flax.serialization.msgpack_restore(data), tree)
    assert rnnport.read(tmp_path / "model.msgpack") == rnnport.read(tree, "flax")
    with pytest.raises(FormatError, match="expected '.msgpack'"):
        rnnport.write(model, "flax", path=tmp_path / "model.bin")


def test_several_networks_that_do_not_chain_are_picked_by_scope() -> None:
    encoder = rnnport.write(rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=1), "flax")
    decoder = rnnport.write(rnnport.RNN.random(rnnport.Spec("gru", 6, 5), seed=2), "flax")
    tree = {"params": {"encoder": encoder["params"], "decoder": decoder["params"]}}
    with pytest.raises(FormatError, match="do not say the order .* pass scope="):
        rnnport.read(tree, "flax")
    assert rnnport.read(tree, "flax", scope="encoder").spec.cell == "lstm"
    assert rnnport.read(tree, "flax", scope="decoder").spec.input_size == 6


def test_compact_scope_names_are_ordered_by_how_the_sizes_chain() -> None:
    """linen names layers made in a compact module by their class (``GRUCell_0``,
    ``LSTMCell_0``): the names do not say the order, the sizes may."""
    lstm = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=1)
    gru = rnnport.RNN.random(rnnport.Spec("gru", 4, 5), seed=2)
    cells = {"LSTMCell_0": rnnport.write(lstm, "flax")["params"]["cell"],
             "GRUCell_0": rnnport.write(gru, "flax")["params"]["cell"]}
    model = rnnport.read({"params": cells}, "flax")
    assert [spec.cell for spec in model.specs] == ["lstm", "gru"]  # type: ignore[union-attr]
    square = rnnport.RNN.random(rnnport.Spec("gru", 4, 4), seed=3)
    ambiguous = {"LSTMCell_0": rnnport.write(rnnport.RNN.random(rnnport.Spec("lstm", 4, 4)),
                                             "flax")["params"]["cell"],
                 "GRUCell_0": rnnport.write(square, "flax")["params"]["cell"]}
    with pytest.raises(FormatError, match="do not say the order"):
        rnnport.read({"params": ambiguous}, "flax")
    numbered = {f"RNN_{k}": {"cell": rnnport.write(square, "flax")["params"]["cell"]}
                for k in (0, 1, 10, 2)}  # 10 after 2: numbers compare as numbers
    assert rnnport.read({"params": numbered}, "flax").spec.num_layers == 4


def test_a_tree_sharing_subtrees_is_converted_once_per_subtree() -> None:
    """Sixty levels of one subtree referenced twice: 2⁶⁰ paths, sixty conversions."""
    from rnnport.formats import flax as flax_format

    converted = []
    real = flax_format.to_numpy

    def counting(value: object, where: str) -> np.ndarray:
        converted.append(where)
        return real(value, where)

    tree: dict[str, object] = {"kernel": np.zeros(2, np.float32)}
    for _ in range(60):
        tree = {"a": tree, "b": tree}
    import unittest.mock

    with unittest.mock.patch.object(flax_format, "to_numpy", counting):
        plain = flax_format._plain(tree, "tree")
    assert len(converted) == 1 and plain["a"] is plain["b"]


def test_a_written_module_gives_each_layer_its_own_functions() -> None:
    import jax

    first = rnnport.RNN.random(rnnport.Spec("gru", 3, 4), seed=1)
    second = rnnport.RNN.random(rnnport.Spec("gru", 4, 4, activations=(("HardSigmoid", 1 / 6, 0.5),
                                                       ("Tanh", 0.0, 0.0))), seed=2)
    module = rnnport.write(rnnport.stack([first, second]), "flax", module=True)
    assert module.layers[0].cell.gate_fn is jax.nn.sigmoid
    assert module.layers[1].cell.gate_fn is jax.nn.hard_sigmoid
