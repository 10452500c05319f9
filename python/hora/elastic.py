"""hora.elastic -- the framework-independent part of Horovod's elastic API.

A State holds what training needs to resume: commit() saves it (and is
where ranks learn, all at once, that the job's hosts changed), restore()
goes back to the last commit, sync() makes every rank's copy rank 0's.
run_fn() wraps a training function so that a HoraInternalError (a rank or
host lost) restores the last commit, re-initialises hora and calls the
function again, and a HostsUpdatedInterrupt re-initialises and goes on
from the current state.

What the runtime does today: a job does not re-form yet when a rank or a
host is lost (horarun ends it, with the failure's exit status), so the
re-initialisation after a HoraInternalError fails and the error reaches
the caller, naming what was lost; nothing announces new hosts yet. The
states, their commit/restore/sync and the sampler work in every job.
"""
import copy
import functools
import queue


class HostsUpdatedInterrupt(RuntimeError):
    """The job's hosts changed (at a commit() or check_host_updates()):
    run() re-initialises and calls the training function again, without a
    sync when hosts were only added (skip_sync)."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts were updated")
        self.skip_sync = skip_sync


class HostUpdateResult:
    """What a host update did (bits): hosts added, removed, or both."""
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added


class State:
    """Base of the elastic states. bcast_object(obj) -> rank 0's obj;
    get_rank() -> this rank."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions run (in order) after each reset, before training goes
        on: e.g. to scale the learning rate to the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Called by the runtime when hosts were added or removed."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state (restore() comes back here), then raises
        HostsUpdatedInterrupt on every rank at once if the hosts changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt, on every rank at once, when the
        job's hosts changed since the last check: rank 0's view of the
        updates is broadcast, so all ranks agree."""
        last = prev = self._last_updated_timestamp
        update = HostUpdateResult.no_update
        while not self._host_messages.empty():
            timestamp, res = self._host_messages.get()
            if timestamp > last:
                last = timestamp
                update |= res
        prev, self._last_updated_timestamp, update = \
            self._bcast_object((prev, last, update))
        if self._last_updated_timestamp > prev:
            raise HostsUpdatedInterrupt(update == HostUpdateResult.added)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """A state of plain Python attributes (kwargs): state.epoch, state.batch.
    save() keeps deep copies, sync() broadcasts rank 0's values."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        new_state = {}
        for attr in self._saved_state.keys():
            new_state[attr] = copy.deepcopy(getattr(self, attr))
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


def run_fn(func, reset):
    """The elastic loop around func(state, ...): sync, run; on
    HoraInternalError restore the last commit, reset (re-initialise hora)
    and run again; on HostsUpdatedInterrupt reset and run again (syncing
    unless only hosts were added). A reset that fails (the job did not
    re-form) ends it with that error."""
    from hora import HoraInternalError

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HoraInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()
    return wrapper
