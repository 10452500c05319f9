"""Synthetic training benchmark for hora.torch (Horovod's
examples/pytorch/pytorch_synthetic_benchmark.py, with the same flags and
output, written against hora.torch).

    horarun -np 2 python examples/pytorch/pytorch_synthetic_benchmark.py \\
        --model resnet18 --image-size 64 --batch-size 16 --no-cuda --num-threads 1

Every step: zero_grad, forward on a fixed random batch, cross-entropy,
backward (gradients are allreduced by hora while backward runs), step.
Beyond Horovod's output it reports how much of the step time the ranks
spend waiting on hora: optimizer.step() is split into
optimizer.synchronize() (wait for the allreduces of the gradients) and
`with optimizer.skip_synchronize(): optimizer.step()` (the update), and the
time in synchronize() is summed over the timed steps, averaged over ranks.

--ddp wraps the model in hvd.DistributedDataParallel instead (a plain
optimizer; backward() returns with the gradients averaged, and the wait is
the time backward() spends waiting for the buckets' allreduces). --torch-ddp
runs torch.nn.parallel.DistributedDataParallel over gloo on the same ranks,
for comparison: the gloo process group is made from hora's rank and size,
on a free port of rank 0's address (127.0.0.1 when all ranks are on one
host) that rank 0 picks and broadcasts; its wait is not measured.
"""
import argparse
import os
import socket
import timeit

import numpy as np
import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import hora.torch as hvd

try:
    from torchvision import models
except ImportError:  # the built-in model still works
    models = None


class SmallCNN(nn.Module):
    """A small convnet for machines without torchvision (--model smallcnn)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


BUILTIN = {"smallcnn": SmallCNN}

# Benchmark settings
parser = argparse.ArgumentParser(
    description='PyTorch Synthetic Benchmark',
    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')
parser.add_argument('--model', type=str,
                    default='resnet50' if models is not None else 'smallcnn',
                    help='model to benchmark: a torchvision model name, or '
                         'smallcnn (built in)')
parser.add_argument('--batch-size', type=int, default=32,
                    help='input batch size')
parser.add_argument('--image-size', type=int, default=224,
                    help='height and width of the synthetic images')
parser.add_argument('--num-classes', type=int, default=1000,
                    help='number of classes of the synthetic labels')
parser.add_argument('--num-warmup-batches', type=int, default=10,
                    help='number of warm-up batches that don\'t count towards '
                         'benchmark')
parser.add_argument('--num-batches-per-iter', type=int, default=10,
                    help='number of batches per benchmark iteration')
parser.add_argument('--num-iters', type=int, default=10,
                    help='number of benchmark iterations')
parser.add_argument('--num-threads', type=int, default=0,
                    help='torch.set_num_threads for each rank (0: leave '
                         'torch\'s default)')
parser.add_argument('--no-cuda', action='store_true', default=False,
                    help='disables CUDA training')
parser.add_argument('--use-adasum', action='store_true', default=False,
                    help='use adasum algorithm to do reduction')
parser.add_argument('--ddp', action='store_true', default=False,
                    help='wrap the model in hvd.DistributedDataParallel '
                         'instead of using hvd.DistributedOptimizer')
parser.add_argument('--torch-ddp', action='store_true', default=False,
                    help='use torch.nn.parallel.DistributedDataParallel '
                         'over gloo on the same ranks, for comparison')

args = parser.parse_args()
args.cuda = not args.no_cuda and torch.cuda.is_available()
if args.ddp and args.torch_ddp:
    parser.error('--ddp and --torch-ddp exclude each other')
if (args.ddp or args.torch_ddp) and (args.fp16_allreduce or args.use_adasum):
    parser.error('--fp16-allreduce and --use-adasum apply to '
                 'DistributedOptimizer only')
if args.ddp and args.cuda:
    parser.error('--ddp: hora.torch.DistributedDataParallel trains on the '
                 'CPU only; add --no-cuda')
mode = 'ddp' if args.ddp else 'torch-ddp' if args.torch_ddp else 'optimizer'

if args.num_threads > 0:
    torch.set_num_threads(args.num_threads)

hvd.init()

if args.cuda:
    # pin GPU to local rank.
    torch.cuda.set_device(hvd.local_rank())

cudnn.benchmark = True

# Set up standard model.
if args.model in BUILTIN:
    model = BUILTIN[args.model](num_classes=args.num_classes)
elif models is not None and hasattr(models, args.model):
    model = getattr(models, args.model)(num_classes=args.num_classes)
else:
    raise SystemExit('unknown model %r: use a torchvision model name%s' % (
        args.model, '' if models is not None else ' (torchvision is not '
        'installed)') + ' or one of: ' + ', '.join(sorted(BUILTIN)))

if args.use_adasum and not hasattr(hvd, 'Adasum'):
    raise SystemExit('--use-adasum: this hora.torch has no Adasum')

# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size() if not args.use_adasum else 1

if args.cuda:
    # Move model to GPU.
    model.cuda()
    # If using GPU Adasum allreduce, scale learning rate by local_size.
    if args.use_adasum and hvd.nccl_built():
        lr_scaler = hvd.local_size()



def init_gloo():
    """torch.distributed over gloo on hora's ranks: rank 0 picks a free
    port on its own address (127.0.0.1 when every rank is on one host;
    else the address its host name resolves to, or $MASTER_ADDR when set)
    and broadcasts both."""
    import torch.distributed as dist
    where = None
    if hvd.rank() == 0:
        addr = os.environ.get('MASTER_ADDR')
        if not addr:
            addr = ('127.0.0.1' if hvd.local_size() == hvd.size() else
                    socket.gethostbyname(os.environ.get('HORA_HOSTNAME') or
                                         socket.gethostname()))
        with socket.socket() as s:
            s.bind((addr, 0))
            where = (addr, s.getsockname()[1])
    addr, port = hvd.broadcast_object(where, root_rank=0,
                                      name='benchmark.port')
    os.environ['MASTER_ADDR'] = addr
    os.environ['MASTER_PORT'] = str(port)
    dist.init_process_group('gloo', rank=hvd.rank(), world_size=hvd.size())


if mode == 'ddp':
    # broadcasts the parameters and buffers from rank 0
    model = hvd.DistributedDataParallel(model)
elif mode == 'torch-ddp':
    init_gloo()
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[hvd.local_rank()] if args.cuda else None)

optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

if mode == 'optimizer':
    # (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce \
        else hvd.Compression.none

    # wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=compression,
        op=hvd.Adasum if args.use_adasum else hvd.Average)

    # broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data
data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.LongTensor(args.batch_size).random_() % args.num_classes
if args.cuda:
    data, target = data.cuda(), target.cuda()

# seconds spent in optimizer.synchronize() (waiting on hora) and in whole
# steps, since the last reset
clock = {'wait': 0.0, 'step': 0.0}


def ddp_step():
    t0 = timeit.default_timer()
    waited = getattr(model, 'comm_wait_seconds', 0.0)
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()  # returns with the gradients averaged
    optimizer.step()
    if args.cuda:
        torch.cuda.synchronize()
    clock['wait'] += getattr(model, 'comm_wait_seconds', 0.0) - waited
    clock['step'] += timeit.default_timer() - t0


def benchmark_step():
    if mode != 'optimizer':
        return ddp_step()
    t0 = timeit.default_timer()
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    t1 = timeit.default_timer()
    optimizer.synchronize()
    if args.cuda:
        torch.cuda.synchronize()
    t2 = timeit.default_timer()
    with optimizer.skip_synchronize():
        optimizer.step()
    if args.cuda:
        torch.cuda.synchronize()
    t3 = timeit.default_timer()
    clock['wait'] += t2 - t1
    clock['step'] += t3 - t0


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end='\n' if nl else '', flush=True)


log('Model: %s' % args.model)
log('Data parallelism: %s' % {
    'optimizer': 'hvd.DistributedOptimizer',
    'ddp': 'hvd.DistributedDataParallel',
    'torch-ddp': 'torch.nn.parallel.DistributedDataParallel (gloo)'}[mode])
log('Batch size: %d' % args.batch_size)
device = 'GPU' if args.cuda else 'CPU'
log('Number of %ss: %d' % (device, hvd.size()))

# Warm-up
log('Running warmup...')
timeit.timeit(benchmark_step, number=args.num_warmup_batches)

# Benchmark
log('Running benchmark...')
clock['wait'] = clock['step'] = 0.0
img_secs = []
for x in range(args.num_iters):
    time = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log('Iter #%d: %.1f img/sec per %s' % (x, img_sec, device))
    img_secs.append(img_sec)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log('Img/sec per %s: %.1f +-%.1f' % (device, img_sec_mean, img_sec_conf))
log('Total img/sec on %d %s(s): %.1f +-%.1f' %
    (hvd.size(), device, hvd.size() * img_sec_mean,
     hvd.size() * img_sec_conf))

# Time waiting on hora, as a share of the step time (mean over ranks, and
# the largest rank's share).
mine = clock['wait'] / clock['step'] if clock['step'] > 0 else 0.0
shares = torch.zeros(hvd.size(), dtype=torch.float64)
shares[hvd.rank()] = mine
shares = hvd.allreduce(shares, name='benchmark.wait_share', op=hvd.Sum)
shares = shares.cpu().numpy()
steps = args.num_iters * args.num_batches_per_iter
if mode == 'torch-ddp':
    log('Wait on gloo: not measured (inside torch\'s backward())')
else:
    log('Wait on hora: %.1f%% of step time (mean over %d rank(s); max '
        '%.1f%%; %.1f ms of %.1f ms per step on rank 0)' %
        (100 * shares.mean(), hvd.size(), 100 * shares.max(),
         1000 * clock['wait'] / max(steps, 1),
         1000 * clock['step'] / max(steps, 1)))
if mode == 'torch-ddp':
    torch.distributed.destroy_process_group()
