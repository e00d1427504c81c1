"""Baselines a practitioner would fit for DNA sequence classification, on the classifier's own crops
and split (Lightning-free; :class:`pipelines.tasks.dna.classify.ClassifyBaselines` logs them beside a run).

Three fixed-length window scorers, each fitted on the train split at the training length (``L0`` bases,
the centre crop the Transformer is trained on) with its one setting chosen on the validation split only:

* :class:`OneHotLogistic` — L2 logistic regression on the one-hot bases of the window (4 features per
  position, N and padding all zero); the penalty C chosen on validation AUROC.
* :class:`PositionWeightMatrix` — a position weight matrix per class (base frequencies at every position,
  pseudo-count α chosen on validation); a window scores the sum of its per-position log-probabilities plus
  the class's log prior. For two classes the class-1 score ranks windows exactly as the PWM log-odds
  (positives vs negatives) does.
* :class:`SmallCNN` — the baseline CNN of Genomic Benchmarks (Grešová et al., 2023): three blocks of
  convolution (kernel 8; 16, 8, 4 filters), batch norm, ReLU and max-pool 2, flattened into a dense layer
  of 512 and the class logits. Here on one-hot input instead of a learned embedding (an embedding followed
  by a convolution is a convolution of the one-hot bases), with "same" padding so that short training
  lengths still leave features; trained with Adam for at most ``epochs`` epochs, the epoch with the best
  validation AUROC kept (early stop after ``patience`` epochs without improvement).

All three need a fixed input length. A test crop of n > L0 bases is read as every L0 window in it (stride
``stride``): a class's score is the maximum over the windows of its log-probability (:func:`window_scores`).
The baseline is then, like the Transformer, not told where in the longer crop the centre is. (A
practitioner who crops the centre instead scores exactly the 1× value at every length: the centre L0
window of a longer crop is the 1× crop.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from datamodules.dna.samples import SampleSet, SampleWindows
from datamodules.dna.tokenize import KmerTokenizer

#: penalties C tried for the one-hot logistic regression (chosen on validation AUROC)
C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: pseudo-counts α tried for the position weight matrix (chosen on validation AUROC)
ALPHA_GRID = (0.1, 1.0, 10.0)


def one_hot(codes: np.ndarray) -> Tensor:
    """Base codes (N, n) (0..3 = A, C, G, T; N and PAD ≥ 4) as one-hot channels (N, 4, n), float32;
    N and padding are all-zero columns."""
    codes = torch.as_tensor(np.asarray(codes, dtype=np.int64))  # (N, n)
    out = F.one_hot(codes.clamp(max=4), 5)[..., :4].float()  # (N, n, 4): code 4+ → zeros
    return out.transpose(1, 2).contiguous()  # (N, 4, n)


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """AUROC of class scores (N, C): for two classes the usual ROC AUC of column 1, for more the macro
    mean over classes of one-vs-rest AUROC (each column ranked on its own, as the classifier reports it);
    NaN when the labels hold a single class."""
    from sklearn.metrics import roc_auc_score  # optional: sklearn baselines

    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return float("nan")
    if scores.shape[1] == 2:
        return float(roc_auc_score(labels, scores[:, 1]))
    present = [c for c in range(scores.shape[1]) if 0 < (labels == c).sum() < len(labels)]
    return float(np.mean([roc_auc_score(labels == c, scores[:, c]) for c in present]))


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


def window_scores(logits: Callable[[Tensor, int], Tensor], x: Tensor, stride: int = 1) -> np.ndarray:
    """Class scores (N, C) of one-hot crops ``x`` (N, 4, n) by a window scorer: per window the class
    log-probabilities (log-softmax of ``logits(x, stride)`` (N, C, W)), then for each class its maximum
    over the windows. With one window (n = L0) these are the plain log-probabilities."""
    with torch.no_grad():
        return logits(x, stride).log_softmax(1).amax(2).numpy()  # (N, C)


class SmallCNN(nn.Module):
    """The Genomic Benchmarks baseline CNN on one-hot windows of ``width`` bases (see the module docstring).

    Args:
        width: input length in bases (L0).
        num_classes: output classes.
    """

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        blocks, channels = [], 4
        for out in (16, 8, 4):
            blocks += [nn.Conv1d(channels, out, 8, padding="same"), nn.BatchNorm1d(out), nn.ReLU(),
                       nn.MaxPool1d(2)]
            channels = out
        self.features = nn.Sequential(*blocks)
        flat = channels * (width // 8)  # three max-pools of 2
        if flat == 0:
            raise ValueError(f"the CNN baseline needs windows of at least 8 bases, got {width}")
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_classes))
        self.width = width
        self.chosen, self.val_curve = 0, {}  # best epoch and validation AUROC per epoch (train_cnn)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits (B, C) of one-hot windows (B, 4, width)."""
        return self.head(self.features(x))  # (B, 4, width // 8) flattened

    def logits(self, x: Tensor, stride: int = 1, chunk: int = 4096) -> Tensor:
        """Class logits (N, C, W) of every ``width`` window of ``x`` (N, 4, n) at ``stride``, about
        ``chunk`` windows at a time (the windows are copies: all of them at once would not fit)."""
        self.eval()
        w = (x.shape[2] - self.width) // stride + 1
        parts = []
        with torch.no_grad():
            for part in x.split(max(1, chunk // w)):
                wins = part.unfold(2, self.width, stride).permute(0, 2, 1, 3)  # (n, W, 4, width)
                out = self(wins.reshape(-1, 4, self.width))  # (n·W, C)
                parts.append(out.view(len(part), w, -1).transpose(1, 2))  # (n, C, W)
        return torch.cat(parts)

    def scores(self, x: Tensor, stride: int = 1) -> np.ndarray:
        return window_scores(self.logits, x, stride)


def train_cnn(train: tuple[Tensor, np.ndarray], val: tuple[Tensor, np.ndarray], num_classes: int,
              epochs: int = 10, patience: int = 3, batch_size: int = 64, lr: float = 1e-3,
              seed: int = 0) -> SmallCNN:
    """Train :class:`SmallCNN` on ``train`` (one-hot (N, 4, L0), labels) with Adam and cross-entropy;
    returns it with the weights of the epoch with the best validation AUROC (``chosen``, 1-based) and
    the AUROC of every epoch run (``val_curve``). Seeded and isolated from the global torch RNG; trains
    also when called under ``torch.inference_mode`` (as a callback after Lightning's test loop is)."""
    curve: dict[int, float] = {}
    with torch.random.fork_rng(), torch.inference_mode(False), torch.enable_grad():
        x, xv = train[0].clone(), val[0].clone()  # inference tensors cannot enter autograd
        y = torch.as_tensor(np.asarray(train[1]), dtype=torch.int64)
        torch.manual_seed(seed)
        model = SmallCNN(x.shape[2], num_classes)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        best_state, best_epoch = None, 0
        for epoch in range(1, epochs + 1):
            _epoch(model, opt, x, y, batch_size)
            curve[epoch] = auroc(val[1], model.scores(xv))
            if best_state is None or curve[epoch] > curve[best_epoch]:
                best_epoch, best_state = epoch, {k: v.clone() for k, v in model.state_dict().items()}
            elif epoch - best_epoch >= patience:
                break
        model.load_state_dict(best_state)
    model.chosen, model.val_curve = best_epoch, curve
    return model.eval()


def _epoch(model: SmallCNN, opt: torch.optim.Optimizer, x: Tensor, y: Tensor, batch_size: int) -> None:
    """One pass over ``x`` (N, 4, L0), ``y`` (N,) in a fresh random order."""
    model.train()
    for idx in torch.randperm(len(y)).split(batch_size):
        if len(idx) < 2:  # batch norm needs two samples
            continue
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


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


def fit_baselines(sets: dict[str, SampleSet], width: int, num_classes: int, cnn_epochs: int = 10,
                  seed: int = 0) -> dict[str, object]:
    """Fit every baseline on ``sets["train"]`` at ``width`` bases, choosing each one's setting on
    ``sets["val"]``; ``sets["test"]`` is never read. Returns ``{name: fitted scorer}`` (each with
    ``scores(x, stride)``, its validation choice ``chosen`` and the validation AUROC of every candidate
    ``val_curve``)."""
    train, val = crops(sets["train"], width, width), crops(sets["val"], width, width)
    with one_thread():
        return {"onehot_lr": OneHotLogistic().fit(train, val, num_classes),
                "pwm": PositionWeightMatrix().fit(train, val, num_classes),
                "cnn": train_cnn(train, val, num_classes, epochs=cnn_epochs, seed=seed)}


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
