#!/usr/bin/env python3
"""Push the synced orders to a shipping partner, every order exactly once, whatever
attempt or host gets there, with jobguard marks as the "already pushed" records.

The partner is a stand-in here: a file (shipped.log) to which a push appends one line,
`TXN_ID RUN_ID`, made durable with fsync, and which answers "do you have order X?" by
reading it. A real partner is an HTTP API; what this needs of it is a way to ask whether
it has an order (or an idempotency key it honours, for which the order id serves).

Each order goes through two marks in the job's store (`jobguard mark`: one record per
key, seen by every host and attempt):
1. `shipping ORDER`, before the push: this attempt takes the order. Exit 0: push it.
2. `shipped ORDER`, after the push: the partner has it.
An order marked `shipped` is skipped at once (`jobguard marked`). An order marked
`shipping` but not `shipped` was taken by an attempt that was cut off between its mark and
its confirmation (a crash, a reboot, a lost lease): the partner is asked, and the order is
pushed only if the partner does not have it.

Inside a run, every mark carries the run's fencing token: once the run's lease is lost,
`jobguard mark` exits 75 and this script stops at once, with 75, pushing nothing more.
That leaves one gap a partner must close: a push already on the wire when the lease was
lost. Pass the order id as the partner's idempotency key for that.

Environment (relative paths are relative to the working directory):
  STORE_SYNC_DB        the orders table, as for sync.py (default: orders.db)
  STORE_SYNC_SHIP_LOG  the stand-in partner's file (default: shipped.log)
  STORE_SYNC_PAUSE_MS  pause after each mark and each push, in milliseconds (default: 0),
                       so that a run can be cut between them
  STORE_SYNC_JOBGUARD         the jobguard program (default: jobguard, found in PATH)
  JOBGUARD_JOB         set by `jobguard run`; outside a run the marks go to the store of
                       the job store-push (`--job`)
  JOBGUARD_REPORT      if set, counters are appended as key=value lines: orders,
                       pushed, already_shipped, recovered (in doubt, the partner had it),
                       repushed (in doubt, the partner did not have it)

Exit status: 0 when every order is shipped; 75 when the run's lease was lost; 64 for a
bad setting; otherwise the failing jobguard's status, or 1.
"""

import os
import subprocess
import sys
import time

from sync import DEFAULT_DB, EX_USAGE, Failure, env_int, open_db

DEFAULT_LOG = "shipped.log"
LEASE_LOST = 75


class Partner:
    """The stand-in shipping partner: an append-only file of pushed orders."""

    def __init__(self, path):
        self.path = path

    def push(self, txn_id, run_id):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("%s %s\n" % (txn_id, run_id or "-"))
            f.flush()
            os.fsync(f.fileno())

    def has(self, txn_id):
        try:
            with open(self.path, encoding="utf-8") as f:
                return any(line.split(" ", 1)[0] == txn_id for line in f)
        except FileNotFoundError:
            return False


class Marks:
    """`jobguard mark` and `jobguard marked` for one job."""

    def __init__(self):
        self.bin = os.environ.get("STORE_SYNC_JOBGUARD", "") or "jobguard"
        self.job = os.environ.get("JOBGUARD_JOB", "") or "store-push"

    def _call(self, command, namespace, key):
        try:
            done = subprocess.run(
                [self.bin, command, namespace, key, "--job", self.job],
                stdout=subprocess.PIPE,
                universal_newlines=True,
            )
        except OSError as e:
            raise Failure(EX_USAGE, "cannot run %s: %s (set STORE_SYNC_JOBGUARD)" % (self.bin, e))
        if done.returncode == LEASE_LOST:
            raise Failure(LEASE_LOST, "the run's lease is lost: stopping before %s" % key)
        if done.returncode not in (0, 1):
            raise Failure(done.returncode, "jobguard %s %s %s failed" % (command, namespace, key))
        return done.returncode == 0

    def mark(self, namespace, key):
        """True when the key was marked now, False when it was marked before."""
        return self._call("mark", namespace, key)

    def marked(self, namespace, key):
        return self._call("marked", namespace, key)


def push_all(txn_ids, marks, partner, run_id, pause_ms):
    counts = {"orders": len(txn_ids), "pushed": 0, "already_shipped": 0, "recovered": 0, "repushed": 0}
    pause = pause_ms / 1000.0
    for txn_id in txn_ids:
        if marks.marked("shipped", txn_id):
            counts["already_shipped"] += 1
            continue
        if marks.mark("shipping", txn_id):
            time.sleep(pause)
            partner.push(txn_id, run_id)
            counts["pushed"] += 1
        elif partner.has(txn_id):
            counts["recovered"] += 1
        else:
            partner.push(txn_id, run_id)
            counts["repushed"] += 1
        time.sleep(pause)
        marks.mark("shipped", txn_id)
    return counts


def main():
    try:
        pause_ms = env_int("STORE_SYNC_PAUSE_MS", 0, 0)
        db = open_db(os.environ.get("STORE_SYNC_DB", "") or DEFAULT_DB)
        try:
            txn_ids = db.txn_ids()
        finally:
            db.close()
        partner = Partner(os.environ.get("STORE_SYNC_SHIP_LOG", "") or DEFAULT_LOG)
        run_id = os.environ.get("JOBGUARD_RUN_ID") or None
        counts = push_all(txn_ids, Marks(), partner, run_id, pause_ms)
    except Failure as e:
        print("push.py: %s" % e, file=sys.stderr)
        return e.status

    report = os.environ.get("JOBGUARD_REPORT", "")
    if report:
        with open(report, "a", encoding="utf-8") as f:
            for k in ("orders", "pushed", "already_shipped", "recovered", "repushed"):
                f.write("%s=%d\n" % (k, counts[k]))
    print(
        "store-push: %(orders)d orders: pushed %(pushed)d, already shipped %(already_shipped)d, "
        "in doubt %(recovered)d found at the partner and %(repushed)d pushed again" % counts
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
