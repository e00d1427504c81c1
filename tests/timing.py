"""Per-test CPU seconds, for deciding what to speed up on a shared machine (opt-in).

``--durations`` reports wall time, which on a machine shared with other jobs grows with their load.
With ``POSENC_TEST_TIMES=<prefix>`` set, every test's wall seconds and CPU seconds (this process's
plus those of the subprocesses it waited for: CLI runs, fresh interpreters) are appended as
``nodeid<TAB>wall<TAB>cpu`` lines to ``<prefix>.<worker>.tsv`` (one file per pytest-xdist worker);
``python -m tests.timing <prefix>`` sums them by file. Setup and teardown count with their test,
so a module-scoped fixture is charged to the first test that asks for it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class CpuTimes:
    """The plugin that tests/conftest.py registers when ``POSENC_TEST_TIMES`` is set."""

    def __init__(self, prefix: str) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.out = Path(f"{prefix}.{worker}.tsv")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        wall, cpu = time.perf_counter(), _cpu()
        yield
        with self.out.open("a") as fh:
            fh.write(f"{item.nodeid}\t{time.perf_counter() - wall:.3f}\t{_cpu() - cpu:.3f}\n")


#: The costliest test files, costliest first (CPU s in tests, ``python -m tests.timing`` on the fast suite,
#: 2026-11-26: ~21 down to ~5). Under pytest-xdist (``make test``: ``--dist loadfile``, a whole file per
#: worker) they are handed out first, every other file after them in collection order, so the suite
#: ends on short files with both workers busy; by default xdist hands out files by their number of
#: tests, which put a few long files with few tests (the memory interpreter, the compare fixture) last,
#: one worker running them while the other waited. A stale list costs balance only, never a test.
FIRST = (
    "tests/dna/test_tasks.py",
    "tests/test_resources.py",
    "tests/ts/test_ts_configs.py",
    "tests/posenc/test_scheme_configs.py",
    "tests/test_attention_paths.py",
    "tests/test_bad_inputs.py",
    "tests/test_task_configs.py",
    "tests/test_compare.py",
    "tests/test_architecture.py",
    "tests/test_claims.py",
    "tests/test_faults.py",
    "tests/ts/test_ts_cli.py",
    "tests/test_extrapolation.py",
    "tests/dna/test_whole_windows.py",
    "tests/test_inference.py",
    "tests/test_run_lock.py",
)


def costliest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the files of :data:`FIRST` in its order, then the rest as collected
    (a stable sort: each file's tests stay together and in their order)."""
    rank = {path: i for i, path in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))


def summary(prefix: str, top: int = 25) -> str:
    """Wall and CPU seconds summed by test file, biggest CPU first, then the ``top`` tests by CPU."""
    rows = []
    for path in sorted(Path(prefix).parent.glob(Path(prefix).name + ".*.tsv")):
        for line in path.read_text().splitlines():
            nodeid, wall, cpu = line.split("\t")
            rows.append((nodeid, float(wall), float(cpu)))
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, wall, cpu in rows:
        acc = files[nodeid.split("::")[0]]
        acc[0], acc[1], acc[2] = acc[0] + wall, acc[1] + cpu, acc[2] + 1
    out = [f"{len(rows)} tests: wall {sum(r[1] for r in rows):.1f} s, cpu {sum(r[2] for r in rows):.1f} s",
           f"{'wall':>8} {'cpu':>8} {'tests':>5}  file"]
    by_cpu = sorted(files.items(), key=lambda kv: -kv[1][1])
    out += [f"{w:8.1f} {c:8.1f} {n:5d}  {f}" for f, (w, c, n) in by_cpu]
    out += ["", f"{'wall':>8} {'cpu':>8}  test"]
    out += [f"{w:8.1f} {c:8.1f}  {n}" for n, w, c in sorted(rows, key=lambda r: -r[2])[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1]))
