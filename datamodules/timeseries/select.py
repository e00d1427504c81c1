"""Which rows and which inputs: one series out of a long table, and the inputs known in advance
(no Lightning/MLflow imports).

- :func:`select_rows`: the rows of one series of a *long* table (several series stacked, told apart
  by an id column such as ``unique_id`` or ``Sensor``), e.g. ``{"unique_id": "FR"}``.
- :func:`future_columns`: which covariate columns the model may also see over the forecast horizon
  (the *known-future* inputs): the calendar features (a function of the timestamps) and the columns
  named in ``data.future_cols`` (e.g. holidays, day-ahead forecasts published before the horizon).
"""

from __future__ import annotations

import pandas as pd

from posenc import PosencError


def select_rows(df: pd.DataFrame, select: dict[str, object] | None, source: str) -> pd.DataFrame:
    """The rows of ``df`` where every column named in ``select`` equals its value (compared as text,
    so ``{"unique_id": "FR"}`` and ``{"id": 3}`` both work); ``df`` itself when ``select`` is empty.

    Raises:
        PosencError: a named column is missing, or no row matches (the values present are named).
    """
    if not select:
        return df
    if not isinstance(select, dict):
        raise PosencError(f"data.select must map columns to values, e.g. {{unique_id: FR}}, got {select!r}")
    keep = pd.Series(True, index=df.index)
    for col, value in select.items():
        if col not in df.columns:
            raise PosencError(f"{source}: data.select names column {col!r}, not found (columns: "
                              f"{', '.join(map(str, df.columns))})")
        keep &= df[col].astype(str) == str(value)
        if not keep.any():
            present = ", ".join(map(str, pd.unique(df[col].astype(str))[:10]))
            raise PosencError(f"{source}: no row has {col} == {value!r} (values: {present}); fix data.select")
    return df.loc[keep].reset_index(drop=True)


def future_columns(covariate_cols: list[str], future_cols: list[str], calendar_names: list[str],
                   future_calendar: bool) -> list[int]:
    """Indices into the covariates ``covariate_cols + calendar_names`` of the known-future inputs:
    the ``future_cols`` (which must be covariates) and, with ``future_calendar``, the calendar ones."""
    missing = [c for c in future_cols if c not in covariate_cols]
    if missing:
        raise PosencError(f"data.future_cols {missing} are not covariates; list them in data.covariate_cols "
                          f"too (covariates: {covariate_cols})")
    index = [covariate_cols.index(c) for c in future_cols]
    if future_calendar:
        index += [len(covariate_cols) + j for j in range(len(calendar_names))]
    return index
