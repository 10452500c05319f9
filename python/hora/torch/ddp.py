"""hora.torch.ddp -- DistributedDataParallel: torch's data-parallel module
wrapper, with hora's collectives underneath.

    model = hvd.DistributedDataParallel(model)
    loss_fn(model(x), y).backward()   # gradients are averaged on return
    optimizer.step()                  # a plain torch optimizer

At construction the wrapped module's parameters and buffers are broadcast
from the first rank of the process set. The parameters that require a
gradient are grouped, in reverse registration order, into buckets of at most
bucket_cap_mb MiB (the first one smaller, so that communication starts
early). A hook on each parameter counts its gradient in as soon as the
backward pass has accumulated it; a bucket whose gradients are all in is
allreduced (Average over the process set) asynchronously while the backward
pass goes on. A callback queued on the autograd engine waits for every bucket
before backward() returns, so the parameters' .grad hold the averages.
"""

import itertools
import time
import weakref
from contextlib import contextmanager

import torch

import hora as _core
from hora.torch.mpi_ops import (Average, Max, ProcessSet, allreduce_async_,
                                broadcast_async_, global_process_set, rank,
                                synchronize)
from hora.torch.functions import allgather_object
from hora.torch.arena import arena_zeros, in_arena

_MIB = 1024 * 1024
# The first bucket holds at most this much: the gradients of the last layers
# are ready first, and their allreduce should not wait for a full bucket.
_FIRST_BUCKET_BYTES = _MIB

# DistributedDataParallel instances built so far, per process set: the n-th
# one of every member names its operations "ddp.<n>..." (or
# "ddp.ps<id>.<n>..."), so ranks that build their models in the same order
# agree on every name.
_instances = {}


def _engine_callback():
    """The autograd engine's queue_callback, where this torch has it."""
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    return getattr(engine, "queue_callback", None)


def _as_device(d):
    """torch.device of d (an int is a CUDA device's index), or None."""
    try:
        return torch.device("cuda", d) if isinstance(d, int) and \
            not isinstance(d, bool) else torch.device(d)
    except (RuntimeError, TypeError, ValueError):
        return None


def _same_device(a, b):
    """Whether devices a and b are one (cuda without an index is the
    current one)."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    cur = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (cur if a.index is None else a.index) == \
        (cur if b.index is None else b.index)


class _Bucket:
    """Gradients reduced together: one flat tensor, one allreduce."""
    __slots__ = ("index", "params", "offsets", "numels", "flat", "pending",
                 "handle", "name")

    def __init__(self, index, params, dtype, name, arena, device):
        self.index = index
        self.params = params
        self.offsets, self.numels = [], []
        at = 0
        for p in params:
            self.offsets.append(at)
            self.numels.append(p.numel())
            at += p.numel()
        self.flat = None
        if arena:
            try:
                self.flat = arena_zeros(at, dtype=dtype)
            except RuntimeError:  # the arena is full
                pass
        if self.flat is None:
            self.flat = torch.zeros(at, dtype=dtype, device=device)
        self.pending = len(params)
        self.handle = None
        self.name = name

    def view(self, i):
        p = self.params[i]
        o = self.offsets[i]
        return self.flat[o:o + self.numels[i]].view(p.shape)


class DistributedDataParallel(torch.nn.Module):
    """Wraps `module` so that every backward pass averages the gradients of
    its parameters over the ranks of `process_set` (torch's
    DistributedDataParallel, with hora as the backend; the module on the
    CPU or on one CUDA device).

    Every rank of the process set must run the same number of forward and
    backward passes, with models of the same structure; each usually feeds
    its own part of the batch.

    broadcast_buffers: the module's buffers (e.g. BatchNorm's running
    statistics) are broadcast from the first rank of the set before each
    forward pass. bucket_cap_mb: the largest bucket of gradients, in MiB
    (a parameter larger than that gets a bucket of its own).
    find_unused_parameters: parameters that get no gradient in a backward
    pass take part with their current .grad (zeros when it is None), and a
    parameter no rank used keeps its .grad untouched; without it such a
    parameter makes backward() raise a RuntimeError naming it (the
    gradients that other parameters got are still reduced, so no rank is
    left waiting). gradient_as_bucket_view: each parameter's .grad is a view
    into its bucket's flat tensor, so the backward pass accumulates the
    gradients where they are reduced, with no copy between .grad and the
    bucket (otherwise a gradient is copied into its bucket when it is ready
    and the average back after the allreduce). Either way the flat tensors
    lie in libhora's shared arena (hora.torch.arena_empty), where horad
    reduces them with no copy, up to half the arena (--arena-size,
    HORA_ARENA_SIZE: the rest stays for other collectives); a bucket beyond
    that, or that finds the arena full, is an ordinary tensor, which
    libhora copies into the arena and back (or streams) for each allreduce.
    arena_buckets is how many buckets lie in the arena.
    process_set: the ranks that train together; on a rank outside it the
    wrapper does nothing but call the module.

    device_ids may be None or a list of the module's device only,
    output_device None or that device, dim 0: hora runs one model per
    process and scatters no inputs. Buckets of a CUDA module are on its
    device (staged through shared memory by libhora for each allreduce). process_group is refused: pass a hora process set
    as process_set=. check_reduction (deprecated in torch) has no effect;
    static_graph=True is accepted and lets parameters go unused, as
    find_unused_parameters does.

    no_sync() is a context manager under which forward and backward passes
    accumulate gradients locally; the first backward pass of a forward pass
    run outside it reduces the accumulated gradients. state_dict() keys
    start with "module.", as in torch. comm_wait_seconds is the time
    backward passes have spent waiting for allreduces to finish (not
    overlapped with computation), since construction."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None,
                 bucket_cap_mb=25, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False,
                 static_graph=False, process_set=global_process_set):
        super().__init__()
        _check_arguments(module, device_ids, output_device, dim,
                         process_group, bucket_cap_mb, process_set)
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self.bucket_cap_mb = bucket_cap_mb
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.static_graph = bool(static_graph)
        self.process_set = process_set
        self.comm_wait_seconds = 0.0
        self.require_backward_grad_sync = True
        self._buckets = []
        self.arena_buckets = 0
        self._grad_accs = []
        self._hook_handles = []
        self._expect_hooks = False   # the last forward asks for a reduction
        self._iteration = None       # state of the reduction under way
        self._used = {}              # param -> hook fired since last reduce
        self._active = bool(process_set.included())
        if not self._active:
            return

        cid = process_set.process_set_id
        n = _instances.get(cid, 0)
        _instances[cid] = n + 1
        self._prefix = "ddp.%d" % n if cid == 0 else "ddp.ps%d.%d" % (cid, n)
        self._root = min(process_set.ranks)

        named = list(module.named_parameters())
        self._names = {p: name for name, p in named}
        self._params = [p for _, p in named if p.requires_grad]
        self._check_layouts(named)
        self._broadcast_state(named)
        self._build_buckets()
        self._register_hooks()

    # -- construction -------------------------------------------------------

    def _check_layouts(self, named):
        """Every member must wrap a model of the same parameters (names,
        shapes, dtypes, which need a gradient): otherwise the ranks would
        wait on each other's buckets forever."""
        mine = [(name, tuple(p.shape), str(p.dtype), p.requires_grad)
                for name, p in named]
        mine += [("buffer " + name, tuple(b.shape), str(b.dtype), False)
                 for name, b in self.module.named_buffers()]
        every = allgather_object(mine, name=self._prefix + ".layout",
                                 process_set=self.process_set)
        members = sorted(self.process_set.ranks)
        for r, theirs in zip(members, every):
            if theirs != mine:
                diff = [(a, b) for a, b in itertools.zip_longest(mine, theirs)
                        if a != b][0]
                raise ValueError(
                    "DistributedDataParallel: ranks %d and %d wrap different "
                    "models: on rank %d, %s; on rank %d, %s. Every rank of "
                    "the process set must wrap the same model."
                    % (rank(), r, rank(), _describe(diff[0]), r,
                       _describe(diff[1])))

    def _broadcast_state(self, named):
        """Parameters and buffers from the set's first rank."""
        tensors = [(self._prefix + ".init." + name, p.data)
                   for name, p in named]
        tensors += [(self._prefix + ".init.buffer." + name, b)
                    for name, b in self.module.named_buffers()]
        handles = [broadcast_async_(t, self._root, name=name,
                                    process_set=self.process_set)
                   for name, t in tensors]
        for h in handles:
            synchronize(h)

    def _build_buckets(self):
        cap = max(int(self.bucket_cap_mb * _MIB), 1)
        limit = min(cap, _FIRST_BUCKET_BYTES)
        groups, cur, cur_bytes = [], [], 0
        for p in reversed(self._params):
            nbytes = p.numel() * p.element_size()
            if cur and (cur_bytes + nbytes > limit or
                        p.dtype != cur[0].dtype):
                groups.append(cur)
                cur, cur_bytes = [], 0
                limit = cap
            cur.append(p)
            cur_bytes += nbytes
        if cur:
            groups.append(cur)
        self._bucket_of = {}
        # at most half the arena: the rest stays for the copies of ordinary
        # tensors and the outputs of allgathers and alltoalls
        room = _core._lib().hora_arena_size() // 2
        for k, ps in enumerate(groups):
            nbytes = sum(p.numel() * p.element_size() for p in ps)
            b = _Bucket(k, ps, ps[0].dtype, "%s.bucket.%d" % (self._prefix, k),
                        arena=nbytes <= room and ps[0].device.type == "cpu",
                        device=ps[0].device)
            self._buckets.append(b)
            if in_arena(b.flat):
                self.arena_buckets += 1
                room -= nbytes
            for i, p in enumerate(ps):
                self._bucket_of[p] = (b, i)
                if self.gradient_as_bucket_view and p.grad is not None:
                    with torch.no_grad():
                        v = b.view(i)
                        v.copy_(p.grad)
                        p.grad = v

    def _register_hooks(self):
        post = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        for p in self._params:
            if post:
                self._hook_handles.append(
                    p.register_post_accumulate_grad_hook(self._make_hook(p)))
            else:
                # The AccumulateGrad node of p: its hook runs right after
                # p.grad has been written by the backward pass.
                with torch.enable_grad():
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(acc.register_hook(
                    self._make_hook(p)))
                self._grad_accs.append(acc)
        weakref.finalize(self, _remove_hooks, self._hook_handles)

    # -- forward ------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if not self._active:
            return self.module(*inputs, **kwargs)
        if self._iteration is not None:
            # A reduction that no backward pass finished (the engine had no
            # callback for it): finish it now.
            self._finalize()
        if self.broadcast_buffers:
            self._sync_buffers()
        if torch.is_grad_enabled():
            # (a forward pass without autograd, e.g. an evaluation between
            # a forward pass and its backward pass, changes nothing)
            self._expect_hooks = self.require_backward_grad_sync
        return self.module(*inputs, **kwargs)

    def _sync_buffers(self):
        """The buffers of the set's first rank, one broadcast per dtype."""
        by_dtype = {}
        for b in self.module.buffers():
            by_dtype.setdefault(b.dtype, []).append(b)
        if not by_dtype:
            return
        is_root = rank() == self._root
        work = []
        with torch.no_grad():
            for dtype, bufs in sorted(by_dtype.items(),
                                      key=lambda kv: str(kv[0])):
                flat = torch.cat([b.reshape(-1) for b in bufs])
                name = "%s.buffers.%s" % (self._prefix,
                                          str(dtype).replace("torch.", ""))
                h = broadcast_async_(flat, self._root, name=name,
                                     process_set=self.process_set)
                work.append((h, flat, bufs))
            for h, flat, bufs in work:
                synchronize(h)
                if is_root:
                    continue
                at = 0
                for b in bufs:
                    n = b.numel()
                    b.copy_(flat[at:at + n].view(b.shape))
                    at += n

    # -- backward -----------------------------------------------------------

    def _make_hook(self, p):
        # a weak reference: the hooks must not keep a wrapper that is gone
        # alive (its finalizer removes them)
        ref = weakref.ref(self)

        def hook(*ignore):
            ddp = ref()
            if ddp is not None:
                ddp._grad_ready(p)
        return hook

    def _grad_ready(self, p):
        self._used[p] = True
        if not self._expect_hooks:
            # no_sync(), a forward pass not made through this wrapper, or a
            # second backward pass of the same forward: accumulate locally.
            return
        it = self._iteration
        if it is None:
            it = self._iteration = {"ready": set(), "launched": [],
                                    "queued": False}
            queue = _engine_callback()
            if queue is not None:
                queue(self._finalize)
                it["queued"] = True
        if p in it["ready"]:
            return
        it["ready"].add(p)
        b, i = self._bucket_of[p]
        self._into_bucket(b, i, p.grad)
        b.pending -= 1
        if b.pending == 0:
            self._launch(b)

    def _into_bucket(self, b, i, grad):
        """Puts p's gradient (None: zeros) in its place in the bucket."""
        p = b.params[i]
        with torch.no_grad():
            v = b.view(i)
            if grad is None:
                v.zero_()
                return
            if grad.is_sparse:
                raise RuntimeError(
                    "DistributedDataParallel: parameter %s got a sparse "
                    "gradient; hora's DistributedDataParallel reduces dense "
                    "gradients only (use sparse=False, or "
                    "DistributedOptimizer)" % self._names.get(p, "?"))
            if self.gradient_as_bucket_view:
                if grad.data_ptr() != v.data_ptr() or \
                        grad.stride() != v.stride():
                    v.copy_(grad)
                    p.grad = v
            else:
                v.copy_(grad)

    def _launch(self, b):
        b.handle = allreduce_async_(b.flat, name=b.name, op=Average,
                                    process_set=self.process_set)
        self._iteration["launched"].append(b)

    def _finalize(self):
        """Runs when the backward pass is over: starts what is left, waits
        for every bucket and puts the averages in the gradients."""
        it = self._iteration
        if it is None:
            return
        self._expect_hooks = False
        allow_unused = self.find_unused_parameters or self.static_graph
        missing = [p for p in self._params if p not in it["ready"]]
        used = None
        if missing:
            # Zeros (or what .grad holds) complete the buckets, so that every
            # rank's allreduces can finish, even when this one then raises.
            for p in missing:
                b, i = self._bucket_of[p]
                self._into_bucket(b, i, p.grad)
                b.pending -= 1
                if b.pending == 0:
                    self._launch(b)
        if allow_unused:
            flags = torch.tensor([1.0 if self._used.get(p) else 0.0
                                  for p in self._params], dtype=torch.float32)
            used = (flags, allreduce_async_(
                flags, name=self._prefix + ".used", op=Max,
                process_set=self.process_set))
        t0 = time.perf_counter()
        error = None
        for b in it["launched"]:
            try:
                synchronize(b.handle)
            except Exception as e:  # noqa: BLE001 -- wait for all first
                error = error or e
            b.handle = None
        if used is not None:
            try:
                synchronize(used[1])
            except Exception as e:  # noqa: BLE001
                error = error or e
        self.comm_wait_seconds += time.perf_counter() - t0
        for b in self._buckets:
            b.pending = len(b.params)
        self._iteration = None
        self._used = {}
        if error is not None:
            raise error
        if missing and not allow_unused:
            names = [self._names.get(p, "?") for p in missing]
            raise RuntimeError(
                "DistributedDataParallel: on rank %d, %d parameter(s) "
                "received no gradient in this backward pass: %s. They took "
                "part in the reduction as they were (zeros where .grad is "
                "None), so that the ranks stay in step, but the gradients "
                "are not this pass's. Pass find_unused_parameters=True "
                "when parts of the model may go unused in an iteration, or "
                "make every output of forward() take part in the loss."
                % (rank(), len(names), ", ".join(names)))
        globally_used = used[0].tolist() if used is not None else None
        with torch.no_grad():
            for k, p in enumerate(self._params):
                if globally_used is not None and not globally_used[k]:
                    continue  # no rank used it: its .grad stays as it was
                b, i = self._bucket_of[p]
                v = b.view(i)
                if self.gradient_as_bucket_view:
                    if p.grad is None or p.grad.data_ptr() != v.data_ptr():
                        p.grad = v
                elif p.grad is None:
                    p.grad = v.clone()
                else:
                    p.grad.copy_(v)

    # -- torch's API --------------------------------------------------------

    @contextmanager
    def no_sync(self):
        """Forward and backward passes within accumulate gradients locally;
        the backward pass of the first forward pass after it reduces
        them."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def __getstate__(self):
        raise TypeError("hora.torch.DistributedDataParallel cannot be "
                        "pickled or copied; save .module or state_dict()")


def _remove_hooks(handles):
    for h in handles:
        h.remove()


def _describe(entry):
    if entry is None:
        return "nothing there"
    name, shape, dtype, req = entry
    return "%s of shape %s (%s%s)" % (name, list(shape),
                                      dtype.replace("torch.", ""),
                                      ", requires_grad" if req else "")


def _check_arguments(module, device_ids, output_device, dim, process_group,
                     bucket_cap_mb, process_set):
    if not isinstance(module, torch.nn.Module):
        raise TypeError("DistributedDataParallel: module must be a "
                        "torch.nn.Module, got %s" % type(module).__name__)
    if process_group is not None:
        raise ValueError("DistributedDataParallel: process_group is not "
                         "supported by hora (it has no torch process "
                         "groups); pass a hora process set as process_set= "
                         "(hvd.add_process_set([...]))")
    # one device per process: the module's (its tensors all on it)
    devices = []
    for name, t in itertools.chain(module.named_parameters(),
                                   module.named_buffers()):
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError("DistributedDataParallel: %s is on %s; hora "
                             "takes CPU and CUDA tensors" % (name, t.device))
        if devices and not _same_device(devices[0][1], t.device):
            raise ValueError("DistributedDataParallel: %s is on %s but %s "
                             "is on %s; hora's DistributedDataParallel runs "
                             "one model on one device per process"
                             % (devices[0][0], devices[0][1], name, t.device))
        if not devices:
            devices.append((name, t.device))
    where = devices[0][1] if devices else torch.device("cpu")
    if device_ids is not None:
        ids = list(device_ids) if isinstance(device_ids, (list, tuple)) \
            else None
        if ids is None or len(ids) > 1 or \
                not all(_as_device(d) is not None and
                        _same_device(_as_device(d), where) for d in ids):
            raise ValueError("DistributedDataParallel: device_ids=%r is not "
                             "supported: hora runs one model per process, "
                             "on one device (this module's is %s); pass "
                             "device_ids=None or [its device]"
                             % (device_ids, where))
    if output_device is not None and (
            _as_device(output_device) is None or
            not _same_device(_as_device(output_device), where)):
        raise ValueError("DistributedDataParallel: output_device=%r is not "
                         "supported: hora scatters no inputs and gathers no "
                         "outputs (this module's device is %s); pass "
                         "output_device=None" % (output_device, where))
    if dim != 0:
        raise ValueError("DistributedDataParallel: dim=%r is not supported: "
                         "hora's DistributedDataParallel scatters no inputs "
                         "(one model per process); pass dim=0" % (dim,))
    if isinstance(bucket_cap_mb, bool) or \
            not isinstance(bucket_cap_mb, (int, float)) or \
            not bucket_cap_mb > 0:
        raise ValueError("DistributedDataParallel: bucket_cap_mb must be a "
                         "positive number of MiB, got %r" % (bucket_cap_mb,))
    if not isinstance(process_set, ProcessSet):
        raise TypeError("DistributedDataParallel: process_set must be a "
                        "hora ProcessSet, got %s" % type(process_set).__name__)
    if process_set.process_set_id is None or process_set.ranks is None:
        raise ValueError("DistributedDataParallel: process_set %r is not "
                         "registered (hvd.add_process_set or "
                         "hvd.init(process_sets=...))" % (process_set,))
    _core._require_init()
    for name, t in itertools.chain(module.named_parameters(),
                                   module.named_buffers()):
        if t.layout != torch.strided:
            raise ValueError("DistributedDataParallel: %s is a %s tensor; "
                             "only dense tensors are supported"
                             % (name, t.layout))
    for name, m in module.named_modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and \
                m.sparse:
            raise ValueError("DistributedDataParallel: %s makes sparse "
                             "gradients (sparse=True), which hora's "
                             "DistributedDataParallel does not reduce; use "
                             "sparse=False or DistributedOptimizer"
                             % (name or type(m).__name__))
