"""_links.py -- what a worker needs to see the bytes its host's horad
sends to the other hosts (/metrics, the kernel's count), and the knobs
the job was given under either name."""
import os
import re
import time
import urllib.request

_SENT = re.compile(r'^hora_link_sent_bytes_total\{[^}]*peer="([^"]*)"\} '
                   r'(\d+)', re.M)


def knob(name):
    """HORA_<name>, else HOROVOD_<name>, else ""."""
    return os.environ.get("HORA_" + name) or \
        os.environ.get("HOROVOD_" + name) or ""


def sent_to(port):
    """Bytes this host's horad has sent to each other host, by name."""
    url = "http://127.0.0.1:%d/metrics" % port
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {h: int(v) for h, v in _SENT.findall(text)}


def measured_to(hvd, port, fn):
    """fn()'s result and the bytes this host sent to each other host
    meanwhile (local rank 0 reads; {} elsewhere). Every rank calls it."""
    hvd.barrier()
    before = sent_to(port) if hvd.local_rank() == 0 else {}
    out = fn()
    hvd.barrier()
    time.sleep(0.3)  # the last segments acknowledged
    after = sent_to(port) if hvd.local_rank() == 0 else {}
    return out, {h: after[h] - before.get(h, 0) for h in after}


def measured(hvd, port, fn):
    """fn()'s result and the bytes this host sent in all (0 but on local
    rank 0)."""
    out, to = measured_to(hvd, port, fn)
    return out, sum(to.values())
