"""The one resolver: where a trained model lives → a local checkpoint file (and its run's config).

Sources (used by ``load_model``, ``make predict``, ``make evaluate`` and comparisons alike):

* a ``.ckpt`` file, or a folder holding one;
* an MLflow run id (32 hex digits): the model the run registered, else its checkpoint artifact;
* ``runs:/<run id>/<name>``: the model ``name`` logged by the run, else the run's artifact ``name``;
* ``models:/<name>/<version>``, ``models:/<name>@<alias>``, ``models:/<name>/latest`` (registered
  models) or ``models:/<model id>`` (a logged model);
* ``mlflow-artifacts:/…``: an artifact URI of a tracking server.

MLflow locations are resolved with one client on the given store (``tracking_uri``, default
``$MLFLOW_TRACKING_URI`` or ``sqlite:///mlflow.db``), for the tracking and the registry alike, and
downloaded into a temporary folder that :func:`resolve` removes on exit. When the source names a run
(or a model made by one), the run id and its logged ``config.yaml`` come along.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipelines.tracking.store import tracking_uri as default_uri
from posenc import PosencError

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
RUN_URI = re.compile(r"^runs:/([0-9a-f]{32})(?:/(.*))?$")
DOWNLOAD_PREFIX = "posenc-model-"


@dataclass(frozen=True)
class Resolved:
    """A local checkpoint, the MLflow run behind it (if the source named one) and that run's config."""

    checkpoint: Path
    run_id: str | None = None
    config: Path | None = None


@contextmanager
def resolve(source: str | Path, tracking_uri: str | None = None, *, with_config: bool = False
            ) -> Iterator[Resolved]:
    """The checkpoint of ``source`` (see the module docstring); downloads are removed on exit.

    Args:
        source: a path, run id or MLflow URI.
        tracking_uri: the MLflow store for run ids and URIs.
        with_config: also fetch the run's ``config.yaml`` (when the source names a run).

    Raises:
        PosencError: nothing at that path, unknown run/model, no checkpoint among the artifacts.
    """
    local = Path(source)
    if local.is_file():
        yield Resolved(local)
        return
    if local.is_dir():
        yield Resolved(find_checkpoint(local, str(source)))
        return
    tmp = Path(tempfile.mkdtemp(prefix=DOWNLOAD_PREFIX))
    try:
        yield _from_mlflow(str(source), _Store(tracking_uri), tmp, with_config)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _from_mlflow(source: str, store: _Store, tmp: Path, with_config: bool) -> Resolved:
    run_uri = RUN_URI.match(source)
    if source.startswith("models:/"):
        location, run_id = store.model_location(source, source[len("models:/"):])
        folder = store.download(location, tmp / "model")
    elif run_uri or RUN_ID.match(source):
        run_id = run_uri.group(1) if run_uri else source
        name = (run_uri.group(2) or "").strip("/") if run_uri else ""
        location = store.logged_model(run_id, name or None)
        if location:
            folder = store.download(location, tmp / "model")
        else:
            folder = store.run_artifacts(run_id, name, tmp)
    elif source.startswith("mlflow-artifacts:/"):
        run_id, folder = None, store.download(source, tmp / "model")
    elif source.endswith(".ckpt") or "/" in source or "\\" in source:
        raise PosencError(f"{source}: checkpoint file not found")
    else:
        raise PosencError(f"{source}: neither a checkpoint file, an MLflow run id (32 hex digits) nor an "
                          "MLflow model URI (runs:/…, models:/…)")
    config = store.run_config(run_id, tmp) if (with_config and run_id) else None
    return Resolved(find_checkpoint(folder, source), run_id, config)


class _Store:
    """One MLflow client on one store, for tracking and registry; MLflow errors become one line."""

    def __init__(self, tracking_uri: str | None) -> None:
        import mlflow  # heavy: mlflow, loaded only when tracking


        self.uri = tracking_uri or default_uri()
        self.client = mlflow.MlflowClient(self.uri, registry_uri=self.uri)

    def _fail(self, what: str, exc: Exception) -> PosencError:
        reason = str(exc).strip().splitlines()[0][:200]
        return PosencError(f"{what}: not found in the MLflow store {self.uri} ({reason})")

    def model_location(self, source: str, ref: str) -> tuple[str, str | None]:
        """(artifact location, source run id) of ``models:/<ref>``."""
        from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

        try:
            if ref.startswith("m-") and "/" not in ref:  # a logged model's id
                model = self.client.get_logged_model(ref)
                return model.artifact_location, model.source_run_id
            if "@" in ref:
                name, alias = ref.split("@", 1)
                version = self.client.get_model_version_by_alias(name, alias)
            else:
                name, _, number = ref.rstrip("/").partition("/")
                if number in ("", "latest"):
                    found = self.client.search_model_versions(f"name = '{name}'")
                    number = str(max((int(v.version) for v in found), default=0) or "")
                    if not number:
                        raise MlflowException(f"Registered Model with name={name} has no versions")
                version = self.client.get_model_version(name, number)
            location = self.client.get_model_version_download_uri(version.name, version.version)
            return location, version.run_id
        except MlflowException as exc:
            raise self._fail(source, exc) from None

    def logged_model(self, run_id: str, name: str | None) -> str | None:
        """Artifact location of the last model (named ``name``, if given) logged by the run, or None."""
        from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            raise self._fail(run_id, exc) from None
        outputs = run.outputs.model_outputs if run.outputs is not None else []
        models = [self.client.get_logged_model(o.model_id) for o in outputs]
        models = [m for m in models if name is None or m.name == name]
        return models[-1].artifact_location if models else None

    def run_artifacts(self, run_id: str, path: str, tmp: Path) -> Path:
        """Download the run's artifact ``path`` ("" = all of them)."""
        from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

        try:
            return Path(self.client.download_artifacts(run_id, path, str(self._fresh(tmp / "run"))))
        except (MlflowException, OSError) as exc:
            raise self._fail(f"runs:/{run_id}/{path}", exc) from None

    def run_config(self, run_id: str, tmp: Path) -> Path | None:
        """The run's ``config.yaml`` artifact, or None if it logged none."""
        if not any(a.path == "config.yaml" for a in self.client.list_artifacts(run_id)):
            return None
        return Path(self.client.download_artifacts(run_id, "config.yaml", str(self._fresh(tmp / "config"))))

    def download(self, location: str, dst: Path) -> Path:
        import mlflow  # heavy: mlflow, loaded only when tracking
        from mlflow.exceptions import MlflowException  # heavy: mlflow, loaded only when tracking

        try:
            got = mlflow.artifacts.download_artifacts(artifact_uri=location, dst_path=str(self._fresh(dst)),
                                                      tracking_uri=self.uri)
            return Path(got)
        except (MlflowException, OSError) as exc:
            raise self._fail(location, exc) from None

    @staticmethod
    def _fresh(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def find_checkpoint(folder: Path, source: str) -> Path:
    """The checkpoint inside a downloaded artifact: a file as is; in a folder the registered model's
    checkpoint, else Lightning's ``best`` checkpoint, else the only ``.ckpt``."""
    if folder.is_file():
        return folder
    found = sorted(folder.rglob("*.ckpt"))
    if not found:
        raise PosencError(f"{source}: no checkpoint (.ckpt) among its MLflow artifacts")
    for pick in (lambda p: p.parent.name == "artifacts", lambda p: p.stem == "best"):
        chosen = [p for p in found if pick(p)]
        if chosen:
            return chosen[0]
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:4])
        raise PosencError(f"{source}: several checkpoints among its artifacts ({names}); "
                          "give a runs:/ URI to one")
    return found[0]
