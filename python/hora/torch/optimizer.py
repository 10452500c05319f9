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
from hora.torch.mpi_ops import _allreduce_group, _wire16
from hora.torch.mpi_ops import (Average, Adasum, HoraInternalError,
                                allreduce_async_, sparse_allreduce_async,
                                synchronize, size, global_process_set)
from hora import broadcast_object


# Horovod's words for zero_grad() between backward() and step()
_ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() "
                   "but before optimizer.step() or optimizer.synchronize(). "
                   "This is prohibited as it can cause a race condition.")


class _DistributedOptimizer:
    """Mixed in before the user's optimizer class (see DistributedOptimizer);
    super() is that class."""

    def __init__(self, params, named_parameters, compression,
                 backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super().__init__(params)
        self._compression = compression
        self.process_set = process_set
        named_parameters = _check_names(named_parameters, self.param_groups)
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
        self._groups = _check_groups(groups, self.param_groups)
        self._p_to_group = {}
        self._group_counts = {}
        # As in Horovod: a job of one rank has nothing to reduce, and a rank
        # outside the process set takes no part.
        if process_set.included() and \
                (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
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

    def _form_groups(self):
        """Horovod's grouping: groups of parameters reduced together
        (grouped_allreduce), in an order every rank agrees on (rank 0's)."""
        p_list = [p for group in self.param_groups for p in group["params"]
                  if p.requires_grad]
        names = broadcast_object([self._parameter_names.get(p)
                                  for p in p_list], root_rank=0,
                                 process_set=self.process_set)
        order = {n: i for i, n in enumerate(names)}
        p_list.sort(key=lambda p: order.get(self._parameter_names.get(p),
                                            len(order)))
        if isinstance(self._groups, list):
            ids = {id(p) for p in p_list}
            p_groups, taken = [], set()
            for g in self._groups:
                p_groups.append([p for p in g if id(p) in ids])
                taken.update(id(p) for p in p_groups[-1])
            p_groups += [[p] for p in p_list if id(p) not in taken]
        else:
            n = max(1, min(int(self._groups), len(p_list)))
            per, extra = divmod(len(p_list), n)
            p_groups, at = [], 0
            for i in range(n):
                k = per + (1 if i < extra else 0)
                p_groups.append(p_list[at:at + k])
                at += k
        for g in p_groups:
            g = tuple(g)
            if not g:
                continue
            for p in g:
                self._p_to_group[p] = g
            self._group_counts[g] = 0

    def _register_hooks(self):
        if self._groups is not None:
            self._form_groups()
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
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(tensor, name=name, op=self.op,
                                              process_set=self.process_set), \
                    None
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        if self.op == Average:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        handle = _allreduce_group([compressed], name, self.op, prescale,
                                  postscale, self.process_set, True, False,
                                  _wire16(self._compression))
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        for p in ps:
            if p.grad is None:
                p.grad = torch.zeros_like(p.detach())
        name = self._parameter_names.get(ps[0])
        pairs = [self._compression.compress(p.grad) for p in ps]
        if self.op == Average:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor
        else:
            prescale = postscale = 1.0
        handle = _allreduce_group([t for t, _ in pairs], name, self.op,
                                  prescale, postscale, self.process_set, True,
                                  True, _wire16(self._compression))
        return handle, [c for _, c in pairs]

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
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = \
                            self._grouped_allreduce_grad_async(group)
                        for gp in group:
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for the allreduce of every gradient (starting those not
        started yet: parameters without a gradient take part with zeros) and
        puts the results in the parameters' .grad."""
        if not self.process_set.included():
            self._synchronized = True
            return
        started = set()
        for k in self._handles:
            started.update(k if isinstance(k, tuple) else (k,))
        for p in self._requires_update - started:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        error = None
        for p, (handle, ctx) in self._handles.items():
            # Wait for every handle even after a failure, so that no buffer
            # is left in flight.
            group = p if isinstance(p, tuple) else (p,)
            try:
                output = handle() if callable(handle) else \
                    synchronize(handle)
            except HoraInternalError as e:
                error = error or e
                continue
            finally:
                for gp in group:
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                if self._groups is not None:
                    g = self._p_to_group.get(group[0])
                    if g is not None:
                        self._group_counts[g] = 0
            outputs = output if isinstance(p, tuple) else [output]
            ctxs = ctx if isinstance(p, tuple) else [ctx]
            with torch.no_grad():
                for gp, out, c in zip(group, outputs, ctxs):
                    if gp.grad.is_sparse:
                        agg = self._compression.decompress(out, c)
                        if not agg.is_sparse:
                            agg = agg.to_sparse()
                        gp.grad.zero_().add_(agg)
                    else:
                        gp.grad.set_(self._compression.decompress(out, c))
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
            raise AssertionError(_ZERO_GRAD_RACE)
        return super().zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizer:
    """DistributedOptimizer(op=Adasum), as Horovod does it: combining
    gradients with Adasum is meant for the update each rank would make on
    its own, so each rank applies the wrapped optimizer's step to a
    parameter as soon as its gradient is ready, and the change that step
    made (the delta) is what the ranks combine, asynchronously, while the
    backward pass goes on; step() waits for the combined deltas and applies
    each to the parameter's value from before the local step. The learning
    rate is not scaled by the number of ranks."""

    def __init__(self, params, named_parameters, compression,
                 backward_passes_per_step=1):
        super().__init__(params)
        self._compression = compression
        named_parameters = _check_names(named_parameters, self.param_groups)
        self._parameter_names = {v: k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step
                                 for _, v in named_parameters}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starts = {p: torch.zeros_like(p, requires_grad=False)
                        for _, p in named_parameters}
        with torch.enable_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.requires_grad:
                        continue
                    if p.grad is None:
                        p.grad = torch.zeros_like(p.detach())
                    self._requires_update.add(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _allreduce_delta_async(self, p):
        """The local step on p alone; p then holds its delta, which goes
        to the Adasum allreduce."""
        start = self._starts[p]
        stashed = [g["params"] for g in self.param_groups]
        with torch.no_grad():
            start.copy_(p)
            try:
                for g in self.param_groups:
                    g["params"] = [p] if any(p is v for v in g["params"]) \
                        else []
                super().step()
            finally:
                for g, ps in zip(self.param_groups, stashed):
                    g["params"] = ps
            p.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed,
                                  name=self._parameter_names.get(p),
                                  op=Adasum)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and \
                    self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than "
                    "backward_passes_per_step times before call "
                    "to step(). Increase backward_passes_per_step to "
                    "accumulate gradients locally.")
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_delta_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when "
                             "using Adasum optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_delta_async(p)
        error = None
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before the last backward pass
                handle, ctx = self._allreduce_delta_async(p)
            try:
                delta = synchronize(handle)
            except HoraInternalError as e:
                error = error or e
                continue
            finally:
                self._allreduce_delay[p] = self.backward_passes_per_step
            with torch.no_grad():
                start = self._starts[p]
                start.add_(self._compression.decompress(delta, ctx))
                p.copy_(start)
        self._handles.clear()
        if error is not None:
            raise error
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(_ZERO_GRAD_RACE)
        return super().zero_grad(*args, **kwargs)


def _check_names(named_parameters, param_groups):
    """Horovod's validation of named_parameters: a list of (name, tensor),
    names unique, every parameter named; unnamed ones get
    allreduce.noname.<group>.<index>."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                            for i, group in enumerate(param_groups)
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
    all_ids = {id(v) for group in param_groups for v in group["params"]}
    unnamed = all_ids - {id(v) for _, v in named_parameters}
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more "
                         "model parameters were not named. Python object "
                         "ids: %s" % ", ".join(str(i) for i in unnamed))
    return named_parameters


def _check_groups(groups, param_groups):
    """Horovod's validation of DistributedOptimizer(groups=...)."""
    if groups is None:
        return None
    if isinstance(groups, int):
        if groups <= 0:
            return None
        return groups
    if not isinstance(groups, list) or \
            any(not isinstance(g, (list, tuple)) for g in groups):
        raise ValueError("groups should be a non-negative integer or a list "
                         "of lists of torch.Tensor.")
    known = {id(p) for g in param_groups for p in g["params"]}
    seen = set()
    for g in groups:
        for p in g:
            if not isinstance(p, torch.Tensor):
                raise ValueError("groups must consist of torch.Tensor.")
            if id(p) not in known:
                raise ValueError("groups names a tensor that is not a "
                                 "parameter of the optimizer.")
            if id(p) in seen:
                raise ValueError("A parameter can only appear once in "
                                 "groups.")
            seen.add(id(p))
    return groups


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
    allreduce (names must be unique); compression: Compression.none,
    Compression.fp16 or Compression.bf16; backward_passes_per_step: backward
    passes accumulated locally between allreduces; gradient_predivide_factor
    f: gradients are divided by f before the sum and by size/f after it
    (Average only).
    groups: an int (that many groups of parameters) or a list of lists of
    parameters, each group reduced together by one grouped allreduce
    (num_groups is its deprecated spelling); sparse_as_dense: sparse
    gradients are made dense and allreduced (otherwise they go through
    sparse_allreduce_async); process_set: the ranks that reduce together
    (ranks outside it take no part).

    op=Adasum (several ranks, the global process set) applies each rank's
    step locally and combines the steps' deltas with Adasum instead (see
    _DistributedAdasumOptimizer); in a job of one it is the plain
    optimizer.

    The result is an instance of a subclass of the optimizer's class, built
    on the same parameter groups and state."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` "
                      "and will be removed", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    base = optimizer.__class__
    if op == Adasum and size() > 1:
        if process_set != global_process_set:
            raise NotImplementedError("Adasum does not support non-global "
                                      "process sets yet.")
        cls = type(base.__name__, (_DistributedAdasumOptimizer, base),
                   {"__module__": base.__module__})
        opt = cls(optimizer.param_groups, named_parameters, compression,
                  backward_passes_per_step)
        if optimizer.state:
            opt.state.update(optimizer.state)
        return opt
    cls = type(base.__name__, (_DistributedOptimizer, base),
               {"__module__": base.__module__})
    opt = cls(optimizer.param_groups, named_parameters, compression,
              backward_passes_per_step, op, gradient_predivide_factor,
              groups, sparse_as_dense, process_set)
    if optimizer.state:
        opt.state.update(optimizer.state)
    return opt
