"""elastic.py -- hora.torch.elastic (Horovod's elastic API) in a job:

  state    TorchState of a model, an optimizer and plain values: sync()
           makes every rank's rank 0's (and what restore() returns to),
           restore() undoes changes since the last commit, commit() keeps
           them
  sampler  ElasticSampler: records, commit and restore of the processed
           samples; after sync() the epoch goes on with exactly the
           samples no rank has processed, split among the ranks, none
           twice; set_epoch() starts over
  hosts    run(): a host update announced on rank 0 only reaches every rank
           at the next commit() (HostsUpdatedInterrupt everywhere at once);
           run() re-initialises hora and calls the function again (no
           sync: hosts only added)
  failure  run(): ranks that disagree about an allreduce get
           HoraInternalError; run() restores the last commit,
           re-initialises and calls again, and the second call ends it
Run by test_elastic.py under horarun (2 and 3 ranks) and alone."""
import sys

import torch

import hora.torch as hvd
from _check import Checker

hvd.init()
r, n = hvd.rank(), hvd.size()
what = sys.argv[1] if len(sys.argv) > 1 else "state"
c = Checker("elastic " + what, r, n)
E = hvd.elastic


def weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


if what == "state":
    torch.manual_seed(100 + r)  # different weights on every rank
    model = torch.nn.Linear(3, 2).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = E.TorchState(model=model, optimizer=opt, epoch=5 + r,
                         extra={"k": [r]})
    state.sync()
    everyone = hvd.allgather_object(weights(model).tolist())
    c.ok(all(w == everyone[0] for w in everyone),
         "after sync every rank has the same weights")
    c.ok(state.epoch == 5 and state.extra == {"k": [0]},
         "after sync the values are rank 0's: %r %r"
         % (state.epoch, state.extra))
    synced = weights(model).clone()
    synced_opt = {k: {kk: vv.clone() if torch.is_tensor(vv) else vv
                      for kk, vv in v.items()}
                  for k, v in opt.state_dict()["state"].items()}
    # a step, then restore: back to the synced state
    model(torch.ones(4, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    state.epoch = 6
    state.extra["k"].append(9)
    c.ok(not torch.equal(weights(model), synced), "the step changed weights")
    state.restore()
    c.ok(torch.equal(weights(model), synced), "restore: the synced weights")
    c.ok(state.epoch == 5 and state.extra == {"k": [0]},
         "restore: the synced values %r %r" % (state.epoch, state.extra))
    st = opt.state_dict()["state"]
    c.ok(set(st) == set(synced_opt) and
         all(torch.equal(st[k]["momentum_buffer"],
                         synced_opt[k]["momentum_buffer"])
             if st[k].get("momentum_buffer") is not None
             else synced_opt[k].get("momentum_buffer") is None
             for k in st),
         "restore: the optimizer's state as synced")
    # a step, commit, another step, restore: back to the commit
    model(torch.ones(4, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    state.epoch = 7
    state.commit()
    committed = weights(model).clone()
    momentum = {k: v["momentum_buffer"].clone()
                for k, v in opt.state_dict()["state"].items()}
    model(torch.ones(4, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    state.epoch = 8
    state.restore()
    c.ok(torch.equal(weights(model), committed), "restore: the committed weights")
    c.ok(state.epoch == 7, "restore: epoch %r, committed 7" % state.epoch)
    st = opt.state_dict()["state"]
    c.ok(set(st) == set(momentum) and
         all(torch.equal(st[k]["momentum_buffer"], momentum[k])
             for k in momentum), "restore: the committed momentum")
    # assigning a new model keeps it as the state's
    other = torch.nn.Linear(3, 2).double()
    state.model = other
    c.ok(state.model is other, "a new model becomes the state's")

elif what == "sampler":
    data = list(range(37))  # not a multiple of the ranks or the batch
    sampler = E.ElasticSampler(data, shuffle=True, seed=3)
    state = E.TorchState(sampler=sampler)
    state.sync()
    bs = 3
    sampler.set_epoch(1)
    mine = list(iter(sampler))
    c.ok(len(mine) == len(sampler) == (37 + n - 1) // n,
         "each rank gets its share: %d of 37" % len(mine))
    shares = hvd.allgather_object(sorted(set(mine)))
    c.ok(set().union(*[set(s) for s in shares]) == set(data),
         "the shares cover every sample")
    sampler.record_batch(0, bs)
    state.commit()
    sampler.record_batch(1, bs)
    c.ok(sampler.processed_num == 2 * bs, "two batches recorded")
    state.restore()
    c.ok(sampler.processed_num == bs, "restore: one batch, as committed")
    sampler.record_batch(1, bs)
    done_here = set(sampler.processed_indices)
    state.commit()
    state.sync()
    everyone = hvd.allgather_object(sorted(done_here))
    processed = set().union(*[set(s) for s in everyone])
    c.ok(sampler.processed_indices == processed,
         "sync: every rank knows every rank's processed samples")
    rest = list(iter(sampler))
    left = hvd.allgather_object(rest)
    flat = [i for part in left for i in part]
    c.ok(set(flat) == set(data) - processed,
         "after sync the ranks share exactly what is left")
    c.ok(len(set(flat)) == len(set(data)) - len(processed) and
         len(flat) - len(set(flat)) < n,
         "none twice (but the padding of the last split)")
    sampler.set_epoch(2)
    c.ok(sampler.processed_num == 0 and len(sampler) == (37 + n - 1) // n,
         "set_epoch starts over")

elif what == "hosts":
    calls = []
    state = E.ObjectState(
        bcast_object=lambda o: hvd.broadcast_object(o, 0, name="st"),
        get_rank=hvd.rank, step=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @E.run
    def train(st):
        calls.append(st.step)
        st.step += 1
        if len(calls) == 1 and hvd.rank() == 0:
            st.on_hosts_updated(1.0, E.HostUpdateResult.added)
        st.commit()  # every rank raises here on the first call
        return "done"

    res = train(state)
    c.ok(res == "done", "run returned the function's value")
    c.ok(calls == [0, 1], "called twice, going on from the state: %r" % calls)
    c.ok(resets == [n], "one reset, hora initialised again: %r" % resets)
    c.ok(hvd.is_initialized() and hvd.size() == n, "hora is up again")

elif what == "failure":
    calls = []
    state = E.ObjectState(
        bcast_object=lambda o: hvd.broadcast_object(o, 0, name="st"),
        get_rank=hvd.rank, epoch=0)

    @E.run
    def train(st):
        calls.append(st.epoch)
        st.epoch = 3
        st.commit()
        st.epoch = 4  # not committed: the failure takes it back
        if len(calls) == 1 and n > 1:
            # ranks that disagree: HoraInternalError on every rank
            hvd.allreduce(torch.zeros(2 + (hvd.rank() == 0)), name="bad")
        return st.epoch

    res = train(state)
    if n > 1:
        c.ok(calls == [0, 3], "called again from the commit: %r" % calls)
    c.ok(res == 4, "the last call's result %r" % res)
    c.ok(hvd.is_initialized() and hvd.size() == n, "hora is up again")

c.done()
