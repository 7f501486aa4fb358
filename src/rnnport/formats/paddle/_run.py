"""PaddlePaddle running a paddle file, in a process of its own (``python -m
rnnport.formats.paddle._run JOB.json``, started by :func:`rnnport.formats.paddle.
framework_forward` through :func:`rnnport.formats._jobs.run_job`).

Paddle is never imported into rnnport's process: imported after TensorFlow it crashes the
process (paddle 3.3), and it costs seconds. Here it loads the file itself: a ``.pdparams``
through ``paddle.load`` and ``set_state_dict`` into the ``paddle.nn`` layer built for the
network's spec, an inference model through ``paddle.jit.load``. What it cannot run it says on
its last line of standard error, and exits with status 3.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...spec import Spec


class Refused(Exception):
    """Why paddle does not run the file; the check says so instead."""


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Paddle's import and first run print warnings and log lines: kept out of the output."""
    os.environ.setdefault("GLOG_minloglevel", "2")  # its C++ log, read when paddle loads
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def layer_for(spec: Spec, time_major: bool = False) -> Any:
    """The ``paddle.nn`` layer computing a network of ``spec`` (needs paddle); with biases
    always (paddle 3.3 cannot run a layer made with ``bias_*_attr=False``: its rnn kernel
    crashes), zeros for a network without."""
    import paddle

    direction = "bidirect" if spec.bidirectional else "forward"
    sizes = (spec.input_size, spec.hidden_size, spec.num_layers, direction, time_major)
    if spec.cell == "lstm":
        return paddle.nn.LSTM(*sizes, proj_size=spec.proj_size)
    if spec.cell == "gru":
        return paddle.nn.GRU(*sizes)
    return paddle.nn.SimpleRNN(*sizes, activation=spec.nonlinearity)


def run(job: dict[str, Any]) -> np.ndarray:
    """``y`` paddle computes for the job's ``x`` from its ``source`` (see the module)."""
    from . import PROGRAM_KINDS, _program_paths, _read_program, _read_state
    from .state import flat_items

    source, x = job["source"], np.load(job["x"], allow_pickle=False)
    sizes = job["spec"]
    spec = Spec(sizes["cell"], sizes["input_size"], sizes["hidden_size"],
                num_layers=sizes["num_layers"], bidirectional=sizes["bidirectional"],
                proj_size=sizes["proj_size"])
    with quiet():
        import paddle

        if job["kind"] in PROGRAM_KINDS:
            program_path, _ = _program_paths(source)
            _, program, op = _read_program(source, {})
            if op.time_major is None or len(program.rnns) > 1 or program.others:
                raise Refused("the inference model computes more than its rnn operator, or "
                              "takes its input in a layout rnnport does not follow")
            loaded = paddle.jit.load(os.fspath(program_path.with_suffix("")))
            loaded.eval()
            feed = np.ascontiguousarray(x.transpose(1, 0, 2)) if op.time_major else x
            out = loaded(paddle.to_tensor(feed))
            y = np.asarray((out[0] if isinstance(out, (list, tuple)) else out).numpy())
            return y.transpose(1, 0, 2) if op.time_major else y
        layer = layer_for(spec)
        options = {"activation": spec.nonlinearity} if spec.cell.startswith("rnn") else {}
        _, _, network = _read_state(source, {**options, "prefix": job.get("prefix")})
        state = paddle.load(os.fspath(source))
        own = {key: tuple(value.shape) for key, value in layer.state_dict().items()}
        picked = {key[len(network.prefix):]: value for key, value in flat_items(state)
                  if isinstance(key, str) and key.startswith(network.prefix)}
        # A network without biases in a layer paddle gives zero biases: the PyTorch-named
        # copies sit elsewhere there, so the cells' keys alone go in.
        taken = {key: value for key, value in picked.items()
                 if own.get(key) == tuple(np.shape(value))}
        missing = [key for key in own if ".cell" in key and key not in taken]
        if missing:
            raise Refused(f"paddle's {type(layer).__name__} does not take the file's keys "
                          f"({', '.join(missing)} missing)")
        # The layer is float32: a bfloat16 or float16 file's tensors go in widened to it.
        layer.set_state_dict({key: value.astype("float32")
                              if isinstance(value, paddle.Tensor) else value
                              for key, value in taken.items()})
        layer.eval()
        y, _ = layer(paddle.to_tensor(np.asarray(x, np.float32)))
        return np.asarray(y.numpy())


def main(argv: list[str]) -> int:
    from .._jobs import job_main

    try:
        return job_main(argv, run)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
