"""The memory this process may still take on the host, read from the kernel (no third-party import,
so the file parsers can bound what they decompress by it: :class:`BoundedStream`).

``MemAvailable`` of ``/proc/meminfo``, the cgroup (v2 or v1) limit minus its usage and
``$POSENC_MEMORY_LIMIT`` (``8G``, ``512M``: a cap of your own on a shared machine), the smallest;
``POSENC_MEMORY_CHECK=0`` switches the checks built on it off (:func:`checks_enabled`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

from posenc import PosencError

CHECK_ENV = "POSENC_MEMORY_CHECK"
LIMIT_ENV = "POSENC_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_CGROUPS = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
            ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def host_available_bytes() -> int | None:
    """The smaller of ``MemAvailable`` and each cgroup limit minus usage; ``None`` if neither is known."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit, usage in _CGROUPS:
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:
            found.append(max(0, cap - used))
    own = parse_size(os.environ.get(LIMIT_ENV, ""))
    if own is not None:
        found.append(own)
    return min(found) if found else None


def parse_size(text: str) -> int | None:
    """Bytes of ``4G``, ``512M``, ``1024`` (K/M/G/T, powers of 1024; a trailing ``B`` allowed); ``None``
    for an empty or malformed value."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)]
    try:
        return int(float(number) * _UNITS[unit]) if number else None
    except ValueError:
        return None


def checks_enabled() -> bool:
    """Whether the memory checks run (``$POSENC_MEMORY_CHECK`` is not ``0``)."""
    return os.environ.get(CHECK_ENV, "1") != "0"


class BoundedStream(io.RawIOBase):
    """A decompressed stream that stops, in one line naming the file, once what it has yielded will
    take more memory than is available: a decompression bomb (gigabytes from a few megabytes) is refused
    instead of exhausting the machine. ``cost(chunk)`` is the memory, in bytes, that a chunk adds to the
    total (the reader's estimate of what it keeps of it); the total never restarts."""

    def __init__(self, fh: io.BufferedIOBase, path: Path, available: int, cost: Callable[[bytes], int],
                 what: str) -> None:
        self._fh, self._path, self._available, self._cost, self._what = fh, path, available, cost, what
        self._spent, self._read = 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = self._fh.readinto(buf) or 0
        self._read += n
        self._spent += self._cost(bytes(memoryview(buf)[:n]))
        if self._spent > self._available:
            raise PosencError(
                f"{self._path}: decompresses past {self._read / 1e9:.2f} GB, which as {self._what} needs "
                f"more than the {self._available / 1e9:.1f} GB of memory available: a decompression bomb, "
                f"or a file too large for this machine ({CHECK_ENV}=0 skips this check)")
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def bounded(fh: io.BufferedIOBase, path: Path, cost: Callable[[bytes], int], what: str) -> io.BufferedIOBase:
    """``fh`` (a decompressing stream) read through :class:`BoundedStream` when the memory available is
    known and the checks are on (else ``fh`` itself)."""
    have = host_available_bytes() if checks_enabled() else None
    if have is None:
        return fh
    return io.BufferedReader(BoundedStream(fh, path, have, cost, what), buffer_size=1 << 20)


__all__ = ["CHECK_ENV", "LIMIT_ENV", "BoundedStream", "bounded", "checks_enabled", "host_available_bytes",
           "parse_size"]
