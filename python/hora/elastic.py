"""hora.elastic -- the framework-independent part of Horovod's elastic API.

A State holds what training needs to resume: commit() saves it (and is
where ranks learn, all at once, that the job's hosts changed), restore()
goes back to the last commit, sync() makes every rank's copy rank 0's.
run_fn() wraps a training function so that a HoraInternalError (a rank or
host lost) restores the last commit, re-initialises hora and calls the
function again, and a HostsUpdatedInterrupt re-initialises and goes on
from the current state.

What the runtime does: with --min-np, --max-np or --host-discovery-
script, a rank or host lost makes horarun leave the failed host out and
the daemons of the others re-form the job in place: their ranks'
HoraInternalError restores the last commit and the reset's hora.init()
waits, then returns with the rank and size of the re-formed job, and the
sync gives every rank the new rank 0's state. Where that cannot be (too
few ranks left, --elastic-in-place 0), horarun starts the job anew on the
hosts still usable, and its ranks take up the last commit. For that,
commit() also writes the
state into HORA_ELASTIC_DIR (set by horarun, on each rank's host: one
file per rank, replaced at each commit; the directory must be this
user's alone), and run() begins from the job's newest commit, which the
rank whose host holds it sends to every rank. In a job that is started
again, a HoraInternalError's reset fails (its job is ending) and the rank
exits with it; the next start goes on. When the discovery script's hosts
change, horarun announces it (hora.hosts_updated()); the next commit()
raises HostsUpdatedInterrupt on every rank, and run() keeps the state for
the next start, which horarun begins on the new hosts.

With horarun --restart-failed-ranks, a rank that crashes is started again
by its horad instead: the others' reset re-initialises in place (their
processes live on), and the sync after it takes the state from the first
rank that was not started afresh (sync_root()).
"""
import copy
import functools
import glob
import os
import pickle
import queue
import stat
import tempfile
import time
import warnings

# A rank's exit status when it leaves a start of an elastic job for the
# next one, which horarun begins on the updated hosts (horarun(1)).
RESTART_EXIT = 75

# The rank whose state sync() gives every rank: 0, or with
# --restart-failed-ranks the first rank that was not started afresh.
_root = 0


def sync_root():
    """The rank sync() takes the state from (run() chooses it)."""
    return _root


def _restarted():
    """True in a rank horad started again (--restart-failed-ranks): its
    state comes from the others."""
    try:
        return int(os.environ.get("HORA_RANK_RESTARTS", "0")) > 0
    except ValueError:
        return False


def _choose_root(fresh):
    """Sets sync_root(): with --restart-failed-ranks (HORA_RESTART_FAILED_
    RANKS, the same on every rank), the first rank that holds the job's
    state, every rank saying whether it was started afresh; else 0."""
    global _root
    try:
        on = int(os.environ.get("HORA_RESTART_FAILED_RANKS", "0")) > 0
    except ValueError:
        on = False
    if not on:
        _root = 0
        return
    from hora import allgather_object
    flags = allgather_object(bool(fresh), name="hora.elastic.sync.root")
    _root = next((r for r, f in enumerate(flags) if not f), 0)


def _commit_dir():
    """The directory horarun gives an elastic job's commits, or None. Where
    horarun's temporary directory does not exist on this host, the same
    name in this host's."""
    d = os.environ.get("HORA_ELASTIC_DIR")
    if not d:
        return None
    if not os.path.isdir(os.path.dirname(d)):
        d = os.path.join(tempfile.gettempdir(), os.path.basename(d))
    return d


def _own_dir(d):
    """True when d is a directory of this user's that no one else may
    read or write (commits are unpickled: only our own are trusted)."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or
            st.st_mode & 0o077):
        warnings.warn("hora.elastic: %s is not a private directory of this "
                      "user's; commits are not kept there" % d)
        return False
    return True


def _commit_start():
    try:
        return int(os.environ.get("HORA_ELASTIC_RESETS", "0"))
    except ValueError:
        return 0


def _commits_here(d):
    """This host's commits in d, newest first: [((start, seq), path)]. A
    commit's name holds its key: commit.START.SEQ.rRANK.pkl."""
    found = []
    for path in glob.glob(os.path.join(d, "commit.*.*.r*.pkl")):
        parts = os.path.basename(path).split(".")
        try:
            found.append(((int(parts[1]), int(parts[2])), path))
        except (IndexError, ValueError):
            continue
    found.sort(reverse=True)
    return found


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
        self._commits = 0
        self._commit_path = None
        self._runtime_updates = 0

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
        """Saves the state (restore() comes back here; in an elastic job
        of horarun's, the next start too), then raises
        HostsUpdatedInterrupt on every rank at once if the hosts changed."""
        self.save()
        self._write_commit()
        self.check_host_updates()

    def _poll_runtime(self):
        """horarun's host updates (hora.hosts_updated()) as messages."""
        try:
            from hora import hosts_updated, is_initialized
            if not is_initialized():
                return
            n = hosts_updated()
        except Exception:  # no runtime to ask
            return
        if n > self._runtime_updates:
            self._runtime_updates = n
            stamp = max(time.time(), self._last_updated_timestamp + 1e-6)
            self.on_hosts_updated(stamp, HostUpdateResult.mixed)

    def _write_commit(self):
        d = _commit_dir()
        if d is None:
            return
        try:
            snap = self.snapshot()
        except NotImplementedError:
            return  # a State of the user's own: its commits stay in memory
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
        except OSError as e:
            warnings.warn("hora.elastic: cannot keep commits in %s: %s"
                          % (d, e))
            return
        if not _own_dir(d):
            return
        if self._commit_path is None and _restarted():
            # this rank's process before it was started again: its
            # commits, numbered further than this process's, go
            for old in glob.glob(os.path.join(
                    d, "commit.%d.*.r%d.pkl" % (_commit_start(),
                                                self._rank()))):
                try:
                    os.unlink(old)
                except OSError:
                    pass
        self._commits += 1
        path = os.path.join(d, "commit.%d.%d.r%d.pkl"
                            % (_commit_start(), self._commits, self._rank()))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        if self._commit_path and self._commit_path != path:
            try:
                os.unlink(self._commit_path)
            except OSError:
                pass
        self._commit_path = path

    def _read_commit(self):
        """Takes up the job's newest commit (of the latest start, then the
        latest of its commits) from the rank whose host holds it: every
        rank says what its host has, that rank sends it. True when one was
        taken up."""
        d = _commit_dir()
        if d is None:
            return False
        from hora import allgather_object, broadcast_object, rank
        here = _commits_here(d) if os.path.isdir(d) and _own_dir(d) else []
        keys = allgather_object(here[0][0] if here else None,
                                name="hora.elastic.commit.keys")
        have = [(k, -r) for r, k in enumerate(keys) if k is not None]
        if not have:
            return False
        root = -max(have)[1]
        snap = None
        if rank() == root:
            for _, path in here:
                try:
                    with open(path, "rb") as f:
                        snap = pickle.load(f)
                    break
                except Exception as e:  # torn: the next newest
                    warnings.warn("hora.elastic: commit %s cannot be read "
                                  "(%s); trying an older one" % (path, e))
        snap = broadcast_object(snap, root_rank=root,
                                name="hora.elastic.commit.state")
        if snap is None:
            return False
        try:
            self.load_snapshot(snap)
        except NotImplementedError:
            return False
        return True

    def _drop_commits(self):
        """The job is done: its commits on this host go (every rank
        first reaches this point, so that none is still writing)."""
        d = _commit_dir()
        if d is None:
            return
        self._bcast_object(None)
        if not os.path.isdir(d) or not _own_dir(d):
            return
        for path in glob.glob(os.path.join(d, "commit.*")):
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            os.rmdir(d)
        except OSError:
            pass

    def snapshot(self):
        """The committed state as one picklable value (ObjectState and
        TorchState have one; a State of one's own without it keeps its
        commits in memory only, and a later start of an elastic job begins
        from its initial values)."""
        raise NotImplementedError()

    def load_snapshot(self, snap):
        """Makes snap (a snapshot()) the committed and the current state."""
        raise NotImplementedError()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt, on every rank at once, when the
        job's hosts changed since the last check (horarun's announcements,
        and on_hosts_updated()'s): rank 0's view of the updates is
        broadcast, so all ranks agree."""
        self._poll_runtime()
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

    def snapshot(self):
        return self._saved_state

    def load_snapshot(self, snap):
        self._saved_state = dict(snap)
        self._set_attrs()


def run_fn(func, reset):
    """The elastic loop around func(state, ...): take up the newest commit
    of an earlier start (HORA_ELASTIC_DIR), sync, run; on
    HoraInternalError restore the last commit, reset (re-initialise hora)
    and run again; on HostsUpdatedInterrupt reset and run again (syncing
    unless only hosts were added). A reset that fails (the job did not
    re-form) ends it with that error. In an elastic job of horarun's
    (HORA_ELASTIC_DIR set), a HostsUpdatedInterrupt instead commits the
    current state and exits with RESTART_EXIT: horarun starts the job
    again on the updated hosts. Once func returns, the job's commits on
    this host are removed. With --restart-failed-ranks, a rank that
    crashed is started again by horad: the others' HoraInternalError
    resets as above (without a new process: hora_init() waits for it),
    and the sync that follows takes the state from the first rank that
    was not started afresh (sync_root()), the started one skipping the
    commits of earlier starts."""
    from hora import HoraInternalError

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        # a rank started again takes the others' state, not a commit
        fresh = _restarted()
        if not fresh:
            state._read_commit()  # a later start of an elastic job
        while True:
            try:
                if not skip_sync:
                    _choose_root(fresh)
                    state.sync()
                    fresh = False
                result = func(state, *args, **kwargs)
                state._drop_commits()
                return result
            except HoraInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                if _commit_dir() is not None:
                    # horarun starts the job again on the updated hosts:
                    # the state as it is now goes to that start
                    state.save()
                    state._write_commit()
                    raise SystemExit(RESTART_EXIT)
            reset()
            state.on_reset()
    return wrapper
