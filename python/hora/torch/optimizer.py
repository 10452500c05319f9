"""hora.torch.optimizer -- DistributedOptimizer: Horovod's data-parallel
optimizer wrapper.

Every parameter gets a hook on its gradient accumulator; as soon as the
backward pass has produced a parameter's gradient, the hook starts an
asynchronous in-place allreduce of it, so communication overlaps the rest of
the backward pass. step() (or synchronize()) waits for all of them and then
runs the wrapped optimizer's step.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from hora.torch.compression import Compression
from hora.torch.mpi_ops import (Average, Adasum, HoraInternalError,
                                allreduce_async_, synchronize, size,
                                global_process_set, _check_process_set)


class _DistributedOptimizer:
    """Mixed in before the user's optimizer class (see DistributedOptimizer);
    super() is that class."""

    def __init__(self, params, named_parameters, compression,
                 backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, sparse_as_dense=False):
        super().__init__(params)
        self._compression = compression

        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of "
                             "tuples (name, parameter), usually produced by "
                             "model.named_parameters().")
        dups = _find_duplicates([k for k, _ in named_parameters])
        if dups:
            raise ValueError("Parameter names in named_parameters must be "
                             "unique. Found duplicates: %s"
                             % ", ".join(sorted(dups)))
        all_ids = {id(v) for group in self.param_groups
                   for v in group["params"]}
        named_ids = {id(v) for _, v in named_parameters}
        unnamed = all_ids - named_ids
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more "
                             "model parameters were not named. Python object "
                             "ids: %s" % ", ".join(str(i) for i in unnamed))

        self._parameter_names = {v: k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step
                                 for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # As in Horovod: a job of one rank has nothing to reduce.
        if size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1":
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super().load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        with torch.enable_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.requires_grad:
                        continue
                    self._requires_update.add(p)
                    # The AccumulateGrad node of p: its hook runs right after
                    # p.grad has been written by the backward pass.
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # This rank computed no gradient for p (e.g. a branch of the model
            # it did not use), but the other ranks may have: take part with
            # zeros.
            p.grad = torch.zeros_like(p.detach())
        if p.grad.is_sparse:
            if not self.sparse_as_dense:
                raise NotImplementedError(
                    "hora.torch.DistributedOptimizer: parameter %s has a "
                    "sparse gradient; hora has no sparse allreduce: pass "
                    "sparse_as_dense=True" % self._parameter_names.get(p))
            p.grad = p.grad.to_dense()
        name = self._parameter_names.get(p)
        compressed, ctx = self._compression.compress(p.grad)
        if self.op == Average:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        handle = allreduce_async_(compressed, name=name, op=self.op,
                                  prescale_factor=prescale,
                                  postscale_factor=postscale)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than "
                        "backward_passes_per_step times before call "
                        "to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for the allreduce of every gradient (starting those not
        started yet: parameters without a gradient take part with zeros) and
        puts the results in the parameters' .grad."""
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        error = None
        for p, (handle, ctx) in self._handles.items():
            # Wait for every handle even after a failure, so that no buffer
            # is left in flight.
            try:
                output = synchronize(handle)
            except HoraInternalError as e:
                error = error or e
                continue
            finally:
                self._allreduce_delay[p] = self.backward_passes_per_step
            with torch.no_grad():
                p.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True
        if error is not None:
            raise error

    @contextmanager
    def skip_synchronize(self):
        """Makes step() skip synchronization, for
        `optimizer.synchronize(); clip...; with optimizer.skip_synchronize():
        optimizer.step()`."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause "
                              "training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if "
                              "you use optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after "
                                 "loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race "
                                 "condition.")
        return super().zero_grad(*args, **kwargs)


def _find_duplicates(names):
    seen, dups = set(), set()
    for n in names:
        if n in seen:
            dups.add(n)
        seen.add(n)
    return dups


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that step() applies the gradients averaged
    (op=Average, the default, or summed: op=Sum) over every rank.

    named_parameters: model.named_parameters(), to name each gradient's
    allreduce (names must be unique); compression: Compression.none or
    Compression.fp16; backward_passes_per_step: backward passes accumulated
    locally between allreduces; gradient_predivide_factor f: gradients are
    divided by f before the sum and by size/f after it (Average only).
    num_groups and groups (Horovod's fusion hints) are accepted; every
    gradient is reduced on its own and the daemon fuses them.

    The result is an instance of a subclass of the optimizer's class, built
    on the same parameter groups and state."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if op == Adasum:
        raise NotImplementedError("hora does not implement Adasum; use "
                                  "op=Average or op=Sum")
    _check_process_set(process_set)
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base),
               {"__module__": base.__module__})
    opt = cls(optimizer.param_groups, named_parameters, compression,
              backward_passes_per_step, op, gradient_predivide_factor,
              sparse_as_dense)
    if optimizer.state:
        opt.state.update(optimizer.state)
    return opt
