"""The rules in words that take one format's layout to the other, read off the traced
tables; where each target block comes from; what run-time constants change; the counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..api import param_count, read, write
from ..errors import RnnportError
from ..formats import NamedArray, formats, get
from ..model import RNN, Model, Stack
from ..spec import Spec
from .layout import Count, Origin
from .trace import (
    BR,
    BW,
    GATE_NAMES,
    KIND_NAMES,
    KIND_TAGS,
    SUM,
    ZERO,
    R,
    Region,
    TracedArray,
    W,
    code_dtype,
)

__all__ = ["annotate", "constant_rules", "count", "gate_names", "native_arrays", "options_for",
           "origins", "rules"]


def _letters(fmt: str, order: str) -> str:
    aliases = get(fmt).gate_names
    return " ".join(aliases.get(letter, letter) for letter in order)


def gate_names(source: str, target: str, letters: str) -> dict[str, str]:
    """``cell candidate (keras c, tf1 j)``: each gate's name and what the formats call it."""
    out = {}
    for letter in letters:
        aliases = [f"{fmt} {get(fmt).gate_names[letter]}" for fmt in dict.fromkeys((source, target))
                   if letter in get(fmt).gate_names]
        out[letter] = GATE_NAMES[letter] + (f" ({', '.join(aliases)})" if aliases else "")
    return out


def _order_text(fmt: str, order: str) -> str:
    native = _letters(fmt, order)
    canonical = " ".join(order)
    return native if native == canonical else f"{native} (canonical {canonical})"


def _region_note(fmt: str, array: TracedArray, region: Region) -> str:
    span = array.span(region)
    where = f"{span} " if span else ""
    if region.kind == ZERO:
        return f"{where}zeros (holds no parameter)"
    if not region.regular:
        return f"{where}{KIND_NAMES[region.kind]}: irregular layout"
    hidden = array.book.hidden
    blocks = f"gate blocks {_order_text(fmt, region.order)}, {hidden} units each"
    other, product = ("inputs", "W·x") if region.kind == W else ("h", "R·h")
    if region.orientation == "rows":
        layout = f"rows: {blocks}; columns: {other} ({product})"
    elif region.orientation == "columns":
        layout = f"rows: {other}; columns: {blocks} (transposed: {product[-1]} @ {product[0]})"
    else:
        layout = blocks
    return f"{where}{KIND_NAMES[region.kind]} — {layout}"


def annotate(fmt: str, arrays: Sequence[TracedArray]) -> list[TracedArray]:
    """Each array with its notes: how every region lies, then what the format says of it."""
    return [dataclasses.replace(array, notes=(*(_region_note(fmt, array, region)
                                                for region in array.regions()), *array.notes))
            for array in arrays]


def _permutation_text(source: str, target: str) -> str:
    if source == target:
        return "same order"
    moved = [index for index, (a, b) in enumerate(zip(source, target, strict=True)) if a != b]
    if len(moved) == 2:
        return f"blocks {moved[0]} and {moved[1]} swap"
    return "target blocks = source blocks " + " ".join(str(source.index(g)) for g in target)


def rules(spec: Spec, source: str, target: str, source_arrays: Sequence[TracedArray],
          target_arrays: Sequence[TracedArray], hub: Sequence[TracedArray],
          buffers: Mapping[str, int] | None = None) -> list[str]:
    """The rules that take ``source``'s arrays to ``target``'s, one sentence each; ``hub``:
    the canonical biases between them; ``buffers``: the size of each format's flat buffer of
    the whole network, when the arrays are layer 0 of a larger one."""
    rules: list[str] = []
    pieces = [(array, region) for array in source_arrays for region in array.regions()]
    summed_targets: dict[str, list[str]] = {}
    zero_targets: list[str] = []
    for array in target_arrays:
        for region in array.regions():
            name = f"{target} {array.name}{array.span(region)}"
            if region.kind == ZERO:
                zero_targets.append(name)
                continue
            wanted = set(region.order)
            kinds = {region.kind}
            found = [(a, r) for a, r in pieces if r.kind in kinds and wanted & set(r.order)]
            summed = False
            if region.kind == SUM and not found:
                found = [(a, r) for a, r in pieces if r.kind in (BW, BR) and wanted & set(r.order)]
                summed = True
            if region.kind == SUM:
                summed_targets.setdefault(name, []).extend(sorted(wanted,
                                                                  key=region.order.index))
            rules.append(_copy_rule(source, target, name, region, found, summed))
    source_sums = [(a, r) for a, r in pieces if r.kind == SUM]
    if source_sums:
        summed_gates = "".join(dict.fromkeys(g for _, r in source_sums for g in r.order))
        slots = [f"{array.name}" for array in hub for r in array.regions() if r.kind == SUM]
        zeros = [f"{array.name}{array.span(r)}" for array in hub for r in array.regions()
                 if r.kind == ZERO]
        side = {"bias_hh": "recurrent-side", "bias_ih": "input-side"}
        rules.append(
            f"{source} keeps one bias for gates {_letters(source, summed_gates)}: the sum bW + bR. "
            "Reading it puts the sum in the canonical "
            f"{', '.join(side[s] + ' bias ' + s for s in slots)} and zeros in {', '.join(zeros)} "
            "— the same function, exactly.")
    if zero_targets:
        where = ", ".join(summed_targets) or "the other slot"
        rules.append(f"{'; '.join(zero_targets)}: zeros — {source} has one bias per gate where "
                     f"{target} has two; the sum goes to {where}.")
    elif summed_targets and not source_sums:
        for name, letters in summed_targets.items():
            rules.append(f"{name}: {target} keeps one bias for gates "
                         f"{_letters(target, ''.join(letters))}, so writing adds bW + bR (exact "
                         "in function; the two cannot be told apart again).")
    for fmt, arrays in ((source, source_arrays), (target, target_arrays)):
        if any(array.offset is not None for array in arrays):
            rules.append(_flat_rule(fmt, arrays, (buffers or {}).get(fmt)))
    if spec.cell == "gru":
        rules.append(_gru_rule(spec))
        for fmt in dict.fromkeys((source, target)):
            both = _gru_counts(spec, fmt)
            if both is not None:
                rules.append(_gru_count_rule(spec, fmt, *both))
    for fmt in dict.fromkeys((source, target)):
        rules.extend(get(fmt).layout_notes)
    return list(dict.fromkeys(rules))


AFTER = "n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))"
BEFORE = "n = tanh(W_n x + R_n(r∘h) + bW_n + bR_n)"
WHY_ONE_BIAS = ("The reset-after GRU keeps the candidate's recurrent bias bR_n apart because r "
                "multiplies (R_n h + bR_n); the reset-before GRU applies r to h before the "
                "product, so bW_n and bR_n only ever act as their sum and can be stored as one.")


def _gru_rule(spec: Spec) -> str:
    if spec.reset_after:
        return (f"GRU here is reset-after: {AFTER} ({_called('reset_after')}). A reset-before "
                f"GRU ({_called('reset_before')}), {BEFORE}, is a different function; no "
                "conversion between the two is exact.")
    return (f"GRU here is reset-before: {BEFORE} ({_called('reset_before')}). The reset-after "
            f"GRU ({_called('reset_after')}), {AFTER}, is a different function; no conversion "
            f"between the two is exact. {WHY_ONE_BIAS}")


def _gru_counts(spec: Spec, fmt: str) -> tuple[int, int] | None:
    """(reset-before, reset-after) parameters of one layer of ``spec`` as ``fmt`` stores them,
    where ``fmt`` holds both GRUs and their counts differ; else None."""
    if spec.cell != "gru" or not {"reset_before", "reset_after"} <= get(fmt).held_features:
        return None
    before, after = (param_count(model, fmt, **get(fmt).write_options_for(model.spec))
                     for model in (RNN.random(spec.replace(reset_after=flag),
                                              dtype=code_dtype(spec, (fmt,)))
                                   for flag in (False, True)))
    return None if before == after else (before, after)


def _gru_count_rule(spec: Spec, fmt: str, before: int, after: int) -> str:
    """``keras stores a reset-before GRU … with one bias per gate, 3·H: … = 150 parameters
    …, against … = 165 for a reset-after GRU``: ``before`` and ``after`` as ``fmt`` counts."""
    gates, hidden, inputs = spec.gate_count, spec.hidden_size, spec.input_size
    weights = gates * hidden * (inputs + hidden)
    names = get(fmt).names

    def formula(total: int) -> str:
        return f"{gates}·H·(I + H) + {(total - weights) // hidden}·H = {total}"

    called = {key: f" ({names[key]})" if key in names else "" for key in ("reset_before",
                                                                          "reset_after")}
    stored = "one bias per gate" if before - weights == gates * hidden else "its biases"
    return (f"{fmt} stores a reset-before GRU{called['reset_before']} with {stored}, "
            f"{(before - weights) // hidden}·H: {formula(before)} parameters (I = {inputs}, "
            f"H = {hidden}), against {formula(after)} for a reset-after "
            f"GRU{called['reset_after']}, which must keep the candidate's two biases apart.")


def _called(key: str) -> str:
    """``keras reset_after=True, onnx linear_before_reset=1, …``: what formats call it."""
    return ", ".join(f"{name} {get(name).names[key]}" for name in formats()
                     if key in get(name).names)


def _copy_rule(source: str, target: str, name: str, region: Region,
               found: list[tuple[TracedArray, Region]], summed: bool) -> str:
    kind = KIND_TAGS[region.kind]
    if not found:
        return f"{name} ({kind}): not found in {source} (a bug in explain)."
    wanted = set(region.order)
    parts = []
    order = ""
    seen: set[str] = set()
    for array, piece in found:
        subset = "".join(g for g in piece.order if g in wanted)
        label = f"{array.name}{array.span(piece)}"
        details = [KIND_TAGS[piece.kind]] if summed else []
        if set(piece.order) != set(subset):
            details.append(f"blocks {_letters(source, subset)}")
        if details:
            label += f" ({', '.join(details)})"
        parts.append(label)
        if not summed or piece.kind == BW:
            order += "".join(g for g in subset if g not in seen)
            seen.update(subset)
    steps = []
    if summed:
        steps.append("summed element-wise")
    orientations = {piece.orientation for _, piece in found}
    if region.orientation is not None and orientations - {None}:
        transposed = any(o not in (None, region.orientation) for o in orientations)
        steps.append("transposed" if transposed else "not transposed")
    if len({array.name for array, _ in found}) > 1 and not summed:
        steps.append("concatenated")
    if len(region.order) > 1 or len(order) > 1:
        if order == region.order:
            steps.append(f"gate order {_letters(source, order)} kept" if source == target else
                         f"gate blocks {_letters(source, order)} → "
                         f"{_letters(target, region.order)} (same order)")
        else:
            steps.append(f"gate blocks {_letters(source, order)} → "
                         f"{_letters(target, region.order)} "
                         f"({_permutation_text(order, region.order)})")
    return f"{name} ({kind}) ← {source} {' + '.join(parts)}: {'; '.join(steps) or 'copied'}."


def _flat_rule(fmt: str, arrays: Sequence[TracedArray], whole: int | None = None) -> str:
    """The offsets of ``fmt``'s flat segments; ``whole``: the size of the whole network's
    buffer when these are its layer 0, forward direction."""
    total = sum(array.size for array in arrays)
    pieces = []
    for array in arrays:
        columns = array.shape[-1] if len(array.shape) == 2 else 1
        offset = array.offset or 0
        blocks = []
        for region in array.regions():
            start = offset + region.rows[0] * columns + region.cols[0]
            if region.kind == ZERO:
                blocks.append(f"zeros@{start}")
                continue
            step = array.book.hidden * (columns if region.orientation == "rows" else 1)
            for index, gate in enumerate(region.order):
                blocks.append(f"{KIND_TAGS[region.kind]}_{gate}@{start + index * step}")
        shape = (f" (each {array.book.hidden}×{columns}, row-major)" if len(array.shape) == 2
                 else "")
        pieces.append(f"{array.name} [{offset}, {offset + array.size}): "
                      f"{' '.join(blocks)}{shape}")
    if whole is not None:
        return (f"{fmt} flat buffer of the whole network, {whole} elements (every block in the "
                "block map); layer 0, forward direction — " + "; ".join(pieces) + ".")
    return (f"{fmt} flat buffer, {total} elements: all matrices first, then all biases; "
            "offsets — " + "; ".join(pieces) + ".")


# -- run-time constants ---------------------------------------------------------------------


Options = dict[str, Any]


def options_for(fmt: str, spec: Spec,
                constants: Mapping[str, float] | None = None) -> tuple[Options, Options]:
    """(read options, write options) that tell ``fmt`` what its arrays do not say about a
    network of ``spec``; each run-time constant at ``constants``' value, else neutral."""
    declared = get(fmt)
    values = {c.option: (constants or {}).get(c.option, c.neutral)
              for c in declared.run_time_constants if spec.cell in c.cells}
    return ({**declared.read_options_for(spec), **values},
            {**declared.write_options_for(spec), **values})


def native_arrays(model: Model, fmt: str, options: Mapping[str, Any]) -> list[NamedArray]:
    """``model`` written as ``fmt``, as the format names its arrays."""
    spec = model.parts[0].spec if isinstance(model, Stack) else model.spec
    return get(fmt).explain_arrays(write(model, fmt, **options), spec)


def constant_rules(spec: Spec, source: str, target: str, source_native: Any,
                   canonical: Model, offsets: Mapping[str, int] | None = None) -> list[str]:
    """Where a run-time constant that a format never saves (TF1's ``forget_bias``) goes,
    found by a second trace with the constant at its default; ``offsets``: where the target's
    flat segments lie in the whole network's buffer, by name, when the tables show its
    layer 0."""
    out = []
    baseline = native_arrays(canonical, target, options_for(target, spec)[1])
    for constant in get(source).run_time_constants:
        if spec.cell not in constant.cells:
            continue
        default = {constant.option: constant.default}
        both = constant.option in {c.option for c in get(target).run_time_constants}
        folded = read(source_native, source, **options_for(source, spec, default)[0])
        shifted = native_arrays(folded, target,
                                options_for(target, spec, default if both else None)[1])
        changes = _differences(baseline, shifted, offsets)
        effect = (f"reading and writing back with the same {constant.option}="
                  f"{constant.default!r}: {changes}" if both else
                  f"reading with {constant.option}={constant.default!r} {changes}")
        out.append(f"{constant.what}; these tables trace {constant.option}="
                   f"{constant.neutral:g}. With the default, {effect}.")
    source_options = {c.option for c in get(source).run_time_constants}
    for constant in get(target).run_time_constants:
        if spec.cell not in constant.cells or constant.option in source_options:
            continue
        default = {constant.option: constant.default}
        shifted = native_arrays(canonical, target, options_for(target, spec, default)[1])
        out.append(f"{constant.what}; these tables trace {constant.option}="
                   f"{constant.neutral:g}. Writing for {constant.option}={constant.default!r} "
                   f"{_differences(baseline, shifted, offsets)}, so {constant.adder} adds it "
                   "back.")
    return out


def _differences(before: Sequence[NamedArray], after: Sequence[NamedArray],
                 offsets: Mapping[str, int] | None = None) -> str:
    changes = []
    for old, new in zip(before, after, strict=True):
        name = old.name
        offset = None if old.offset is None else (offsets or {}).get(name, old.offset)
        delta = np.asarray(new.array, np.float64) - np.asarray(old.array, np.float64)
        if not delta.any():
            continue
        flat = np.flatnonzero(delta.reshape(-1))
        values = sorted({float(v) for v in delta.reshape(-1)[flat]})
        amount = ", ".join(f"{v:+g}" for v in values)
        start, stop = int(flat[0]), int(flat[-1]) + 1
        lead = np.unravel_index(start, delta.shape)[:-1]
        same_line = np.unravel_index(stop - 1, delta.shape)[:-1] == lead
        if stop - start == flat.size and same_line:
            first = start % delta.shape[-1]
            index = "".join(f"{int(i)}, " for i in lead) + f"{first}:{first + stop - start}"
            where = f"{name}[{index}]"
            if offset is not None:
                where += f" (buffer [{offset + start}, {offset + stop}))"
        else:
            where = f"{name} (flat elements {flat.tolist()})"
        changes.append(f"adds {amount} to {where}")
    if not changes:
        return "changes nothing (the two cancel, bit-exact)"
    every = (" — shown for layer 0's forward direction; every layer and direction of the "
             "buffer has such a slot, and changes likewise") if offsets else ""
    return "; ".join(changes) + every


# -- counts ---------------------------------------------------------------------------------


def count(fmt: str, arrays: Sequence[TracedArray], model: RNN, spec: Spec) -> Count:
    """Parameters as ``fmt`` stores ``model`` (one layer of ``spec``), checked against the
    elements traced, with the formula and the elements by kind."""
    total = sum(array.size for array in arrays)
    expected = param_count(model, fmt, **options_for(fmt, spec)[1])
    if total != expected:
        raise RnnportError(f"explain: traced {total} elements in {fmt}, but param_count says "
                           f"{expected} (a bug in explain or the format).")
    tags = np.concatenate([array.kinds().reshape(-1) for array in arrays]) if arrays else np.array([])
    weights = int(np.isin(tags, ["W", "R"]).sum())
    biases = total - weights
    gates, hidden, inputs = spec.gate_count, spec.hidden_size, spec.input_size
    if biases == 0:
        formula = f"G·H·(I + H) = {gates}·{hidden}·({inputs} + {hidden})"
    elif biases % (gates * hidden) == 0:
        per_gate = biases // (gates * hidden)
        formula = (f"G·H·(I + H + {per_gate}) = {gates}·{hidden}·({inputs} + {hidden} + "
                   f"{per_gate})")
    else:
        blocks = biases // hidden
        formula = (f"G·H·(I + H) + {blocks}·H = {gates}·{hidden}·({inputs} + {hidden}) + "
                   f"{blocks}·{hidden}")
    kinds = {tag: int((tags == tag).sum()) for tag in KIND_TAGS if (tags == tag).any()}
    detail = ", ".join(f"{tag} {number}" for tag, number in kinds.items())
    detail += f"; G={gates} gates, H={hidden}, I={inputs}"
    found = _gru_counts(spec, fmt)
    if found is not None:
        other = "reset_before" if spec.reset_after else "reset_after"
        called = get(fmt).names.get(other)
        which = "a reset-before GRU" if spec.reset_after else "a reset-after GRU"
        detail += (f"; {which}{f' ({called})' if called else ''}: "
                   f"{found[0] if spec.reset_after else found[1]}")
    return Count(fmt, total, formula, detail)


# -- where each target block comes from --------------------------------------------------------

SYMBOLS = {W: "W", R: "R", BW: "bW", BR: "bR", SUM: "b"}


def origins(source: str, source_arrays: Sequence[TracedArray],
            target_arrays: Sequence[TracedArray]) -> list[Origin]:
    """Every gate block of the target, in storage order, with the source block it holds."""
    pieces = [(array, region) for array in source_arrays for region in array.regions()]
    out = []
    for array in target_arrays:
        hidden = array.book.hidden
        for region in array.regions():
            if region.kind == ZERO or not region.regular:
                rows, cols = region.rows, region.cols
                size = (rows[1] - rows[0]) * (cols[1] - cols[0])
                why = (f"zeros: {source} keeps one bias per gate" if region.kind == ZERO else
                       "an irregular layout")
                out.append(Origin(array.name, array.span(region), _offset(array, rows, cols),
                                  size, f"{array.name}{array.span(region)} ({size})", why))
                continue
            for gate in region.order:
                rows, cols = region.gate_block(gate, hidden)
                height, width = rows[1] - rows[0], cols[1] - cols[0]
                dims = f"{height}×{width}" if region.kind in (W, R) else f"{height * width}"
                out.append(Origin(array.name, array.span_of(rows, cols),
                                  _offset(array, rows, cols), height * width,
                                  f"{SYMBOLS[region.kind]}_{gate} ({dims})",
                                  _source_of(region, gate, pieces)))
    return out


def _offset(array: TracedArray, rows: tuple[int, int], cols: tuple[int, int]) -> int | None:
    if array.offset is None:
        return None
    return array.offset + rows[0] * (array.shape[-1] if array.shape else 1) + cols[0]


def _source_of(region: Region, gate: str,
               pieces: Sequence[tuple[TracedArray, Region]]) -> str:
    """Where gate ``gate`` of a target region is in the source: its blocks, ``ᵀ`` where the
    orientation differs, joined with `` + `` where the target sums two."""
    kinds = (BW, BR) if region.kind == SUM else (region.kind,)
    found = [(array, piece) for array, piece in pieces
             if piece.regular and gate in piece.order and (
                 piece.kind == region.kind or (region.kind == SUM and piece.kind in kinds))]
    texts = []
    for array, piece in found:
        rows, cols = piece.gate_block(gate, array.book.hidden)
        flip = "ᵀ" if None not in (region.orientation, piece.orientation) and \
            piece.orientation != region.orientation else ""
        texts.append(f"{array.name}{array.span_of(rows, cols)}{flip}")
    if not texts:
        raise RnnportError(f"explain: gate {gate} of a {KIND_NAMES[region.kind]} block was not "
                           "found in the source (a bug in explain or the format).")
    return " + ".join(texts)
