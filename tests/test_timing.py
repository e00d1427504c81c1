"""``tests/timing.py``: the order the fast suite's files are handed to pytest-xdist's workers in."""

from __future__ import annotations

from types import SimpleNamespace

from tests.helpers import ROOT
from tests.timing import FIRST, costliest_first


def test_every_file_listed_first_is_a_test_file_of_the_suite():
    """A renamed or deleted file would silently drop out of the order: name it here instead."""
    assert len(set(FIRST)) == len(FIRST)
    for path in FIRST:
        assert (ROOT / path).is_file() and path.rpartition("/")[2].startswith("test_"), path


def test_listed_files_come_first_in_their_order_then_the_rest_as_collected():
    collected = ["tests/a/test_x.py::one", "tests/a/test_x.py::two", f"{FIRST[1]}::a", f"{FIRST[1]}::b",
                 "tests/test_y.py::one", f"{FIRST[0]}::a"]
    items = [SimpleNamespace(nodeid=n) for n in collected]
    costliest_first(items)
    assert [i.nodeid for i in items] == [f"{FIRST[0]}::a", f"{FIRST[1]}::a", f"{FIRST[1]}::b",
                                         "tests/a/test_x.py::one", "tests/a/test_x.py::two",
                                         "tests/test_y.py::one"]
