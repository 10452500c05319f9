"""_check.py -- tiny check harness for the multi-rank workers.

Each check that fails prints one line starting with "FAIL"; done() prints

    rank R of N: WHAT: K checks, F failures

and exits 1 when anything failed. A worker runs every check on every rank in
the same order, so one failed comparison does not desynchronize the job.
"""
import sys
import traceback


class Checker:
    def __init__(self, what, rank, size):
        self.what, self.rank, self.size = what, rank, size
        self.checks = 0
        self.failures = 0

    def fail(self, msg):
        self.failures += 1
        print("FAIL: rank %d of %d: %s" % (self.rank, self.size, msg),
              flush=True)

    def ok(self, cond, msg):
        self.checks += 1
        if not cond:
            self.fail(msg)
        return bool(cond)

    def raises(self, exc, fn, msg, contains=()):
        """Checks that fn() raises exc whose message contains every string
        of `contains`; returns the exception (or None)."""
        self.checks += 1
        try:
            fn()
        except exc as e:
            text = str(e)
            missing = [s for s in contains if s not in text]
            if missing:
                self.fail("%s: message %r lacks %r" % (msg, text, missing))
            return e
        except Exception as e:  # noqa: BLE001 -- report anything else
            self.fail("%s: expected %s, got %s: %s\n%s"
                      % (msg, exc.__name__, type(e).__name__, e,
                         traceback.format_exc()))
            return None
        self.fail("%s: expected %s, nothing was raised" % (msg, exc.__name__))
        return None

    def done(self):
        print("rank %d of %d: %s: %d checks, %d failures"
              % (self.rank, self.size, self.what, self.checks, self.failures),
              flush=True)
        sys.exit(1 if self.failures else 0)
