"""LightningCLI entry point shared by ``train`` (and later ``evaluate`` / ``predict``).

Usage: ``python -m pipelines.train fit --config configs/dna_lm.yaml [--config configs/posenc/rope.yaml]``.
User mistakes (bad files, bad values) end as one ``error: …`` line and exit status 2.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from datamodules.config import as_mapping
from datamodules.progress import interactive, progress_enabled
from pipelines.children import die_with_parent
from pipelines.cli.ckpt_config import checkpoint_model, weights_mismatch
from pipelines.cli.config_errors import user_error
from pipelines.console import LineProgressBar, configure, print_error, spell_out_verbose
from pipelines.console.scrub import scrub_logged_params
from pipelines.inference.loading import read_checkpoint
from pipelines.inference.registry import RegisterModel
from pipelines.safety import (
    check_class_paths,
    check_local_checkpoint,
    enforce_import_policy,
    local_checkpoint_path,
    take_trust_args,
    unsafe_checkpoint,
)
from pipelines.tasks.base import TaskModule
from pipelines.tasks.distributed import end_process_group
from pipelines.tasks.resources import check_fit
from pipelines.tasks.upgrade.legacy import SAFE_LOADER, named_class_path, translate_cli
from pipelines.tracking.card import command_line, update_card
from pipelines.tracking.failure import (
    FailedRunGuard,
    StopOnNonFiniteLoss,
    Terminated,
    environment_error,
    note_store,
    stop_on_sigterm,
)
from pipelines.tracking.resume import ResumeCheckpoint
from pipelines.tracking.resume import prepare as prepare_resume
from pipelines.tracking.runlock import release_all as release_run_locks
from pipelines.tracking.store import (
    LogConfigToMLflow,
    mlflow_logger_args,
    mlflow_logger_defaults,
    mlflow_loggers,
    new_store_lock,
    run_summary,
)
from pipelines.tracking.system_metrics import GpuSystemMetrics
from posenc import PosencError
from posenc.registry import trusted_class, without_working_folder


class PosencCLI(LightningCLI):
    """LightningCLI with the datamodule's vocabulary linked to the model, MLflow by default,
    and a test pass (per-length extrapolation check + baselines) after every fit."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")
        for key in ("pad_id", "num_classes", "bases_per_token", "seq_len"):  # DNA (ignored where absent)
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}", apply_on="instantiate")
        for key in ("n_targets", "n_covariates", "n_future", "lookback", "horizon", "patch_len",  # series
                    "pe_periods"):
            parser.link_arguments(f"data.{key}", f"model.init_args.{key}", apply_on="instantiate")
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="Evaluate the best checkpoint on the test split after fit.")
        # Inference: the data description in every checkpoint, the model registered in MLflow after fit.
        parser.add_lightning_class_args(RegisterModel, "register")
        # Reliability (pipelines.tracking.resume): rerunning an interrupted fit continues its MLflow run.
        parser.add_argument("--resume", type=bool, default=True,
                            help="fit: resume an unfinished run of the same config from its last.ckpt.")
        parser.add_argument("--checkpoint_every_n_steps", type=int, default=50,
                            help="fit: steps between resume checkpoints (outputs/runs/<key>/last.ckpt).")
        parser.add_argument("--take_over_lock", type=bool, default=False,
                            help="fit: take over this config's run lock even when another host holds it "
                                 "(only when that host's process is known to be gone).")
        # What a person sees (pipelines.console): progress bars, and library chatter only if asked for.
        parser.add_argument("--progress", type=bool | None, default=None,
                            help="Progress bars (one line per step when output is not a terminal); "
                                 "false: none (default: on).")
        parser.add_argument("--verbose", type=bool | None, default=None,
                            help="Show every library warning and log line (default: only those to act on).")

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's subcommands, with ``Trainer.test(verbose=…)`` left at its default so that
        ``--verbose`` is this project's switch (library chatter shown) in every subcommand, and no
        ``--weights_only`` option: every checkpoint is loaded weights-only (:meth:`_weights_only`)."""
        return {name: {*skip, "verbose", "weights_only"} for name, skip in LightningCLI.subcommands().items()}

    # LightningCLI runs ``self.<subcommand>`` when there is one, else the Trainer's method.
    def fit(self, **kwargs: Any) -> Any:
        return self._weights_only(self.trainer.fit, kwargs)

    def validate(self, **kwargs: Any) -> Any:
        return self._weights_only(self.trainer.validate, kwargs)

    def test(self, **kwargs: Any) -> Any:
        return self._weights_only(self.trainer.test, kwargs)

    def predict(self, **kwargs: Any) -> Any:
        return self._weights_only(self.trainer.predict, kwargs)

    @staticmethod
    def _weights_only(method: Any, kwargs: dict[str, Any]) -> Any:
        """Run a Trainer method with its ``ckpt_path`` (a resume checkpoint included) loaded with an
        explicit ``weights_only=True``; a checkpoint that refuses, or whose weights do not fit the model
        built (data linked to other sizes), is one line, not a traceback."""
        try:
            return method(**{**kwargs, "ckpt_path": local_checkpoint_path(kwargs.get("ckpt_path"))},
                          weights_only=True)
        except pickle.UnpicklingError as exc:
            raise PosencError(unsafe_checkpoint(kwargs.get("ckpt_path"), exc)) from None
        except RuntimeError as exc:  # weights that do not fit the model the config built: one line
            message = weights_mismatch(exc, kwargs.get("ckpt_path"))
            if message is None:
                raise
            raise PosencError(message) from None

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        self.command = command or command_line(kwargs.get("args"))
        given = kwargs.get("args")
        self._named_subcommand = named_subcommand(sys.argv[1:] if given is None else given)
        super().__init__(*args, **kwargs)

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        """Build only the subcommand parser the arguments start with (``fit …``), not all four: each
        holds every Trainer, model and data option, and building one costs ~0.08 CPU s, more than a
        tiny model's instantiation. Arguments that start otherwise (``--help``, a typo) get all four."""
        named = self._named_subcommand
        if named is None:
            super()._add_subcommands(parser, **kwargs)
            return
        every = type(self).subcommands()
        self.subcommands = lambda: {named: every[named]}  # shadows the static method while Lightning builds
        try:
            super()._add_subcommands(parser, **kwargs)
        finally:
            del self.subcommands

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, after replacing the old spellings (:func:`~pipelines.tasks.upgrade.legacy.translate_cli`):
        class paths of moved modules, and flat datamodule and model settings
        (``--data.init_args.lookback=48``, ``--model.init_args.d_model=64``, a config whose ``init_args``
        are flat) moved into their groups."""
        listed = isinstance(args, list | tuple)
        given = sys.argv[1:] if args is None else [str(a) for a in args] if listed else []
        for section in ("model", "data"):  # before translating, which looks the model's class up
            found = named_class_path(given, section)
            if found and DOTTED_CLASS.fullmatch(found):  # (a bare name: one of the project's classes)
                check_class_paths({"class_path": found}, section)
        if args is None:
            sys.argv[1:] = translate_cli(sys.argv[1:], model_class)
        elif isinstance(args, list | tuple):
            args = translate_cli([str(a) for a in args], model_class)
        super().parse_arguments(parser, args)

    def _dump_config(self) -> None:
        """Lightning's dump of the parsed config (the model's and datamodule's hyperparameters), without
        validating it a second time (parsing did; the text is the same) and read back with libyaml:
        ~0.12 → ~0.04 CPU s a run."""
        if hasattr(self, "config_dump"):
            return
        text = self.parser.dump(self.config, skip_link_targets=False, skip_none=False, format="yaml",
                                skip_validation=True)
        self.config_dump = yaml.load(text, Loader=SAFE_LOADER)
        if "subcommand" in self.config:
            self.config_dump = self.config_dump[self.config.subcommand]

    def _parse_ckpt_path(self) -> None:
        """Lightning reads a given ``ckpt_path``'s hyperparameters into the config (right after parsing,
        before any hook): first the path must be a local file, it must load weights-only (one line
        if not) and every class path in its hyperparameters must be trusted, since the config parser
        imports what they name. A task's checkpoint is then parsed as its task's model section
        (:meth:`_parse_task_ckpt`), anything else as Lightning does."""
        sub = self.config.get("subcommand")
        ckpt_path = self.config[sub].get("ckpt_path") if sub else None
        check_local_checkpoint(ckpt_path)
        if ckpt_path and Path(str(ckpt_path)).is_file():
            ckpt = read_checkpoint(str(ckpt_path))
            check_class_paths(ckpt.get("hyper_parameters") or {}, f"ckpt_path {ckpt_path}")
            if self._parse_task_ckpt(sub, ckpt, f"ckpt_path {ckpt_path}"):
                return
        super()._parse_ckpt_path()

    def _parse_task_ckpt(self, sub: str, ckpt: dict[str, Any], source: str) -> bool:
        """Parse a task checkpoint's hyperparameters over the config as the model section, given as
        ``{class_path, init_args}`` of its task (:mod:`pipelines.cli.ckpt_config`: what the checkpoint
        decides, what the config does); ``False``: no task on either side, left to Lightning."""
        class_path = str(getattr(self.config[sub].get("model"), "class_path", None))
        model = checkpoint_model(ckpt, model_class(class_path), class_path, source)
        if model is None:
            return False
        try:
            self.config = self.parser.parse_object({sub: {"model": model}}, self.config)
        except Exception as exc:  # a key this code does not know (a newer checkpoint's): name the file
            message = user_error(exc)
            if message is None:
                raise
            raise PosencError(f"{source}: saved hyperparameters do not fit {model['class_path']}: "
                              f"{message}") from None
        return True

    def before_instantiate_classes(self) -> None:
        cfg = self.config.get(self.subcommand, self.config)
        configure(verbose=cfg.get("verbose"), progress=cfg.get("progress"))
        self._choose_progress_bar(cfg)
        mlflow = mlflow_logger_args(cfg)
        if mlflow is not None and not mlflow.get("run_name"):
            mlflow.run_name = run_name(cfg)
        note_store(None if mlflow is None else mlflow.get("tracking_uri"))
        if self.subcommand == "fit":
            check_fit_memory(cfg)
        self.resume_dir = None
        if self.subcommand == "fit" and cfg.get("resume", True):
            self.resume_dir = prepare_resume(self._parser(self.subcommand), cfg)

    def _choose_progress_bar(self, cfg: Any) -> None:
        """Lightning's tqdm bar on a terminal, :class:`LineProgressBar` in logs, none with
        ``--progress false`` (a progress bar the config itself names is left alone)."""
        trainer = cfg.get("trainer")
        if trainer is None:
            return
        if not progress_enabled():
            trainer.enable_progress_bar = False
            return
        named = [str(getattr(cb, "class_path", "")) for cb in trainer.get("callbacks") or []]
        if trainer.get("enable_progress_bar") is False or any("ProgressBar" in n for n in named):
            return
        if not interactive():
            self.trainer_defaults["callbacks"] = [*self.trainer_defaults.get("callbacks", []),
                                                  LineProgressBar()]

    def instantiate_classes(self) -> None:
        """Build the classes; a new sqlite MLflow store is created by one process at a time."""
        cfg = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        mlflow = mlflow_logger_args(cfg)
        with new_store_lock(None if mlflow is None else mlflow.get("tracking_uri")):
            super().instantiate_classes()
        for lg in mlflow_loggers(self.trainer):  # tags as strings: jsonargparse turns '0' into 0, which
            lg.tags = {str(k): str(v) for k, v in (lg.tags or {}).items()} or None  # a server rejects
            scrub_logged_params(lg)  # the model's and datamodule's arguments: no home paths, credentials

    def before_fit(self) -> None:
        register = self._register_callback()
        if register is not None:
            register.command = self.command
        if getattr(self, "resume_dir", None) is not None:
            cfg = self.config.get(self.subcommand, self.config)
            every = cfg.get("checkpoint_every_n_steps", 50)
            self.trainer.callbacks.append(ResumeCheckpoint(self.resume_dir, every))

    def after_fit(self) -> None:
        trainer = self.trainer
        if trainer.state.status != "finished" or trainer.interrupted:
            return
        cfg = self.config.get(self.subcommand, self.config)
        if cfg.get("test_after_fit", True):
            ckpt = "best" if getattr(trainer.checkpoint_callback, "best_model_path", "") else None
            trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt, weights_only=True)
        register = self._register_callback()
        for logger in mlflow_loggers(trainer) if trainer.is_global_zero else []:  # DDP: the run is rank 0's
            if register is not None:
                update_card(register, logger.experiment)  # the card shows the test metrics too
            print(run_summary(logger, model_uri=getattr(register, "model_uri", None)), file=sys.stderr)

    def _register_callback(self) -> RegisterModel | None:
        return next((c for c in self.trainer.callbacks if isinstance(c, RegisterModel)), None)


def model_class(class_path: Any) -> type | None:
    """The task (:class:`TaskModule` subclass, this project's or one added from outside) a class path
    names; ``None`` for anything else, for an untrusted module (checked before anything is imported:
    :func:`posenc.registry.trusted_class`) or one that does not import — left to jsonargparse, whose
    import policy refuses it in one line (:func:`pipelines.safety.enforce_import_policy`)."""
    cls = trusted_class(class_path)
    return cls if cls is not None and issubclass(cls, TaskModule) else None


def named_subcommand(args: Any) -> str | None:
    """The subcommand (``fit``, ``test``…) a command line starts with, else ``None``."""
    if isinstance(args, list | tuple) and args and str(args[0]) in SUBCOMMANDS:
        return str(args[0])
    return None


def check_fit_memory(cfg: Any) -> None:
    """Refuse, before the model exists, a training step that cannot fit (:mod:`pipelines.tasks.resources`)."""

    model, data = cfg.get("model"), cfg.get("data")
    if not hasattr(model, "init_args") or not hasattr(data, "init_args"):
        return
    pe = model.init_args.get("pe")
    accel = str(cfg.trainer.get("accelerator") or "auto")
    device = "cuda" if accel in ("gpu", "cuda", "auto") and torch.cuda.is_available() else "cpu"
    init = data.init_args  # the windows and loader groups (or a datamodule's flat arguments)
    settings = {**as_mapping(init), **as_mapping(init.get("windows")), **as_mapping(init.get("loader"))}
    net = as_mapping(model.init_args.get("net"))
    check_fit(net, settings, str(getattr(pe, "class_path", "") or ""), device)


def run_name(cfg: Any) -> str:
    """``<ModelClass>-<Scheme>`` from the parsed config, e.g. ``DNALanguageModel-RoPE``."""
    model = str(cfg.model.class_path).rsplit(".", 1)[-1]
    pe = cfg.model.init_args.get("pe")
    scheme = str(pe.class_path).rsplit(".", 1)[-1] if pe is not None else "NoPE"
    return f"{model}-{scheme}"


SUBCOMMANDS = ("fit", "validate", "test", "predict")
DOTTED_CLASS = re.compile(r"[A-Za-z_][\w.]*\.\w+")  # package.module.Name


def make_cli(args: list[str] | None = None, run: bool = True, command: str | None = None) -> PosencCLI:
    """The CLI over ``args``; with ``run=False`` it only parses and instantiates (no subcommand)."""
    enforce_import_policy()  # a value (config, checkpoint, option) names only trusted modules
    parser_kwargs = {"parser_mode": "yaml", "exit_on_error": False}
    if run:
        parser_kwargs = {**parser_kwargs, **{cmd: parser_kwargs for cmd in SUBCOMMANDS}}
    return PosencCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_callback=LogConfigToMLflow,
        save_config_kwargs={"overwrite": True},
        trainer_defaults={"logger": mlflow_logger_defaults(), "default_root_dir": "outputs",
                          "callbacks": [FailedRunGuard(), StopOnNonFiniteLoss(), GpuSystemMetrics()]},
        parser_kwargs=parser_kwargs,
        args=args,
        run=run,
        auto_configure_optimizers=False,
        command=command,
    )


def main(args: list[str] | None = None, command: str | None = None) -> PosencCLI | None:
    """Run the CLI; a user mistake ends as one ``error: …`` line on stderr and exit status 2.

    ``command`` is how a person reruns this training (the model card shows it); default: this
    process's own command line.
    """
    if os.environ.get("LOCAL_RANK", "0") != "0":  # a DDP rank started by rank 0: it dies with rank 0
        die_with_parent()
    try:
        if args is None:
            sys.argv[1:] = take_trust_args(spell_out_verbose(sys.argv[1:]))
        else:
            args = take_trust_args(spell_out_verbose(args))
        # called from a script too (``pipelines.train.main``): nothing it imports, a class a config names
        # included, comes from the caller's working folder
        with stop_on_sigterm(), without_working_folder():
            cli = make_cli(args, command=command)
    except Terminated as exc:  # the run (if any) is marked KILLED: the same command resumes it
        print(f"error: stopped by signal {signal.Signals(exc.signum).name}", file=sys.stderr)
        raise SystemExit(exc.code) from None
    except Exception as exc:  # a user mistake, or a broken environment (unwritable folder, bad MLflow store)
        message = user_error(exc) or environment_error(exc)
        if message is None:
            raise
        print_error(message)
        raise SystemExit(2) from None
    finally:
        release_run_locks()
    end_process_group()  # DDP: every rank exits cleanly (a live gloo group aborts the interpreter)
    return cli

