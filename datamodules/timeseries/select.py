"""Which inputs the model may also see over the forecast horizon, the *known-future* inputs (no
Lightning/MLflow imports): the calendar features (a function of the timestamps) and the columns named
in ``data.future_cols`` (e.g. holidays, day-ahead forecasts published before the horizon).

(The rows of one series of a long table are chosen where the file is read:
:func:`datamodules.timeseries.parse.select_rows`.)
"""

from __future__ import annotations

from posenc import PosencError


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
