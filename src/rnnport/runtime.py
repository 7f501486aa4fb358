"""The recurrences — the only implementation of the math in rnnport.

All cells in canonical form (``W`` input weights, ``R`` recurrent weights, ``bW``/``bR``
their biases, ``σ`` the logistic sigmoid, ``∘`` elementwise product)::

    LSTM   i = σ(W_i x + R_i h + bW_i + bR_i [+ p_i∘c])
           f = σ(W_f x + R_f h + bW_f + bR_f [+ p_f∘c])
           g = tanh(W_g x + R_g h + bW_g + bR_g)
           c' = f∘c + i∘g                     [clipped to ±cell_clip]
                                              [input_forget: f = 1 − i]
           o = σ(W_o x + R_o h + bW_o + bR_o [+ p_o∘c'])
           h' = o∘tanh(c')                    [h' = W_hr h' with a projection]
    GRU    r = σ(W_r x + R_r h + bW_r + bR_r)
           z = σ(W_z x + R_z h + bW_z + bR_z)
           n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))     reset after (cuDNN, PyTorch)
           n = tanh(W_n x + bW_n + R_n (r∘h) + bR_n)     reset before (Keras reset_after=False)
           h' = (1 − z)∘n + z∘h
    RNN    h' = act(W x + R h + bW + bR),  act = tanh or relu

``Spec.activations`` swaps σ (f), the candidate's tanh (g) and the output's tanh (h)
for ONNX's alternatives (:mod:`rnnport.activations`). With ``gate_clip`` (ONNX ``clip``)
every gate pre-activation (LSTM i, f, g, o; GRU r, z, n; RNN h) is clipped to
``±gate_clip`` before its activation; an LSTM's ``tanh(c')`` is not clipped (ONNX
Runtime's reading of the operator, checked against it in the tests).

The input side of a whole sequence is one matrix product per layer and direction; only
the recurrent product stays inside the time loop. With ``lengths``, a step past the end
of a sequence leaves its state unchanged and writes zeros, so the forward direction ends
and the backward direction starts at each sequence's last valid step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .activations import function, sigmoid
from .errors import DTypeError, ShapeError, StateError
from .gates import CANONICAL, block
from .model import RNN

__all__ = ["run"]

_LSTM = {gate: index for index, gate in enumerate(CANONICAL["lstm"])}
_GRU = {gate: index for index, gate in enumerate(CANONICAL["gru"])}


def _clip(spec: Any, pre: np.ndarray) -> np.ndarray:
    if spec.gate_clip is None:
        return pre
    return np.clip(pre, -spec.gate_clip, spec.gate_clip)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


class _Direction:
    """One layer-direction's parameters, prepared once per network for the time loop."""

    __slots__ = ("act_f", "act_g", "act_h", "bias_n", "input_bias", "peephole", "proj_t",
                 "recurrent_n_t", "recurrent_rz_t", "recurrent_t", "weight_ih")

    def __init__(self, spec: Any, params: Any, dtype: np.dtype) -> None:
        hidden = spec.hidden_size
        self.weight_ih = np.ascontiguousarray(params["weight_ih"].T, dtype=dtype)
        self.recurrent_t = np.ascontiguousarray(params["weight_hh"].T, dtype=dtype)
        gates = spec.gate_count
        bias = np.zeros(gates * hidden, dtype=dtype)
        self.bias_n = None
        if spec.bias:
            bias += params["bias_ih"]
            recurrent_bias = params["bias_hh"].astype(dtype)
            if spec.cell == "gru" and spec.reset_after:
                # bR_n sits inside r∘(…): it cannot join the input-side bias.
                n_block = block(recurrent_bias, CANONICAL["gru"], "n")
                self.bias_n = n_block.copy()
                n_block[...] = 0
            bias += recurrent_bias
        self.input_bias = bias
        self.proj_t = (np.ascontiguousarray(params["weight_hr"].T, dtype=dtype)
                       if spec.proj_size else None)
        self.peephole = (params["weight_peephole"].astype(dtype) if spec.peepholes else None)
        functions = [function(a) for a in spec.activations] or [sigmoid, np.tanh, np.tanh]
        if len(functions) == 2:  # a GRU has no output function
            functions.append(np.tanh)
        self.act_f, self.act_g, self.act_h = functions
        self.recurrent_rz_t = self.recurrent_n_t = None
        if spec.cell == "gru" and not spec.reset_after:
            # r∘h enters R_n alone, so the n block gets its own product.
            rec = self.recurrent_t
            self.recurrent_rz_t = np.ascontiguousarray(np.concatenate(
                [block(rec, CANONICAL["gru"], gate, axis=1) for gate in "rz"], axis=1))
            self.recurrent_n_t = np.ascontiguousarray(block(rec, CANONICAL["gru"], "n", axis=1))


def _prepared(rnn: RNN) -> list[list[_Direction]]:
    cached = rnn._cache.get("runtime")
    if cached is None:
        dtype = compute_dtype(rnn.dtype)
        cached = [[_Direction(rnn.spec, named, dtype) for named in directions]
                  for directions in rnn.params]
        rnn._cache["runtime"] = cached
    return cached


def run(
    rnn: RNN, x: Any, *, state: Any = None, lengths: Any = None, time_major: bool = False
) -> tuple[np.ndarray, Any]:
    spec = rnn.spec
    dtype = compute_dtype(rnn.dtype)
    inputs = _check_input(x, spec.input_size, dtype)
    if not time_major:
        inputs = inputs.transpose(1, 0, 2)
    steps, batch, _ = inputs.shape
    valid = _check_lengths(lengths, batch, steps)
    h0, c0 = _check_state(state, spec, batch, dtype)

    directions = spec.num_directions
    out_size = spec.output_size
    h_n = np.empty((spec.num_layers * directions, batch, out_size), dtype=dtype)
    c_n = np.empty((spec.num_layers * directions, batch, spec.hidden_size), dtype=dtype) \
        if spec.cell == "lstm" else None
    layer_input = np.ascontiguousarray(inputs)
    for layer, prepared in enumerate(_prepared(rnn)):
        y = np.empty((steps, batch, directions * out_size), dtype=dtype)
        for direction, params in enumerate(prepared):
            index = layer * directions + direction
            out = y[:, :, direction * out_size:(direction + 1) * out_size]
            h, c = _run_direction(
                spec, params, layer_input, out, valid, reverse=direction == 1,
                h=h0[index].copy(), c=None if c0 is None else c0[index].copy())
            h_n[index] = h
            if c_n is not None:
                c_n[index] = c
        layer_input = y
    y = layer_input if time_major else layer_input.transpose(1, 0, 2)
    y = np.ascontiguousarray(y)
    return y, ((h_n, c_n) if c_n is not None else h_n)


def _run_direction(
    spec: Any, params: _Direction, inputs: np.ndarray, out: np.ndarray,
    valid: np.ndarray | None, *, reverse: bool, h: np.ndarray, c: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    steps, batch, width = inputs.shape
    hidden = spec.hidden_size
    projected = inputs.reshape(steps * batch, width) @ params.weight_ih
    projected += params.input_bias
    projected = projected.reshape(steps, batch, spec.gate_count, hidden)
    step = _STEPS[spec.cell]
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        new_h, new_c = step(spec, params, projected[t], h, c)
        if valid is None:
            h, c = new_h, new_c
            out[t] = h
        else:
            keep = valid[t][:, None]
            h = np.where(keep, new_h, h)
            if c is not None:
                c = np.where(keep, new_c, c)
            out[t] = np.where(keep, h, 0.0)
    return h, c


def _lstm_step(spec: Any, params: _Direction, projected: np.ndarray, h: np.ndarray,
               c: Any) -> tuple[np.ndarray, np.ndarray]:
    batch, gates, hidden = projected.shape
    pre = (projected.reshape(batch, gates * hidden) + h @ params.recurrent_t).reshape(
        batch, gates, hidden)
    if params.peephole is not None:
        pre[:, _LSTM["i"]] += params.peephole[0] * c
        pre[:, _LSTM["f"]] += params.peephole[1] * c
    o_pre = pre[:, _LSTM["o"]]
    if params.peephole is not None:
        o_pre = o_pre.copy()  # its peephole sees c', so it is clipped after that is known
    pre = _clip(spec, pre)
    i = params.act_f(pre[:, _LSTM["i"]])
    f = 1.0 - i if spec.input_forget else params.act_f(pre[:, _LSTM["f"]])
    g = params.act_g(pre[:, _LSTM["g"]])
    new_c = f * c + i * g
    if spec.cell_clip is not None:
        np.clip(new_c, -spec.cell_clip, spec.cell_clip, out=new_c)
    if params.peephole is None:
        o_pre = pre[:, _LSTM["o"]]
    else:
        o_pre = _clip(spec, o_pre + params.peephole[2] * new_c)
    new_h = params.act_f(o_pre) * params.act_h(new_c)
    if params.proj_t is not None:
        new_h = new_h @ params.proj_t
    return new_h, new_c


def _rnn_step(spec: Any, params: _Direction, projected: np.ndarray, h: np.ndarray,
              c: Any) -> tuple[np.ndarray, None]:
    pre = _clip(spec, projected[:, 0] + h @ params.recurrent_t)
    return (np.tanh(pre) if spec.cell == "rnn_tanh" else np.maximum(pre, 0.0)), None


def _gru_step(spec: Any, params: _Direction, projected: np.ndarray, h: np.ndarray,
              c: Any) -> tuple[np.ndarray, None]:
    batch, gates, hidden = projected.shape
    r_i, z_i, n_i = _GRU["r"], _GRU["z"], _GRU["n"]
    recurrent = params.recurrent_t  # (H, 3H) in r z n column blocks
    if spec.reset_after:
        rec = (h @ recurrent).reshape(batch, gates, hidden)
        r = params.act_f(_clip(spec, projected[:, r_i] + rec[:, r_i]))
        z = params.act_f(_clip(spec, projected[:, z_i] + rec[:, z_i]))
        rec_n = rec[:, n_i]
        if params.bias_n is not None:
            rec_n = rec_n + params.bias_n
        n = params.act_g(_clip(spec, projected[:, n_i] + r * rec_n))
    else:
        rec = (h @ params.recurrent_rz_t).reshape(batch, 2, hidden)
        r = params.act_f(_clip(spec, projected[:, r_i] + rec[:, 0]))
        z = params.act_f(_clip(spec, projected[:, z_i] + rec[:, 1]))
        n = params.act_g(_clip(spec, projected[:, n_i] + (r * h) @ params.recurrent_n_t))
    return n + z * (h - n), None


_STEPS = {"lstm": _lstm_step, "gru": _gru_step, "rnn_tanh": _rnn_step, "rnn_relu": _rnn_step}


# -- argument checks ---------------------------------------------------------------------


def _check_input(x: Any, input_size: int, dtype: np.dtype) -> np.ndarray:
    array = np.asarray(x)
    if array.dtype.kind not in "fiu":
        raise DTypeError(f"forward: x has dtype {array.dtype}; expected real numbers "
                         "(float16/32/64). Cast x with x.astype(numpy.float32).")
    if array.ndim != 3 or array.shape[2] != input_size:
        raise ShapeError(
            f"forward: x has shape {array.shape}; expected (batch, time, {input_size}) "
            f"(or (time, batch, {input_size}) with time_major=True) because the network's "
            f"input_size is {input_size}. Add a batch axis with x[None] for one sequence.")
    return array.astype(dtype, copy=False)


def _check_lengths(lengths: Any, batch: int, steps: int) -> np.ndarray | None:
    if lengths is None:
        return None
    array = np.asarray(lengths)
    if array.dtype.kind not in "iu" and not (
            array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0)):
        raise StateError(f"forward: lengths has dtype {array.dtype}; expected integers.")
    if array.shape != (batch,):
        raise StateError(f"forward: lengths has shape {array.shape}; expected ({batch},), "
                         "one length per sequence in the batch.")
    array = array.astype(np.int64)
    bad = np.flatnonzero((array < 0) | (array > steps))
    if bad.size:
        raise StateError(f"forward: lengths[{bad[0]}] = {array[bad[0]]}; expected 0 ≤ length ≤ "
                         f"{steps} (the number of time steps in x).")
    if np.all(array == steps):
        return None
    return np.arange(steps)[:, None] < array[None, :]


def _check_state(state: Any, spec: Any, batch: int,
                 dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    layers_directions = spec.num_layers * spec.num_directions
    h_shape = (layers_directions, batch, spec.output_size)
    c_shape = (layers_directions, batch, spec.hidden_size)
    is_lstm = spec.cell == "lstm"
    if state is None:
        return np.zeros(h_shape, dtype), (np.zeros(c_shape, dtype) if is_lstm else None)
    if is_lstm:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise StateError(f"forward: an LSTM state is a pair (h, c) with h {h_shape} and c "
                             f"{c_shape}; got {type(state).__name__}.")
        h, c = (np.asarray(part) for part in state)
    else:
        if isinstance(state, (tuple, list)):
            raise StateError(f"forward: a {spec.cell} state is one array h {h_shape}, "
                             f"not a {type(state).__name__}.")
        h, c = np.asarray(state), None
    problems = []
    if h.shape != h_shape:
        problems.append(f"h has shape {h.shape}; expected {h_shape} "
                        "(layers·directions, batch, H_out), index layer·D + direction")
    if c is not None and c.shape != c_shape:
        problems.append(f"c has shape {c.shape}; expected {c_shape} "
                        "(layers·directions, batch, hidden)")
    if problems:
        raise StateError("forward: " + "; ".join(problems) + ".")
    return h.astype(dtype, copy=False), (None if c is None else c.astype(dtype, copy=False))

