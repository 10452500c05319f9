"""MNIST-style data-parallel training with hora.torch (after Horovod's
examples/pytorch/pytorch_mnist.py).

    python examples/pytorch/pytorch_mnist.py                 # one process
    horarun -np 2 python examples/pytorch/pytorch_mnist.py   # two ranks

Nothing is downloaded. By default the data is a synthetic 10-class set of
28x28 grey images, generated deterministically from --data-seed: each class
is a smooth random template (a few strokes), and every sample is its class's
template shifted by up to 2 pixels, scaled, and noised, so a small CNN has
something real to learn. With --data-dir pointing at an existing torchvision
MNIST folder (MNIST/raw or MNIST/processed inside it), the real MNIST is used
instead (download=False).

Each rank trains on its shard (DistributedSampler), gradients are averaged
by hvd.DistributedOptimizer, the learning rate is scaled by the number of
ranks, and the epoch's training loss and the test metrics are averaged over
the ranks with hvd.allreduce; rank 0 prints them.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import hora.torch as hvd

parser = argparse.ArgumentParser(
    description='PyTorch MNIST-style example',
    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--batch-size', type=int, default=64, metavar='N',
                    help='input batch size for training')
parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N',
                    help='input batch size for testing')
parser.add_argument('--epochs', type=int, default=5, metavar='N',
                    help='number of epochs to train')
parser.add_argument('--lr', type=float, default=0.01, metavar='LR',
                    help='learning rate (scaled by the number of ranks)')
parser.add_argument('--momentum', type=float, default=0.5, metavar='M',
                    help='SGD momentum')
parser.add_argument('--no-cuda', action='store_true', default=False,
                    help='disables CUDA training')
parser.add_argument('--seed', type=int, default=42, metavar='S',
                    help='random seed')
parser.add_argument('--log-interval', type=int, default=10, metavar='N',
                    help='how many batches to wait before logging training '
                         'status')
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')
parser.add_argument('--gradient-predivide-factor', type=float, default=1.0,
                    help='apply gradient predivide factor in optimizer')
parser.add_argument('--data-dir',
                    help='directory holding torchvision\'s MNIST (never '
                         'downloaded); synthetic data when not given')
parser.add_argument('--train-size', type=int, default=6000,
                    help='synthetic training samples')
parser.add_argument('--test-size', type=int, default=1000,
                    help='synthetic test samples')
parser.add_argument('--data-seed', type=int, default=1234,
                    help='seed of the synthetic data set')
parser.add_argument('--num-threads', type=int, default=0,
                    help='torch.set_num_threads per rank (0: 1 when several '
                         'ranks share the host, else torch\'s default)')


def synthetic_mnist(n, seed, templates=None):
    """n images (n, 1, 28, 28) and labels, deterministic in seed."""
    g = torch.Generator().manual_seed(seed)
    if templates is None:
        tg = torch.Generator().manual_seed(7)  # the classes are fixed
        t = torch.zeros(10, 1, 32, 32)
        for c in range(10):
            for _ in range(4):  # four random strokes per class
                r0, c0 = torch.randint(6, 26, (2,), generator=tg).tolist()
                dr, dc = torch.randint(-1, 2, (2,), generator=tg).tolist()
                for k in range(10):
                    r, cc = r0 + dr * k, c0 + dc * k
                    if 0 <= r < 32 and 0 <= cc < 32:
                        t[c, 0, max(r - 1, 0):r + 2, max(cc - 1, 0):cc + 2] = 1
        templates = F.avg_pool2d(t, 3, stride=1, padding=1)
    labels = torch.randint(0, 10, (n,), generator=g)
    shifts = torch.randint(0, 5, (n, 2), generator=g)
    scale = 0.7 + 0.6 * torch.rand(n, generator=g)
    images = torch.empty(n, 1, 28, 28)
    for i in range(n):
        r, c = shifts[i].tolist()
        images[i] = templates[labels[i], :, r:r + 28, c:c + 28] * scale[i]
    images += 0.5 * torch.randn(images.shape, generator=g)
    images = (images - 0.1307) / 0.3081
    return torch.utils.data.TensorDataset(images, labels)


def datasets(args):
    if args.data_dir:
        from torchvision import datasets as tvd, transforms
        tf = transforms.Compose([transforms.ToTensor(),
                                 transforms.Normalize((0.1307,), (0.3081,))])
        return (tvd.MNIST(args.data_dir, train=True, download=False,
                          transform=tf),
                tvd.MNIST(args.data_dir, train=False, download=False,
                          transform=tf))
    return (synthetic_mnist(args.train_size, args.data_seed),
            synthetic_mnist(args.test_size, args.data_seed + 1))


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val, dtype=torch.float64)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def train(epoch, model, optimizer, train_loader, train_sampler, args):
    model.train()
    # set epoch to sampler for shuffling.
    train_sampler.set_epoch(epoch)
    total, count = 0.0, 0
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.cuda:
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(data)
        count += len(data)
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            # use train_sampler to determine the number of examples in
            # this worker's partition.
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_sampler),
                100. * batch_idx / len(train_loader), loss.item()),
                flush=True)
    # the epoch's mean training loss over all ranks
    train_loss = metric_average(total / max(count, 1), 'avg_train_loss')
    if hvd.rank() == 0:
        print('Train Epoch: {} average loss: {:.4f}'.format(epoch, train_loss),
              flush=True)
    return train_loss


def test(model, test_loader, test_sampler, args):
    model.eval()
    test_loss = 0.
    test_accuracy = 0.
    with torch.no_grad():
        for data, target in test_loader:
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            output = model(data)
            # sum up batch loss
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            # get the index of the max log-probability
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(
                target.data.view_as(pred)).cpu().float().sum().item()

    # use test_sampler to determine the number of examples in
    # this worker's partition.
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)

    # average metric values across workers.
    test_loss = metric_average(test_loss, 'avg_loss')
    test_accuracy = metric_average(test_accuracy, 'avg_accuracy')

    # print output only on first rank.
    if hvd.rank() == 0:
        print('Test set: Average loss: {:.4f}, Accuracy: {:.2f}%'.format(
            test_loss, 100. * test_accuracy), flush=True)
    return test_loss, test_accuracy


def main():
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()

    # initialize hora.
    hvd.init()
    torch.manual_seed(args.seed)

    if args.cuda:
        # pin GPU to local rank.
        torch.cuda.set_device(hvd.local_rank())
        torch.cuda.manual_seed(args.seed)

    # limit # of CPU threads to be used per worker.
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    elif hvd.local_size() > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1)
                                  // hvd.local_size()))

    kwargs = {'num_workers': 1, 'pin_memory': True} if args.cuda else {}
    train_dataset, test_dataset = datasets(args)

    # partition dataset among workers using DistributedSampler
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, sampler=train_sampler,
        **kwargs)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(
        test_dataset, batch_size=args.test_batch_size, sampler=test_sampler,
        **kwargs)

    model = Net()

    # By default, scale learning rate by the number of ranks.
    lr_scaler = hvd.size()

    if args.cuda:
        model.cuda()

    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler,
                          momentum=args.momentum)

    # broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce \
        else hvd.Compression.none

    # wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=compression, op=hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor)

    if hvd.rank() == 0:
        print('Training on {} rank(s): {} training and {} test samples{}'
              .format(hvd.size(), len(train_dataset), len(test_dataset),
                      '' if args.data_dir else ' (synthetic)'), flush=True)
    loss, acc = None, None
    for epoch in range(1, args.epochs + 1):
        train(epoch, model, optimizer, train_loader, train_sampler, args)
        loss, acc = test(model, test_loader, test_sampler, args)
    if hvd.rank() == 0 and acc is not None:
        print('Final test accuracy: {:.2f}% (loss {:.4f}) after {} epoch(s) '
              'on {} rank(s)'.format(100. * acc, loss, args.epochs,
                                     hvd.size()), flush=True)


if __name__ == '__main__':
    main()
