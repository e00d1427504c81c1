"""The shape of the code: layers without back-arrows, no import circle, each task's knowledge in its own
module, a task added from outside the package going through fit → evaluate → predict, and test modules
that share helpers only through tests/helpers.py and the conftest fixtures."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import workdir_with_store

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("posenc", "datamodules", "pipelines")
PARSERS = ("datamodules/dna/fasta.py", "datamodules/dna/genome_cache.py", "datamodules/dna/tokenize.py",
           "datamodules/dna/windows.py", "datamodules/dna/annotation.py", "datamodules/dna/samples.py",
           "datamodules/timeseries/parse.py", "datamodules/timeseries/windows.py")


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in the file (function bodies included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def project_graph() -> dict[str, set[str]]:
    mods = modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    return {m: {t for t in map(owner, imports(p)) if t and t != m} for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert cycles(project_graph()) == []


def test_layers_point_one_way_and_parsers_stay_light():
    for module, path in modules().items():
        used = {name.split(".")[0] for name in imports(path)}
        if module.startswith("posenc"):
            assert not used & {"pipelines", "datamodules", "lightning", "mlflow"}, module
        if module.startswith("datamodules"):
            assert "pipelines" not in used, module
    for rel in PARSERS:
        used = {name.split(".")[0] for name in imports(ROOT / rel)}
        assert not used & {"lightning", "mlflow", "pipelines"}, rel


def test_task_names_live_only_in_their_task_module():
    from pipelines.tasks import BUILTIN

    for cls in BUILTIN:
        home = Path(__import__(cls.__module__, fromlist=["_"]).__file__)
        for path in (ROOT / "pipelines").rglob("*.py"):
            text = path.read_text()
            quoted = f'"{cls.task_name}"' in text or f"'{cls.task_name}'" in text
            assert path == home or not quoted, f"{path} names task {cls.task_name!r}"


def test_every_task_declares_its_extension_points():
    from pipelines.tasks import BUILTIN, TASKS, task_class

    for cls in BUILTIN:
        assert task_class(cls.task_name) is cls and TASKS[cls.task_name] is cls
        assert cls.predictor is not None and cls.default_datamodule
    assert sum(cls.adapter is not None for cls in BUILTIN) >= 3


# ----------------------------------------------------------------------------------------- a new task
def test_a_task_added_from_outside_fits_evaluates_and_predicts(tmp_path):
    import pandas as pd

    from pipelines.cli import main as cli_main
    from pipelines.eval.evaluate import run as evaluate
    from pipelines.inference import load_model
    from pipelines.inference.predict import main as predict_main
    from tests.helpers import random_bases, write_fasta

    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_bases(6000, 3)})
    with workdir_with_store(tmp_path):
        cli = cli_main(["fit", "--config", str(ROOT / "tests/toy/next_gc.yaml"),
                        f"--data.init_args.fasta={fasta}", "--register.register=false"])
        ckpt = str(Path(cli.trainer.checkpoint_callback.best_model_path).resolve())
        run_id = cli.trainer.logger.run_id
        result = evaluate([run_id, "--factors", "1", "2", "--out", str(tmp_path / "ev")])
        out = tmp_path / "p.tsv"
        args = ["--ckpt", ckpt, "--input", str(fasta), "--output", str(out), "--no_progress"]
        assert predict_main(args) == 0
    assert result.task == "toy_next_gc" and result.metric == "gc_bits"
    assert set(result.by_length()) == {32, 64} and all(v > 0 for v in result.by_length().values())
    table = pd.read_csv(out, sep="\t")
    assert list(table.columns) == ["record", "p_gc"] and 0 < table["p_gc"].iloc[0] < 1
    model = load_model(ckpt, "cpu")
    assert type(model).__name__ == "NextGC" and model.predict("ACGTGGCCATTA" * 5).shape == (1, 2)


# ----------------------------------------------------------------------------------------- the tests
TEST_MODULE = re.compile(r"tests(\.\w+)*\.(test_\w+|conftest)")
CLASS_PATH = re.compile(r"(?<![\w.])(tests(?:\.\w+)*\.(?:test_\w+|conftest))\.\w+")  # tests.test_x.Thing


def reached_test_modules(source: str, module: str) -> set[str]:
    """The test modules (``tests.….test_*`` and conftests) that the source of ``module`` imports (relative
    imports resolved, function bodies included) or names in a class-path string given to the CLI."""
    package = module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            names = [target, *(f"{target}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = CLASS_PATH.findall(node.value)
        else:
            continue
        found.update(n for n in names if TEST_MODULE.fullmatch(n) and n != module)
    return found


def test_the_test_import_check_finds_each_kind_of_reach():
    source = ("from tests.MOD import a\nfrom .MOD import b\nfrom . import MOD\nimport tests.dna.conftest\n"
              "def f():\n    from ..MOD import c\n"
              "CB = ['--trainer.callbacks+=tests.MOD.FailAtStep', '--x=tests.dna.SELF.Mine']\n"
              "from tests.helpers import write_fasta\nfrom tests.toy.next_gc import NextGC\n")
    source = source.replace("SELF", "test_self")  # written apart, so this file names no test module
    found = reached_test_modules(source.replace("MOD", "test_faults"), "tests.dna.test_self")
    assert found == {"tests.test_faults", "tests.dna.test_faults", "tests.dna.conftest"}
    allowed = source.replace("MOD", "helpers")  # tests.helpers, tests.toy: not test modules
    assert reached_test_modules(allowed, "tests.dna.test_self") == {"tests.dna.conftest"}


def test_test_modules_share_helpers_only_through_helpers_and_conftest():
    """A test module imports its helpers from tests/helpers.py (fixtures reach it through conftest.py),
    never from another test module or a conftest: those import chains once tied unrelated tests together."""
    reaches = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if found := reached_test_modules(path.read_text(), module):
            reaches[module] = sorted(found)
    assert reaches == {}
