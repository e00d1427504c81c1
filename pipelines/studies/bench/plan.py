"""What ``make bench`` runs (:class:`Plan`, :class:`Workload`) and what one timing gives (:class:`Cell`)."""

from __future__ import annotations

from dataclasses import dataclass, field

IMPLS = ("posenc", "xt", "xt-flash", "sdpa")
NOPE_REF = "nope"  # the NoPE hand SDPA encoder, timed in every scheme's rounds


@dataclass(frozen=True)
class Workload:
    mode: str  # train | infer
    batch: int
    length: int
    repeats: int = 5  # timed runs at most (the plan may cap it)
    warmup_length: int | None = None  # warm up at a shorter length (the same kernels), default: same

    @property
    def name(self) -> str:
        return f"{self.mode} {self.batch}×{self.length}"


@dataclass(frozen=True)
class Plan:
    """The grid and its limits.

    ``rounds`` (``--rounds``) replaces the per-workload caps and the time budget: every group runs
    exactly that many interleaved rounds, for a noisy host where more samples are worth the time.
    ``pin`` (``--pin``) is the CPU set the process and its threads were bound to, recorded in the header.
    ``stat`` (``--stat``): ``median`` of the timed runs, or ``min`` — on a shared host other jobs
    only ever add time, so each implementation's fastest run is the one closest to an idle machine.
    """

    d: int = 128
    heads: int = 8
    layers: int = 4
    workloads: tuple[Workload, ...] = (  # longest first: an interrupted run keeps the memory figures
        Workload("infer", 1, 16384, 2, warmup_length=2048), Workload("infer", 1, 4096, 3),
        Workload("train", 1, 4096, 3), Workload("train", 8, 512, 5), Workload("infer", 1, 512, 7),
    )
    schemes: tuple[str, ...] = ("NoPE", "Sinusoidal", "RoPE", "ALiBi", "T5Bias", "DynamicBias",
                                "GaussianPrior", "PeriodicRoPE", "ShawRelative")
    impls: tuple[str, ...] = IMPLS
    repeats: int = 7
    budget_s: float = 25.0  # per implementation: no further rounds once a group has used this
    mem_cap_gb: float = 6.0
    data_seconds: float = 3.0
    rounds: int | None = None
    stat: str = "median"  # median | min
    pin: tuple[int, ...] | None = None

    def n_rounds(self, w: Workload) -> int:
        """Timed rounds at most for ``w``: ``rounds`` when set, else the smaller of the two caps."""
        return self.rounds if self.rounds else min(self.repeats, w.repeats)


QUICK = Plan(d=32, heads=4, layers=2,
             workloads=(Workload("train", 2, 64, 2), Workload("infer", 1, 128, 2)),
             schemes=("NoPE", "RoPE", "ALiBi", "ShawRelative"), repeats=2, budget_s=2.0,
             data_seconds=0.3)


@dataclass
class Cell:
    """One implementation's timings in one (scheme, workload) group.

    ``group`` identifies the interleaved rounds it was timed in: cells of the same group have
    ``times[r]`` from the same round r, so their per-round ratios cancel a change of load.
    """

    tokens_s: float | None = None
    spread: float = 0.0
    peak_mb: float | None = None
    note: str = ""
    times: list[float] = field(default_factory=list)
    group: int = -1
    stat: str = "median"  # what tokens_s was computed from
