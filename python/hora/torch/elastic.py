"""hora.torch.elastic -- Horovod's elastic API for PyTorch (hvd.elastic).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader):
                ...
                state.commit()

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer,
                                   epoch=0, batch=0)
    train(state)

TorchState keeps the model's and the optimizer's state_dict, an
ElasticSampler's progress and any other attributes; commit() saves them,
restore() goes back, sync() makes every rank's rank 0's (the sampler's:
the union of every rank's processed samples; after a rank was started
again, the first other rank's: hora.elastic.sync_root()). See hora.elastic
for what the runtime does today when a rank or host is lost.
"""
import copy
import math

import torch

from hora.elastic import (HostsUpdatedInterrupt, HostUpdateResult,  # noqa: F401
                          ObjectState, State, run_fn, sync_root)
from hora.torch.functions import (allgather_object, broadcast_object,
                                  broadcast_optimizer_state,
                                  broadcast_parameters)
from hora.torch.mpi_ops import init, rank, shutdown, size

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "HostUpdateResult"]


def _reset():
    shutdown()
    init()


def run(func):
    """Decorates a training function func(state, ...) as Horovod's
    hvd.elastic.run does (see hora.elastic.run_fn)."""
    return run_fn(func, _reset)


class _Handler:
    """One value of a TorchState with a state_dict (a model, an optimizer,
    an ElasticSampler): saved and restored as its state_dict, synced by
    sync_fn(value)."""

    def __init__(self, value, sync_fn):
        self.value = value
        self._sync_fn = sync_fn
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self._sync_fn(self.value)

    def set_value(self, value):
        self.value = value
        self.save()


def _sync_sampler(sampler):
    # every rank's processed samples, then the root's state with them
    everyone = allgather_object(sampler.processed_indices,
                                name="hora.elastic.sampler.indices")
    st = sampler.state_dict()
    st["processed_indices"] = set().union(*everyone)
    sampler.load_state_dict(
        broadcast_object(st, root_rank=sync_root(),
                         name="hora.elastic.sampler.state"))


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _Handler(value, lambda m: broadcast_parameters(
            m.state_dict(), root_rank=sync_root()))
    if isinstance(value, torch.optim.Optimizer):
        return _Handler(value, lambda o: broadcast_optimizer_state(
            o, root_rank=sync_root()))
    if isinstance(value, ElasticSampler):
        return _Handler(value, _sync_sampler)
    return None


class TorchState(ObjectState):
    """The elastic state of a PyTorch job: model and optimizer (and any
    keyword values: an ElasticSampler, epoch, batch, ...). Models,
    optimizers and samplers are saved as state_dicts; other values as deep
    copies."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            h = _handler_for(v)
            if h is not None:
                handlers[k] = h
            elif v is not None or k not in ("model", "optimizer"):
                rest[k] = v
        self._handlers = handlers
        super().__init__(bcast_object=lambda obj: broadcast_object(
                             obj, root_rank=sync_root(),
                             name="hora.elastic.state"),
                         get_rank=rank, **rest)

    def __getattr__(self, name):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            return handlers[name].value
        raise AttributeError(name)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers:
            handlers[name].set_value(value)
        else:
            super().__setattr__(name, value)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        """Every rank takes rank 0's state (sync_root()'s; the sampler:
        every rank's processed samples), which becomes what restore()
        returns to."""
        for h in self._handlers.values():
            h.sync()
            h.save()
        super().sync()

    def snapshot(self):
        return {"handlers": {k: h._saved for k, h in self._handlers.items()},
                "values": super().snapshot()}

    def load_snapshot(self, snap):
        for k, saved in snap["handlers"].items():
            if k in self._handlers:
                self._handlers[k]._saved = saved
                self._handlers[k].restore()
        super().load_snapshot(snap["values"])


class ElasticSampler(torch.utils.data.Sampler):
    """A DistributedSampler that knows which samples were processed in the
    current epoch: record_batch(batch_idx, batch_size) (or
    record_indices(indices)) after each step. After a reset, or a sync()
    of its TorchState, the epoch goes on with the samples no rank has
    processed, split anew among the ranks, so none is repeated or skipped.
    set_epoch() starts an epoch (reshuffled with seed + epoch)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing processed yet."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Batch batch_idx (of batch_size samples) of this epoch's
        iteration is done."""
        lo = batch_idx * batch_size
        self.record_indices(self.indices[lo:lo + batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    @property
    def processed_num(self):
        return len(self.processed_indices)

    def state_dict(self):
        return {"epoch": self.epoch,
                "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.processed_indices = set(state["processed_indices"])
        self.reset()

    def reset(self):
        """Splits what is left of the epoch among the ranks (the job's size
        and this rank, as they are now)."""
        self.num_replicas = size()
        self.rank = rank()
        self.remaining_indices = [i for i in range(len(self.dataset))
                                  if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) /
                                         self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(indices), generator=g).tolist()
            indices = [indices[i] for i in order]
        base = list(indices)  # padded to split evenly, as DistributedSampler
        while base and len(indices) < self.total_size:
            indices += base[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
