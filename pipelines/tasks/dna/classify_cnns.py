"""The two CNN baselines of the classifier (:mod:`pipelines.tasks.dna.classify_baselines`), one-hot input.

* :class:`SmallCNN` — the baseline CNN of Genomic Benchmarks (Grešová et al., 2023): three blocks of
  convolution (kernel 8; 16, 8, 4 filters), batch norm, ReLU and max-pool 2, flattened into a dense layer
  of 512 and the class logits. Here on one-hot input instead of a learned embedding (an embedding followed
  by a convolution is a convolution of the one-hot bases), with "same" padding so that short training
  lengths still leave features.
* :class:`CNNPromLike` — the network of CNNProm (Umarov & Solovyev, PLOS ONE 12(2): e0171410, 2017) as the
  paper describes its promoter models: one convolutional layer of 200 filters of width 21 over the one-hot
  sequence, ReLU, max-pooling, a fully connected layer of 128 units with dropout, and the output layer.
  The paper tunes the pooling and layers per organism; this is its single-layer form, with pooling 2,
  the same for every set (docs/promoters.md says where this differs from the published models).

Both are trained by :func:`train_cnn` with Adam and cross-entropy for at most ``epochs`` epochs, the epoch
with the best validation AUROC kept (early stop after ``patience`` epochs without improvement), and score
every training-length window of a longer crop (:meth:`WindowCNN.logits`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipelines.tasks.dna.classify_metrics import auroc


def window_scores(logits: Callable[[Tensor, int], Tensor], x: Tensor, stride: int = 1) -> np.ndarray:
    """Class scores (N, C) of one-hot crops ``x`` (N, 4, n) by a window scorer: per window the class
    log-probabilities (log-softmax of ``logits(x, stride)`` (N, C, W)), then for each class its maximum
    over the windows. With one window (n = L0) these are the plain log-probabilities."""
    with torch.no_grad():
        return logits(x, stride).log_softmax(1).amax(2).numpy()  # (N, C)


class WindowCNN(nn.Module):
    """A CNN on one-hot windows of ``width`` bases that scores every window of a longer crop."""

    width: int
    chosen: int
    val_curve: dict[int, float]

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


class SmallCNN(WindowCNN):
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


class CNNPromLike(WindowCNN):
    """CNNProm's single-layer promoter CNN (see the module docstring) on windows of ``width`` bases.

    Args:
        width: input length in bases (shorter than ``kernel + pool − 1``: zero-padded to it).
        num_classes: output classes.
        filters: convolution filters (the paper's 200).
        kernel: filter width in bases (the paper's 21).
        pool: max-pooling size and stride.
        hidden: units of the fully connected layer (the paper's 128).
        dropout: dropout before the output layer.
    """

    def __init__(self, width: int, num_classes: int, filters: int = 200, kernel: int = 21, pool: int = 2,
                 hidden: int = 128, dropout: float = 0.5) -> None:
        super().__init__()
        self.width, self.pad = width, max(0, kernel + pool - 1 - width)  # at least one pooled position
        positions = (width + self.pad - kernel + 1) // pool
        self.conv = nn.Sequential(nn.Conv1d(4, filters, kernel), nn.ReLU(), nn.MaxPool1d(pool))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(filters * positions, hidden), nn.ReLU(),
                                  nn.Dropout(dropout), nn.Linear(hidden, num_classes))
        self.chosen, self.val_curve = 0, {}

    def forward(self, x: Tensor) -> Tensor:
        """Class logits (B, C) of one-hot windows (B, 4, width)."""
        if self.pad:
            x = F.pad(x, (self.pad // 2, self.pad - self.pad // 2))  # (B, 4, kernel + pool − 1)
        return self.head(self.conv(x))  # (B, filters, positions) flattened


def train_cnn(train: tuple[Tensor, np.ndarray], val: tuple[Tensor, np.ndarray], num_classes: int,
              epochs: int = 10, patience: int = 3, batch_size: int = 64, lr: float = 1e-3,
              seed: int = 0, make: Callable[[int, int], WindowCNN] = SmallCNN) -> WindowCNN:
    """Train ``make(width, num_classes)`` (default :class:`SmallCNN`) on ``train`` (one-hot (N, 4, L0),
    labels) with Adam and cross-entropy; returns it with the weights of the epoch with the best
    validation AUROC (``chosen``, 1-based) and the AUROC of every epoch run (``val_curve``). Seeded and
    isolated from the global torch RNG; trains also when called under ``torch.inference_mode`` (as a
    callback after Lightning's test loop is)."""
    curve: dict[int, float] = {}
    with torch.random.fork_rng(), torch.inference_mode(False), torch.enable_grad():
        x, xv = train[0].clone(), val[0].clone()  # inference tensors cannot enter autograd
        y = torch.as_tensor(np.asarray(train[1]), dtype=torch.int64)
        torch.manual_seed(seed)
        model = make(x.shape[2], num_classes)
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


def _epoch(model: nn.Module, opt: torch.optim.Optimizer, x: Tensor, y: Tensor, batch_size: int) -> None:
    """One pass over ``x`` (N, 4, L0), ``y`` (N,) in a fresh random order."""
    model.train()
    for idx in torch.randperm(len(y)).split(batch_size):
        if len(idx) < 2:  # batch norm needs two samples
            continue
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()


__all__ = ["CNNPromLike", "SmallCNN", "WindowCNN", "train_cnn", "window_scores"]
