"""hora.torch.sync_batch_norm -- batch normalization whose statistics are
those of the whole batch, across every rank (Horovod's SyncBatchNorm).

The statistics are combined from every rank's count, mean and variance by
one allreduce in float64, so ranks may hold batches of different sizes; the
backward pass allreduces the two sums the input gradient needs. Plain torch
operations: CPU tensors work (Horovod's version needs CUDA).
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hora.torch.mpi_ops import allreduce, size, Sum


class SyncBatchNorm(_BatchNorm):
    """Batch normalization over (N, C, ...) inputs with the mean and
    variance of the batch of every rank together.

    Arguments as torch.nn.BatchNorm*d: num_features (C), eps (1e-5),
    momentum (0.1; None for a cumulative moving average), affine (True),
    track_running_stats (True). In training mode (or without running
    statistics) the statistics are synchronized; in evaluation mode the
    running ones are used, as BatchNorm does."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine,
                         track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)"
                             .format(input.dim()))

    def _run_bn(self, input, factor):
        return F.batch_norm(input, self.running_mean, self.running_var,
                            self.weight, self.bias,
                            self.training or not self.track_running_stats,
                            factor, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return self._run_bn(input, factor)
        if size() == 1:
            return self._run_bn(input, factor)
        running = self.track_running_stats and self.training
        return _SyncBatchNorm.apply(
            input, self.weight, self.bias,
            self.running_mean if running else None,
            self.running_var if running else None, self.eps, factor)


def _per_channel(x):
    """x (N, C, ...) as (C, rest)."""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def _shape(v, x):
    return v.reshape((1, -1) + (1,) * (x.dim() - 2))


class _SyncBatchNorm(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps,
                momentum):
        x = input.contiguous()
        xc = _per_channel(x).double()
        c = x.shape[1]
        n = xc.shape[1]
        mean = xc.mean(1) if n else torch.zeros(c, dtype=torch.float64)
        var = xc.var(1, unbiased=False) if n else \
            torch.zeros(c, dtype=torch.float64)
        stats = torch.cat([torch.tensor([float(n)], dtype=torch.float64),
                           mean * n, (var + mean * mean) * n])
        stats = allreduce(stats, op=Sum, name="sync_batch_norm.stats")
        total = stats[0].item()
        g_mean = stats[1:1 + c] / total
        g_var = (stats[1 + c:] / total - g_mean * g_mean).clamp_(min=0)
        invstd = 1.0 / torch.sqrt(g_var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(
                    g_mean.to(running_mean.dtype) * momentum)
                unbiased = g_var * (total / max(total - 1, 1))
                running_var.mul_(1 - momentum).add_(
                    unbiased.to(running_var.dtype) * momentum)
        mean_t = g_mean.to(x.dtype)
        invstd_t = invstd.to(x.dtype)
        out = (x - _shape(mean_t, x)) * _shape(invstd_t, x)
        if weight is not None:
            out = out * _shape(weight, x)
        if bias is not None:
            out = out + _shape(bias, x)
        ctx.save_for_backward(x, weight, mean_t, invstd_t)
        ctx.total = total
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        dy = grad_output.contiguous()
        xmu = x - _shape(mean, x)
        xhat = xmu * _shape(invstd, x)
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        grad_weight = (_per_channel(dy * xhat).sum(1)
                       if weight is not None and need_weight else None)
        grad_bias = (_per_channel(dy).sum(1)
                     if weight is not None and need_bias else None)
        grad_input = None
        if need_input:
            c = x.shape[1]
            sums = torch.cat([_per_channel(dy).sum(1).double(),
                              _per_channel(dy * xmu).sum(1).double()])
            sums = allreduce(sums, op=Sum, name="sync_batch_norm.grad_sums")
            mean_dy = (sums[:c] / ctx.total).to(x.dtype)
            mean_dy_xmu = (sums[c:] / ctx.total).to(x.dtype)
            w = weight if weight is not None else torch.ones_like(invstd)
            grad_input = (dy - _shape(mean_dy, x)
                          - xmu * _shape(invstd * invstd * mean_dy_xmu, x)) \
                * _shape(invstd * w, x)
        return grad_input, grad_weight, grad_bias, None, None, None, None
