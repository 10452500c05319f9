"""torch_allreduce.py -- hora.torch.allreduce_ (float32, Sum) on large
tensors, timed as allreduce_perf times the C path: for each size, -w warm-up
and -n timed operations one after the other, the mean time per operation
the maximum over ranks, busbw = size / time * 2 (n-1) / n.

    horarun -np 2 python3 benchmarks/torch_allreduce.py -b 1M -e 64M -f 4

Two kinds of tensor per size: "ordinary" (torch.empty: libhora adopts it
into the rank's shared segment at its first collective, then horad reduces
it where it lies; with --adopt-size 0 libhora copies it into the shared
arena and back each time, or streams it through the staging area in
chunks when it does not fit), and "arena" (hora.torch.arena_empty: horad
reduces it where it lies, as allreduce_perf's hora_alloc buffers). Rank 0
prints one table:
    size  ordinary us  busbw  arena us  busbw  arena/ordinary
With --cuda, a third kind: tensors on the rank's GPU (local rank modulo
the GPUs), staged by libhora through the arena; two more columns, and
cuda/ordinary.
"""
import argparse
import sys
import time

import torch

import hora.torch as hvd


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def timed(t, name, warm, iters):
    for i in range(warm):
        hvd.allreduce_(t, name=name, op=hvd.Sum)
    t0 = time.perf_counter()
    for i in range(iters):
        hvd.allreduce_(t, name=name, op=hvd.Sum)
    us = (time.perf_counter() - t0) / iters * 1e6
    worst = torch.tensor([us], dtype=torch.float64)
    hvd.allreduce_(worst, op=hvd.Max, name=name + ".time")
    return float(worst[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-b", type=size_arg, default=1 << 20)
    ap.add_argument("-e", type=size_arg, default=64 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--cuda", action="store_true",
                    help="also time tensors on the rank's GPU")
    a = ap.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    n = hvd.size()
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0
    dev = None
    if a.cuda:
        dev = torch.device("cuda",
                           hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    if hvd.rank() == 0:
        print("# hora.torch.allreduce_, float32 sum, %d ranks" % n)
        print("%12s %13s %9s %13s %9s %9s%s"
              % ("size", "ordinary(us)", "busbw", "arena(us)", "busbw",
                 "ratio", "" if dev is None else
                 " %13s %9s %9s" % ("cuda(us)", "busbw", "cuda/ord")))
    size = a.b
    while size <= a.e:
        count = max(size // 4, 1)
        plain = torch.empty(count, dtype=torch.float32).fill_(hvd.rank())
        t_plain = timed(plain, "tb.plain.%d" % size, a.w, a.n)
        del plain
        arena = hvd.arena_empty(count, dtype=torch.float32)
        arena.fill_(hvd.rank())
        t_arena = timed(arena, "tb.arena.%d" % size, a.w, a.n)
        ok = bool((arena == arena[0]).all())
        del arena
        extra = ""
        bw = lambda us: size / us / 1e3 * factor  # GB/s
        if dev is not None:
            g = torch.empty(count, dtype=torch.float32,
                            device=dev).fill_(hvd.rank())
            t_cuda = timed(g, "tb.cuda.%d" % size, a.w, a.n)
            ok = ok and bool((g == g[0]).all())
            del g
            extra = " %13.1f %9.2f %9.2f" % (t_cuda, bw(t_cuda),
                                             t_cuda / t_plain)
        if hvd.rank() == 0:
            print("%12d %13.1f %9.2f %13.1f %9.2f %9.2f%s%s"
                  % (size, t_plain, bw(t_plain), t_arena, bw(t_arena),
                     t_plain / t_arena, extra, "" if ok else "  WRONG"),
                  flush=True)
        size *= a.f
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
