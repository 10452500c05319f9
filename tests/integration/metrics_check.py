"""metrics_check.py -- scrapes horad's /metrics during a job of it_late and
checks it with Prometheus' own text parser (prometheus_client).

usage: metrics_check.py ADDR PORT OPS COUNT SLOW NRANKS [--edges]
                        [--member] [--peers N]
  OPS allreduces of COUNT float32s and one broadcast of 10 int32s were
  run by NRANKS ranks, rank SLOW late each time (it_late). With --edges,
  also what the server answers to other paths, other methods, garbage,
  and idle connections. With --member, the host does not coordinate the
  job (another host of a multi-host job): it counts no lateness. With
  --peers N, it has links to N other hosts, up, that carried at least
  the allreduces' bytes (of 4 KiB or less: as small allreduces' parts or
  results, with the negotiation).
Exits 0 when every check passed, 1 otherwise (each failure printed)."""
import socket
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL: " + what)


def raw(addr, port, data, timeout=5):
    s = socket.create_connection((addr, port), timeout=timeout)
    if data:
        s.sendall(data)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    s.close()
    return got


def scrape(addr, port):
    url = "http://%s:%d/metrics" % (addr, port)
    with urllib.request.urlopen(url, timeout=10) as r:
        ctype = r.headers.get("Content-Type", "")
        return r.status, ctype, r.read().decode()


def samples(text):
    out = {}
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            check(key not in out, "series %s given twice" % (key,))
            out[key] = s.value
    return out, types


def get(sm, name, **labels):
    want = set(labels.items())
    vals = [v for (n, ls), v in sm.items() if n == name and want <= set(ls)]
    return vals


def main():
    addr, port = sys.argv[1], int(sys.argv[2])
    ops, count, slow, nranks = map(int, sys.argv[3:7])
    edges = "--edges" in sys.argv[7:]
    member = "--member" in sys.argv[7:]
    peers = 0
    if "--peers" in sys.argv[7:]:
        peers = int(sys.argv[sys.argv.index("--peers") + 1])
    if edges:
        # idle and half-sent connections first: they must not keep a
        # scraper out
        idle = [socket.create_connection((addr, port)) for _ in range(20)]
        idle[0].sendall(b"GET /metr")
    status, ctype, text = scrape(addr, port)
    check(status == 200, "status %d" % status)
    check(ctype.startswith("text/plain; version=0.0.4"),
          "content type %r" % ctype)
    sm, types = samples(text)
    for fam, typ in (("hora_operations", "counter"),
                     ("hora_operation_bytes", "counter"),
                     ("hora_operation_latency_seconds", "histogram"),
                     ("hora_negotiation_seconds", "histogram"),
                     ("hora_rank_lateness_seconds", "histogram"),
                     ("hora_rank_last", "counter"),
                     ("hora_deadlocks", "counter"),
                     ("hora_stall_warnings", "counter"),
                     ("hora_operations_pending", "gauge")):
        check(types.get(fam) == typ,
              "family %s: type %r, expected %s" % (fam, types.get(fam), typ))
    ar = dict(collective="allreduce", dtype="float32", comm="0")
    bc = dict(collective="broadcast", dtype="int32", comm="0")
    check(get(sm, "hora_operations_total", **ar) == [ops],
          "allreduces counted: %s, expected %d"
          % (get(sm, "hora_operations_total", **ar), ops))
    check(get(sm, "hora_operations_total", **bc) == [1],
          "broadcasts counted: %s" % get(sm, "hora_operations_total", **bc))
    check(get(sm, "hora_operation_bytes_total", **ar) == [ops * count * 4],
          "allreduce bytes: %s, expected %d"
          % (get(sm, "hora_operation_bytes_total", **ar), ops * count * 4))
    check(get(sm, "hora_operation_bytes_total", **bc) == [40],
          "broadcast bytes: %s" % get(sm, "hora_operation_bytes_total", **bc))
    check(get(sm, "hora_operation_failures_total", **ar) == [0],
          "allreduce failures")
    lat = get(sm, "hora_operation_latency_seconds_count",
              collective="allreduce")
    check(lat == [ops], "latency count %s" % lat)
    inf = get(sm, "hora_operation_latency_seconds_bucket",
              collective="allreduce", le="+Inf")
    check(inf == [ops], "latency +Inf bucket %s" % inf)
    nego = get(sm, "hora_negotiation_seconds_count", collective="allreduce")
    check(nego == [ops], "negotiation count %s" % nego)
    meas = get(sm, "hora_lateness_operations_total")
    check(meas == [0 if member else ops + 1],
          "operations measured: %s, expected %d"
          % (meas, 0 if member else ops + 1))
    if peers:
        up = get(sm, "hora_link_up")
        check(up == [1] * peers, "links up: %s" % up)
        sent = get(sm, "hora_link_sent_bytes_total")
        got = get(sm, "hora_link_received_bytes_total")
        check(len(sent) == peers and sum(sent) >= ops * count * 4,
              "bytes sent to the other hosts: %s" % sent)
        check(len(got) == peers and sum(got) >= ops * count * 4,
              "bytes received from the other hosts: %s" % got)
        if count * 4 <= 4096:  # small: parts or results with the negotiation
            star = get(sm, "hora_small_allreduce_sent_bytes_total")
            check(len(star) == 1 and star[0] >= ops * count * 4,
                  "small allreduces' bytes sent with the negotiation: %s"
                  % star)
    for r in range(nranks if not member else 0):
        n = get(sm, "hora_rank_lateness_seconds_count", rank=str(r))
        check(n == [ops + 1], "rank %d lateness count %s" % (r, n))
        last = get(sm, "hora_rank_last_total", rank=str(r))
        if r == slow:
            check(last and last[0] >= ops,
                  "rank %d (the slow one) last %s times, expected >= %d"
                  % (r, last, ops))
            # 20 ms late each time: none of its allreduces within 10 ms
            fast = get(sm, "hora_rank_lateness_seconds_bucket", rank=str(r),
                       le="0.01")
            check(fast and fast[0] <= 1,
                  "rank %d within 10 ms of the first %s times" % (r, fast))
        else:
            check(last and last[0] <= 1,
                  "rank %d last %s times" % (r, last))
    check(get(sm, "hora_deadlocks_total") == [0], "deadlocks")
    check(get(sm, "hora_stall_warnings_total") == [0], "stall warnings")
    if edges:
        for c in idle:
            c.close()
        r = raw(addr, port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 404 "), "other path: %r" % r[:40])
        r = raw(addr, port, b"POST /metrics HTTP/1.1\r\nContent-Length: 3"
                b"\r\n\r\nabc")
        check(r.startswith(b"HTTP/1.1 405 "), "POST: %r" % r[:40])
        r = raw(addr, port, bytes(range(256)) * 4)
        check(r.startswith(b"HTTP/1.1 400 "), "garbage: %r" % r[:40])
        r = raw(addr, port, b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 5000)
        check(r.startswith(b"HTTP/1.1 431 "), "huge header: %r" % r[:40])
        r = raw(addr, port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        check(r.startswith(b"HTTP/1.1 200 ") and r.endswith(b"\r\n\r\n"),
              "HEAD: %r" % r[:40])
        status, _, again = scrape(addr, port)
        check(status == 200 and "hora_operations_total" in again,
              "a scrape after all that")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
