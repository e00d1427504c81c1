"""What a run records, made safe to share: no home paths, no credentials.

One rule for every place a run writes down what it was given: the logged ``config.yaml``, the MLflow
params and tags, the model card and the metadata inside every checkpoint (hyperparameters, the
datamodule's arguments, the data description for inference). :func:`scrub_text` replaces

* the home directory by ``~`` (``/home/alice/data/g.fa`` → ``~/data/g.fa``, which
  ``datamodules.paths.resolve_path`` expands again);
* the user-info of URLs, up to the last ``@`` before the host, by ``***`` (``postgresql://bob:p@ss@db/x``
  → ``postgresql://***@db/x``), and
  the values of secret-looking query parameters (``?password=…``, ``&sslpassword=…``, ``?token=…``);
* the values of secret-looking environment variables (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
  ``*KEY*``…) by ``***``.
"""

from __future__ import annotations

import os
import re
from argparse import Namespace
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)
#: a URL's user-info, up to the *last* ``@`` before the host (a password may hold ``@``: ``user:p@ss@host``)
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"]+@")
_SECRET_QUERY = re.compile(r"(?P<name>[?&;][\w.-]*(?:pass|pwd|token|secret|key|credential|auth)[\w.-]*=)"
                           r"[^&;#\s'\"]+", re.IGNORECASE)
#: checkpoint entries that describe the run (what it was given), scrubbed in every checkpoint
CHECKPOINT_KEYS = ("hyper_parameters", "datamodule_hyper_parameters", "posenc_inference")


def scrub_text(text: str) -> str:
    """``text`` with the home directory as ``~`` and credentials (URL user-info, secret environment
    variables' values) as ``***``."""
    for name, value in os.environ.items():
        if _SECRET_NAME.search(name) and len(value) >= 6:
            text = text.replace(value, "***")
    text = _URL_USERINFO.sub(lambda m: m.group("scheme") + "***@", text)
    text = _SECRET_QUERY.sub(lambda m: m.group("name") + "***", text)
    home = os.path.expanduser("~").rstrip("/")
    if len(home) > 1:
        text = re.sub(re.escape(home) + r"(?=/|$|[\s'\",\]])", "~", text)
    return text


def scrub_value(value: Any) -> Any:
    """:func:`scrub_text` applied to every string (and path) inside ``value``, which keeps its shape:
    mappings become dicts with the same keys, lists and tuples stay lists and tuples."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, PurePath):
        return scrub_text(str(value))
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {k: scrub_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_value(v) for v in value]
    if isinstance(value, tuple):
        items = [scrub_value(v) for v in value]
        return value._make(items) if hasattr(value, "_make") else tuple(items)  # named tuples too
    return value


def scrub_checkpoint(checkpoint: dict[str, Any]) -> None:
    """Scrub the run-describing entries of a checkpoint being saved (:data:`CHECKPOINT_KEYS`), in place."""
    for key in CHECKPOINT_KEYS:
        if key in checkpoint:
            checkpoint[key] = scrub_value(checkpoint[key])


def scrub_logged_params(logger: Any) -> None:
    """Make an MLflow logger's ``log_hyperparams`` log scrubbed values (Lightning logs the model's and
    the datamodule's arguments through it when fit starts)."""
    log = logger.log_hyperparams
    if getattr(log, "posenc_scrubbed", False):
        return

    def log_scrubbed(params: Any, *args: Any, **kwargs: Any) -> Any:
        return log(scrub_value(params), *args, **kwargs)

    log_scrubbed.posenc_scrubbed = True  # type: ignore[attr-defined]
    logger.log_hyperparams = log_scrubbed


def scrub_run_tags(client: Any, run_id: str) -> None:
    """Rewrite the run's tags whose values :func:`scrub_text` changes (MLflow's own
    ``mlflow.source.name`` holds the absolute path of the script, a user's tags anything)."""
    for key, value in client.get_run(run_id).data.tags.items():
        clean = scrub_text(value)
        if clean != value:
            client.set_tag(run_id, key, clean)


def scrub_logged_model_tags(client: Any, model_id: str) -> None:
    """Rewrite the tags of a logged model (MLflow 3's ``LoggedModel``: its own ``mlflow.source.name``
    holds the script's absolute path) whose values :func:`scrub_text` changes."""
    tags = client.get_logged_model(model_id).tags or {}
    changed = {k: scrub_text(v) for k, v in tags.items() if isinstance(v, str) and scrub_text(v) != v}
    if changed:
        client.set_logged_model_tags(model_id, changed)


__all__ = ["CHECKPOINT_KEYS", "scrub_checkpoint", "scrub_logged_model_tags", "scrub_logged_params",
           "scrub_run_tags", "scrub_text", "scrub_value"]
