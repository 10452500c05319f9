#!/usr/bin/env python3
"""timeline_check.py -- checks a timeline file horad wrote.

    timeline_check.py FILE [--ranks N] [--hosts H] [--expect NAME=COLL]...
                      [--absent NAME]... [--waits NAME]... [--act NAME=ACT]...
                      [--cycles | --no-cycles]
                      [--failed NAME]... [--odd] [--partial] [--causal]

The file must parse as JSON (Python's json module) and be Horovod's
format: a list of records, the first naming process 0 with
start_time_since_epoch_in_micros, each tensor row (pid > 0) named by a
process_name record. On every thread (pid, tid) of a row, the times do
not go back and the B/E records nest and balance (--partial: the job died,
rows may be left open). Each --expect NAME=COLL row holds, on each of the
hosts 0..H-1 (threads), NEGOTIATE_COLL, COLL, QUEUE and CPU_COLL (any
WAIT_FOR_DATA within CPU_COLL), the end of COLL naming the dtype and
shape, and instants named by every rank 0..N-1 (over all threads);
--waits NAME (with --expect NAME=COLL): there is a WAIT_FOR_DATA on each
of those hosts; --act NAME=ACT: the same for activity ACT
(MEMCPY_IN_FUSION_BUFFER, MEMCPY_OUT_FUSION_BUFFER). --absent NAME: no such row. --failed NAME: the row
has an end naming an error. --odd: a row holds the name it_timeline's
ops gives its last allreduce (a quote, a backslash, control characters,
UTF-8 and a byte that is none, which reads as U+00FF). --cycles: there
are CYCLE_START markers; --no-cycles: there are none. --causal: for every
operation of every row, its end on each host is not before its
negotiation began on host 0, its negotiation begins on each host not
after host 0 completed it, and ends not before the last arrival host 0
saw (what causality demands of the corrected clocks), each within
--slack microseconds (default 0).
Prints one line per problem and exits 1, or prints a summary and exits 0.
"""
import argparse
import json
import sys

# what CPU_<COLL> may hold
INNER = ("WAIT_FOR_DATA", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--absent", action="append", default=[])
    ap.add_argument("--waits", action="append", default=[])
    ap.add_argument("--act", action="append", default=[])
    ap.add_argument("--failed", action="append", default=[])
    ap.add_argument("--odd", action="store_true")
    ap.add_argument("--cycles", dest="cycles", action="store_true",
                    default=None)
    ap.add_argument("--no-cycles", dest="cycles", action="store_false")
    ap.add_argument("--partial", action="store_true")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--slack", type=int, default=0)
    a = ap.parse_args()
    problems = []
    want_acts = {}
    for n in a.waits:
        want_acts.setdefault(n, []).append("WAIT_FOR_DATA")
    for v in a.act:
        n, _, act = v.rpartition("=")
        want_acts.setdefault(n, []).append(act)

    def bad(msg):
        problems.append(msg)

    with open(a.file, encoding="utf-8") as f:
        text = f.read()
    try:
        recs = json.loads(text)
    except ValueError as e:
        print("%s does not parse as JSON: %s; it ends with %r"
              % (a.file, e, text[-200:]))
        return 1
    if not isinstance(recs, list) or not recs:
        print("%s is not a non-empty JSON list" % a.file)
        return 1
    first = recs[0]
    if not (first.get("ph") == "M" and first.get("pid") == 0 and
            "start_time_since_epoch_in_micros" in first.get("args", {})):
        bad("the first record is not process 0's name with "
            "start_time_since_epoch_in_micros: %r" % first)
    names = {}
    for r in recs:
        if r.get("ph") == "M" and r.get("name") == "process_name" and \
                r.get("pid", 0) > 0:
            names[r["pid"]] = r["args"]["name"]
    by_name = {v: k for k, v in names.items()}
    threads = {}
    markers = 0
    for i, r in enumerate(recs):
        ph = r.get("ph")
        if ph == "i":
            if r.get("name") == "CYCLE_START":
                markers += 1
            continue
        if ph == "M":
            continue
        if ph not in ("B", "E", "X"):
            bad("record %d has phase %r" % (i, ph))
            continue
        pid, tid = r.get("pid"), r.get("tid", 0)
        if pid not in names:
            bad("record %d is on pid %r, which has no name" % (i, pid))
            continue
        threads.setdefault((pid, tid), []).append(r)
    # nesting, per thread
    ops = {}  # (pid, tid) -> list of dicts: one per operation
    for (pid, tid), evs in threads.items():
        where = "row %r, host %d" % (names[pid], tid)
        stack, last = [], None
        cur = None
        for r in evs:
            ts = r.get("ts")
            if not isinstance(ts, int):
                bad("%s: a record without an integer ts: %r" % (where, r))
                continue
            if last is not None and ts < last:
                bad("%s: time goes back from %d to %d" % (where, last, ts))
            last = ts
            ph = r["ph"]
            if ph == "B":
                if not stack and r["name"].startswith("NEGOTIATE_"):
                    cur = {"nego_b": ts, "arrivals": [], "acts": []}
                    ops.setdefault((pid, tid), []).append(cur)
                elif not stack:
                    if cur is None or "coll" in cur:
                        cur = {"arrivals": [], "acts": []}
                        ops.setdefault((pid, tid), []).append(cur)
                    cur["coll"] = r["name"]
                    cur["coll_b"] = ts
                elif cur is not None:
                    cur["acts"].append(r["name"])
                    cur.setdefault("within", []).append((r["name"],
                                                         stack[-1]))
                stack.append(r["name"])
            elif ph == "E":
                if not stack:
                    bad("%s: an end with nothing open at ts %d" % (where, ts))
                    continue
                top = stack.pop()
                if cur is not None and not stack:
                    if top.startswith("NEGOTIATE_"):
                        cur["nego"] = top
                        cur["nego_e"] = ts
                    else:
                        cur["coll_e"] = ts
                        cur["end_args"] = r.get("args", {})
            elif ph == "X":
                if r.get("dur") != 0:
                    bad("%s: an instant with dur %r" % (where, r.get("dur")))
                if cur is not None and stack and \
                        stack[-1].startswith("NEGOTIATE_"):
                    cur["arrivals"].append((r["name"], ts))
                else:
                    bad("%s: an arrival outside a negotiation: %r"
                        % (where, r))
        if stack and not a.partial:
            bad("%s: left open: %s" % (where, stack))
    for spec in a.expect:
        name, _, coll = spec.rpartition("=")
        pid = by_name.get(name)
        if pid is None:
            bad("no row for tensor %r (rows: %s)"
                % (name, sorted(names.values())[:20]))
            continue
        seen = set()
        for h in range(a.hosts):
            v = ops.get((pid, h), [])
            if not v:
                bad("row %r: nothing from host %d" % (name, h))
                continue
            op = v[0]
            if op.get("nego") != "NEGOTIATE_" + coll:
                bad("row %r, host %d: negotiation %r, expected %r"
                    % (name, h, op.get("nego"), "NEGOTIATE_" + coll))
            if op.get("coll") != coll:
                bad("row %r, host %d: operation %r, expected %r"
                    % (name, h, op.get("coll"), coll))
            acts = [x for x in op.get("acts", []) if x not in INNER]
            if acts != ["QUEUE", "CPU_" + coll]:
                bad("row %r, host %d: activities %r, expected %r (and "
                    "%s within CPU_%s)"
                    % (name, h, op.get("acts"), ["QUEUE", "CPU_" + coll],
                       " or ".join(INNER), coll))
            for act, parent in op.get("within", []):
                if act in INNER and parent != "CPU_" + coll:
                    bad("row %r, host %d: %s within %r, expected within %r"
                        % (name, h, act, parent, "CPU_" + coll))
            for act in want_acts.get(name, []):  # in any of its operations
                if not any(act in o.get("acts", []) for o in v):
                    bad("row %r, host %d: no %s (activities of the first: "
                        "%r)" % (name, h, act, op.get("acts")))
            args = op.get("end_args", {})
            if "dtype" not in args or "shape" not in args:
                bad("row %r, host %d: the end names no dtype and shape: %r"
                    % (name, h, args))
            seen.update(n for n, _ in op["arrivals"])
        want = {str(r) for r in range(a.ranks)}
        if want - seen:
            bad("row %r: no arrival of ranks %s (saw %s)"
                % (name, sorted(want - seen, key=int), sorted(seen, key=int)))
    if a.odd:
        odd = 'odd "name" \\ \n\t\x01 caf\u00e9 \u00ff end'
        if odd not in by_name:
            bad("no row named %r (rows: %r)" % (odd, sorted(by_name)[:20]))
    for name in a.failed:
        pid = by_name.get(name)
        if pid is None or not any(
                r.get("pid") == pid and r.get("ph") == "E" and
                "error" in r.get("args", {}) for r in recs):
            bad("row %r has no end naming an error" % name)
    for name in a.absent:
        if name in by_name:
            bad("a row for tensor %r, which should not be there" % name)
    if a.cycles is True and not markers:
        bad("no CYCLE_START marker")
    if a.cycles is False and markers:
        bad("%d CYCLE_START markers, expected none" % markers)
    if a.causal:
        for pid in names:
            base = ops.get((pid, 0), [])
            for h in range(1, a.hosts):
                for k, op in enumerate(ops.get((pid, h), [])):
                    if k >= len(base):
                        break
                    b = base[k]
                    if "coll_e" in op and "nego_b" in b and \
                            op["coll_e"] + a.slack < b["nego_b"]:
                        bad("row %r, operation %d: host %d completed it at "
                            "%d, before host 0 began negotiating it at %d"
                            % (names[pid], k, h, op["coll_e"], b["nego_b"]))
                    if "nego_b" in op and "coll_e" in b and \
                            op["nego_b"] > b["coll_e"] + a.slack:
                        bad("row %r, operation %d: host %d began negotiating "
                            "it at %d, after host 0 completed it at %d"
                            % (names[pid], k, h, op["nego_b"], b["coll_e"]))
                    last0 = max([t for _, t in b["arrivals"]] or [None])
                    if "nego_e" in op and last0 is not None and \
                            op["nego_e"] + a.slack < last0:
                        bad("row %r, operation %d: host %d had the decision "
                            "at %d, before host 0's last arrival at %d"
                            % (names[pid], k, h, op["nego_e"], last0))
    for p in problems[:40]:
        print(p)
    if problems:
        print("%d problem(s) in %s" % (len(problems), a.file))
        return 1
    nops = sum(len(v) for v in ops.values())
    print("%s: %d records, %d rows, %d operations on %d threads, %d "
          "CYCLE_START" % (a.file, len(recs), len(names), nops, len(threads),
                           markers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
