"""Baselines a practitioner would fit for DNA sequence classification, on the classifier's own crops
and split (Lightning-free; :class:`pipelines.tasks.dna.classify.ClassifyBaselines` logs them beside a run).

Each is fitted on the train split at the training length (``L0`` bases, the centre crop the Transformer
is trained on) with its one setting chosen on the validation split only (:data:`BASELINES`):

* ``composition`` — :class:`FeatureLogistic` on the base frequencies of the crop (A, C, G, T; so also
  its GC content): what composition alone separates; C chosen on validation AUROC.
* ``kmer_lr`` — :class:`FeatureLogistic` on the k-mer frequencies of the crop (4^k features): order
  within k bases, no position.
* ``onehot_lr`` — :class:`OneHotLogistic`: L2 logistic regression on the one-hot bases of the window (4
  features per position, N and padding all zero); the penalty C chosen on validation AUROC.
* ``pwm`` — :class:`PositionWeightMatrix`: a position weight matrix per class (base frequencies at every
  position, pseudo-count α chosen on validation); a window scores the sum of its per-position
  log-probabilities plus the class's log prior. For two classes the class-1 score ranks windows exactly
  as the PWM log-odds (positives vs negatives) does.
* ``cnn`` — the Genomic Benchmarks CNN, and ``cnnprom`` — a CNNProm-like CNN
  (:mod:`pipelines.tasks.dna.classify_cnns`), the epoch chosen on validation AUROC.

The position-aware ones need a fixed input length. A test crop of n > L0 bases is read as every L0 window
in it (stride ``stride``): a class's score is the maximum over the windows of its log-probability
(:func:`window_scores`). The baseline is then, like the Transformer, not told where in the longer crop
the centre is. (A practitioner who crops the centre instead scores exactly the 1× value at every length:
the centre L0 window of a longer crop is the 1× crop.) The composition and k-mer models read a longer
crop whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from datamodules.dna.samples import SampleSet, SampleWindows
from datamodules.dna.tokenize import KmerTokenizer
from pipelines.tasks.dna.classify_cnns import CNNPromLike, SmallCNN, train_cnn, window_scores
from pipelines.tasks.dna.classify_metrics import auroc, two_class_report

#: penalties C tried for the one-hot logistic regression (chosen on validation AUROC)
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: pseudo-counts α tried for the position weight matrix (chosen on validation AUROC)
ALPHA_GRID = (0.1, 1.0, 10.0)
#: penalties C tried for the composition and k-mer logistic regressions (few, dense features; on
#: Arabidopsis TATA fold 0 both chose 100, the top of a 10⁻²…10² grid: an edge is not a choice)
FEATURE_C_GRID = tuple(10.0**k for k in range(-2, 5))
#: every baseline :func:`fit_baselines` knows, and the setting each chooses on validation
BASELINES = {"composition": "C", "kmer_lr": "C", "onehot_lr": "C", "pwm": "alpha", "cnn": "epoch",
             "cnnprom": "epoch"}


def one_hot(codes: np.ndarray) -> Tensor:
    """Base codes (N, n) (0..3 = A, C, G, T; N and PAD ≥ 4) as one-hot channels (N, 4, n), float32;
    N and padding are all-zero columns."""
    codes = torch.as_tensor(np.asarray(codes, dtype=np.int64))  # (N, n)
    out = F.one_hot(codes.clamp(max=4), 5)[..., :4].float()  # (N, n, 4): code 4+ → zeros
    return out.transpose(1, 2).contiguous()  # (N, 4, n)


class OneHotLogistic:
    """L2 logistic regression on one-hot windows of ``width`` bases, C chosen on validation AUROC.

    Args:
        grid: the penalties C tried.
    """

    def __init__(self, grid: tuple[float, ...] = C_GRID) -> None:
        self.grid = tuple(grid)
        self.chosen: float = float("nan")
        self.val_curve: dict[float, float] = {}
        self.weight = torch.zeros(0)  # (C, 4, width) per-class logits, after fit
        self.bias = torch.zeros(0)  # (C,)

    def fit(self, train: tuple[Tensor, np.ndarray], val: tuple[Tensor, np.ndarray],
            num_classes: int) -> OneHotLogistic:
        """Fit one model per C on ``train`` (one-hot (N, 4, L0), labels (N,)); keep the best on ``val``."""
        from sklearn.linear_model import LogisticRegression  # optional: sklearn baselines

        (x, y), (xv, yv) = train, val
        best = None
        for c in self.grid:
            clf = LogisticRegression(C=c, max_iter=2000).fit(x.flatten(1).numpy(), y)  # (N, 4·L0)
            self._take(clf, x.shape[1:], num_classes)
            self.val_curve[c] = auroc(yv, self.scores(xv))
            if best is None or self.val_curve[c] > self.val_curve[best[0]]:
                best = (c, self.weight, self.bias)
        self.chosen, self.weight, self.bias = best
        return self

    def _take(self, clf, shape: torch.Size, num_classes: int) -> None:
        """The fitted coefficients as per-class logit weights (C, 4, L0) over all ``num_classes``."""
        coef = torch.as_tensor(clf.coef_, dtype=torch.float32)  # (1 or K, 4·L0)
        inter = torch.as_tensor(clf.intercept_, dtype=torch.float32)  # (1 or K,)
        if coef.shape[0] == 1:  # two classes: logit of class 1 against class 0
            coef, inter = torch.cat([torch.zeros_like(coef), coef]), torch.cat([torch.zeros(1), inter])
        weight = torch.full((num_classes, coef.shape[1]), 0.0)
        bias = torch.full((num_classes,), -1e4)  # a class absent from train never wins
        weight[clf.classes_], bias[clf.classes_] = coef, inter
        self.weight, self.bias = weight.view(num_classes, *shape), bias  # (C, 4, L0), (C,)

    def logits(self, x: Tensor, stride: int = 1) -> Tensor:
        """Class logits (N, C, W) of every window of ``x`` (N, 4, n ≥ L0) at ``stride``."""
        return F.conv1d(x, self.weight, self.bias, stride=stride)

    def scores(self, x: Tensor, stride: int = 1) -> np.ndarray:
        return window_scores(self.logits, x, stride)


class PositionWeightMatrix:
    """One position weight matrix per class, α chosen on validation AUROC (see the module docstring).

    Args:
        grid: the pseudo-counts α tried (added to every base count at every position).
    """

    def __init__(self, grid: tuple[float, ...] = ALPHA_GRID) -> None:
        self.grid = tuple(grid)
        self.chosen: float = float("nan")
        self.val_curve: dict[float, float] = {}
        self.log_probs = torch.zeros(0)  # (C, 4, L0)
        self.log_prior = torch.zeros(0)  # (C,)

    def fit(self, train: tuple[Tensor, np.ndarray], val: tuple[Tensor, np.ndarray],
            num_classes: int) -> PositionWeightMatrix:
        (x, y), (xv, yv) = train, val
        y_t = torch.as_tensor(np.asarray(y), dtype=torch.int64)
        counts = torch.stack([x[y_t == c].sum(0) for c in range(num_classes)])  # (C, 4, L0)
        n_class = torch.bincount(y_t, minlength=num_classes).float()  # (C,)
        self.log_prior = torch.log((n_class + 1.0) / (n_class.sum() + num_classes))
        best = None
        for alpha in self.grid:
            smoothed = counts + alpha
            self.log_probs = torch.log(smoothed / smoothed.sum(1, keepdim=True))  # (C, 4, L0)
            self.val_curve[alpha] = auroc(yv, self.scores(xv))
            if best is None or self.val_curve[alpha] > self.val_curve[best[0]]:
                best = (alpha, self.log_probs)
        self.chosen, self.log_probs = best
        return self

    def logits(self, x: Tensor, stride: int = 1) -> Tensor:
        """Class log-likelihoods plus log prior (N, C, W) of every window of ``x`` (N, 4, n)."""
        return F.conv1d(x, self.log_probs, self.log_prior, stride=stride)

    def scores(self, x: Tensor, stride: int = 1) -> np.ndarray:
        return window_scores(self.logits, x, stride)


def crops(samples: SampleSet, bases: int, width: int) -> tuple[Tensor, np.ndarray]:
    """One-hot centre crops (N, 4, max(bases, width)) of ``samples`` — the crops the classifier reads at
    a test length of ``bases`` bases (:class:`~datamodules.dna.samples.SampleWindows`, padded past a short
    sequence's end) — and their labels (N,). A crop shorter than the baselines' ``width`` is centred in
    zeros so that it fills one window."""
    view = SampleWindows(samples, bases, KmerTokenizer(1))  # base codes, PAD past the end
    codes = np.stack([view[i]["tokens"].numpy() for i in range(len(view))]) if len(view) else \
        np.zeros((0, bases), np.int64)  # (N, bases)
    x = one_hot(codes)  # (N, 4, bases)
    if bases < width:
        left = (width - bases) // 2
        x = F.pad(x, (left, width - bases - left))  # (N, 4, width)
    return x, np.asarray(samples.labels)


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch and BLAS on one thread while the baselines fit and score: their small batches and matrices
    gain little from threads, and on a busy machine the threads wait on each other (2 CNN epochs on the
    test-sized data: 27 s on two threads vs 0.5 s on one at load 12 on 2 cores; the logistic regressions
    2.8 s vs 0.24 s)."""
    from threadpoolctl import threadpool_limits  # optional: threadpoolctl

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


def base_frequencies(x: Tensor) -> np.ndarray:
    """Base frequencies (N, 4) of one-hot crops (N, 4, n) over their A/C/G/T positions (N and padding out)."""
    counts = x.sum(2).double().numpy()  # (N, 4)
    return counts / np.maximum(counts.sum(1, keepdims=True), 1.0)


def kmer_frequencies(x: Tensor, k: int) -> np.ndarray:
    """k-mer frequencies (N, 4^k) of one-hot crops (N, 4, n): every k-mer of A/C/G/T bases, one step apart
    (a k-mer holding N or padding is not counted)."""
    codes, valid = x.argmax(1).long(), x.sum(1) > 0  # (N, n) each
    n_win = max(0, codes.shape[1] - k + 1)
    index = torch.zeros(len(codes), n_win, dtype=torch.long)  # (N, W) k-mer index of each window
    ok = torch.ones(len(codes), n_win, dtype=torch.bool)  # (N, W) no N or padding in the window
    for j in range(k):
        index = index * 4 + codes[:, j : j + n_win]  # (N, W)
        ok &= valid[:, j : j + n_win]
    rows = torch.arange(len(codes)).unsqueeze(1).expand_as(index)  # (N, W)
    flat = (rows * 4**k + index)[ok]
    counts = torch.bincount(flat, minlength=len(codes) * 4**k).view(len(codes), 4**k).double().numpy()
    return counts / np.maximum(counts.sum(1, keepdims=True), 1.0)


class FeatureLogistic:
    """L2 logistic regression on features of the whole crop, C chosen on validation AUROC.

    Args:
        features: one-hot crops (N, 4, n) → features (N, F).
        grid: the penalties C tried.
    """

    def __init__(self, features: Callable[[Tensor], np.ndarray],
                 grid: Sequence[float] = FEATURE_C_GRID) -> None:
        self.features, self.grid = features, tuple(grid)
        self.chosen: float = float("nan")
        self.val_curve: dict[float, float] = {}
        self.model = None
        self.num_classes = 0

    def fit(self, train: tuple[Tensor, np.ndarray], val: tuple[Tensor, np.ndarray],
            num_classes: int) -> FeatureLogistic:
        from sklearn.linear_model import LogisticRegression  # optional: sklearn baselines

        (x, y), (xv, yv) = train, val
        f, self.num_classes = self.features(x), num_classes
        best = None
        for c in self.grid:
            self.model = LogisticRegression(C=c, max_iter=2000).fit(f, y)
            self.val_curve[c] = auroc(yv, self.scores(xv))
            if best is None or self.val_curve[c] > self.val_curve[best[0]]:
                best = (c, self.model)
        self.chosen, self.model = best
        return self

    def scores(self, x: Tensor, stride: int = 1) -> np.ndarray:
        """Class log-probabilities (N, C) of whole crops (``stride`` unused: no windows)."""
        probs = np.full((len(x), self.num_classes), 1e-12)  # a class absent from train: never likely
        probs[:, self.model.classes_] = np.maximum(self.model.predict_proba(self.features(x)), 1e-12)
        return np.log(probs)


def fit_baselines(sets: dict[str, SampleSet], width: int, num_classes: int, cnn_epochs: int = 10,
                  seed: int = 0, names: Sequence[str] = ("onehot_lr", "pwm", "cnn"),
                  k: int = 4) -> dict[str, object]:
    """Fit the baselines ``names`` (of :data:`BASELINES`) on ``sets["train"]`` at ``width`` bases,
    choosing each one's setting on ``sets["val"]``; ``sets["test"]`` is never read. Returns
    ``{name: fitted scorer}`` (each with ``scores(x, stride)``, its validation choice ``chosen`` and the
    validation AUROC of every candidate ``val_curve``); ``k``: the k-mer length of ``kmer_lr``."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; known: {' '.join(BASELINES)}")
    train, val = crops(sets["train"], width, width), crops(sets["val"], width, width)
    fits = {"composition": lambda: FeatureLogistic(base_frequencies).fit(train, val, num_classes),
            "kmer_lr": lambda: FeatureLogistic(lambda x: kmer_frequencies(x, k)).fit(train, val, num_classes),
            "onehot_lr": lambda: OneHotLogistic().fit(train, val, num_classes),
            "pwm": lambda: PositionWeightMatrix().fit(train, val, num_classes),
            "cnn": lambda: train_cnn(train, val, num_classes, epochs=cnn_epochs, seed=seed, make=SmallCNN),
            "cnnprom": lambda: train_cnn(train, val, num_classes, epochs=cnn_epochs, seed=seed,
                                         make=CNNPromLike)}
    with one_thread():
        return {name: fits[name]() for name in names}


def two_class_reports(scorers: dict[str, object], sets: dict[str, SampleSet], width: int) -> dict[str, dict]:
    """Per two-class scorer: test AUROC, AUPRC, and Sn, Sp, MCC at the threshold of best validation MCC
    (:func:`~pipelines.tasks.dna.classify_metrics.two_class_report`), both read at the training length."""
    (xv, yv), (xt, yt) = crops(sets["val"], width, width), crops(sets["test"], width, width)
    with one_thread():
        return {name: two_class_report(yv, scorer.scores(xv)[:, 1], yt, scorer.scores(xt)[:, 1])
                for name, scorer in scorers.items()}


def score_lengths(scorers: dict[str, object], test: SampleSet, lengths: dict[int, int], width: int,
                  stride: int = 1) -> dict[str, dict[int, float]]:
    """Test AUROC ``{name: {length: auroc}}`` of every scorer on ``test`` cropped to each test length
    (``lengths``: tokens → bases), a longer crop read as the maximum over its windows."""
    out: dict[str, dict[int, float]] = {name: {} for name in scorers}
    for tokens, bases in lengths.items():
        x, y = crops(test, bases, width)
        with one_thread():
            for name, scorer in scorers.items():
                out[name][tokens] = auroc(y, scorer.scores(x, stride))
    return out
