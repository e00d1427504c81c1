"""Rotary schemes' settings of before :class:`~posenc.rope_scaling.RopeScaling`, translated where they
come in (the ingresses of :mod:`pipelines.tasks.upgrade.legacy`: the command line and its configs,
and checkpoints).

Until then every rotary scheme (``posenc.RoPE``, ``posenc.PeriodicRoPE``, ``posenc.XPos``) took six
flat arguments, ``scaling`` (a type name), ``scale_factor``, ``train_len``, ``beta_fast``, ``beta_slow``
and ``truncate``; a saved config or checkpoint spells them so (``scaling: none, scale_factor: 1.0, …``
in every RoPE checkpoint). Today they are one value, ``scaling: {type: yarn, factor: 8, train_len: 128}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from posenc.rope_scaling import SCALINGS, RopeScaling

#: the flat arguments of before, with ``scaling`` the type's name; ``scale_factor`` is today's ``factor``
FLAT_ARGS = ("scale_factor", "train_len", "beta_fast", "beta_slow", "truncate")
#: rotary class paths (and the modules they were defined in), without importing anything
ROTARY = frozenset(f"posenc.{m}{name}" for name in ("RoPE", "PeriodicRoPE", "XPos")
                   for m in ("", "rotary.", "rotary_variants."))


def is_rotary(class_path: Any) -> bool:
    """Whether ``class_path`` names one of posenc's rotary schemes."""
    return class_path in ROTARY


def scaling_args(init_args: Mapping[str, Any]) -> dict[str, Any]:
    """A rotary scheme's init args with the flat arguments of before as today's ``scaling`` mapping;
    init args already in today's spelling are returned as they are.

    The old code ignored a field its type did not read (``train_len`` with ``linear``, β with anything
    but YaRN, ``truncate`` with ``yarn_paper``): it is dropped, so the scheme computes what it did.
    ``scale_factor`` is kept whenever it is not 1 (the old code refused it with ``none``, and so does
    the value). An all-default ``none`` is no scaling (``None``).
    """
    old = init_args.get("scaling")
    if isinstance(old, Mapping | RopeScaling) or (old is None and not set(FLAT_ARGS) & set(init_args)):
        return dict(init_args)
    kind = old or "none"
    flat = {"factor": init_args.get("scale_factor", 1.0),
            **{k: init_args[k] for k in FLAT_ARGS[1:] if k in init_args}}
    reads = SCALINGS[kind].reads if kind in SCALINGS else frozenset(flat)  # unknown: the value names it
    value = {"type": kind, **{k: v for k, v in flat.items() if k in reads or (k == "factor" and v != 1.0)}}
    out = {k: v for k, v in init_args.items() if k != "scaling" and k not in FLAT_ARGS}
    out["scaling"] = None if value == {"type": "none"} else value
    return out


def upgrade_rope_specs(value: Any) -> Any:
    """``value`` (a config document, saved hyperparameters) with every rotary scheme's spec in it
    (Compose's children too) in today's spelling (:func:`scaling_args`); nothing is imported."""
    if isinstance(value, Mapping):
        out = {k: upgrade_rope_specs(v) for k, v in value.items()}
        if is_rotary(out.get("class_path")) and isinstance(out.get("init_args"), Mapping):
            out["init_args"] = scaling_args(out["init_args"])
        return out
    if isinstance(value, list | tuple):
        return type(value)(upgrade_rope_specs(v) for v in value)
    return value


_PE_KEY = re.compile(r"--model\.(?:init_args\.)?pe\.(?:init_args\.)?([A-Za-z_]\w*)(=.*)?", re.S)
_PE_CLASS = re.compile(r"--model\.(?:init_args\.)?pe(?:\.class_path)?=(.*)", re.S)


def rope_overrides(args: list[str], configs: list[Any]) -> list[str]:
    """Command-line overrides of the flat arguments of before (``--model.init_args.pe.init_args.
    scale_factor=8``) as today's ``scaling`` fields (``….scaling.factor=8``; ``scaling=yarn`` as
    ``scaling.type=yarn``), when the encoding the arguments name last (``configs``: their documents,
    in order) is a rotary scheme."""
    pe = None
    for doc in configs:
        model = doc.get("model") if isinstance(doc, Mapping) else None
        init = model.get("init_args") if isinstance(model, Mapping) else None
        spec = init.get("pe") if isinstance(init, Mapping) else None
        pe = spec.get("class_path", pe) if isinstance(spec, Mapping) else pe
    for arg in args:
        if m := _PE_CLASS.fullmatch(arg):
            pe = m.group(1)
    if not is_rotary(pe):
        return list(args)
    out = []
    for arg in args:
        m = _PE_KEY.fullmatch(arg)
        key, rest = (m.group(1), m.group(2) or "") if m else ("", "")
        if key == "scaling" and rest[1:2].isalpha():  # a type name, not a mapping
            out.append(f"--model.init_args.pe.init_args.scaling.type{rest}")
        elif key in FLAT_ARGS:
            field = "factor" if key == "scale_factor" else key
            out.append(f"--model.init_args.pe.init_args.scaling.{field}{rest}")
        else:
            out.append(arg)
    return out
