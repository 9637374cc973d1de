#!/usr/bin/env python3
"""Write a CSV of invented store transactions for the store-sync example.

The output is the same byte for byte on every run and every Python 3 version: the
numbers come from a small generator defined here (SplitMix64), not from the `random`
module, whose algorithms are allowed to change between releases.

Columns: txn_id (unique), store, sku, qty, amount_cents (qty * unit price, integer
cents), timestamp (RFC 3339, UTC). All transactions fall on one business day.

Usage: gen_transactions.py [--output PATH] [--count N] [--seed S]
       (defaults: transactions.csv, 3000, 20261128)
"""

import argparse
import csv
import os
import sys

DEFAULT_OUTPUT = "transactions.csv"
DEFAULT_COUNT = 3000
DEFAULT_SEED = 20261128
HEADER = ["txn_id", "store", "sku", "qty", "amount_cents", "timestamp"]

# The business day the transactions belong to, and the shops' opening hours (UTC).
BUSINESS_DAY = "2026-11-28"
OPEN_SECOND = 8 * 3600
CLOSE_SECOND = 21 * 3600

STORES = ["store-%03d" % n for n in (1, 2, 3, 5, 8, 12, 17, 23)]
# SKU -> unit price in cents.
SKUS = [
    ("SKU-10001", 249),
    ("SKU-10017", 899),
    ("SKU-10042", 1299),
    ("SKU-10108", 199),
    ("SKU-10230", 4599),
    ("SKU-10311", 349),
    ("SKU-10420", 2750),
    ("SKU-10555", 99),
    ("SKU-10613", 1575),
    ("SKU-10777", 6200),
    ("SKU-10808", 525),
    ("SKU-10999", 12999),
]

MASK64 = (1 << 64) - 1


class SplitMix64:
    """SplitMix64 (Steele, Lea, Flood 2014): 64-bit outputs from a 64-bit state."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        """A number in [0, n), without modulo bias (rejection sampling)."""
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = self.next()
            if x < limit:
                return x % n


def transactions(count, seed):
    """Yield `count` rows (lists of strings) in timestamp order."""
    rng = SplitMix64(seed)
    # Spread the transactions over opening hours, in order, a few seconds apart.
    span = CLOSE_SECOND - OPEN_SECOND
    seconds = sorted(OPEN_SECOND + rng.below(span) for _ in range(count))
    for n, second in enumerate(seconds, start=1):
        store = STORES[rng.below(len(STORES))]
        sku, unit_cents = SKUS[rng.below(len(SKUS))]
        qty = 1 + rng.below(3) if rng.below(10) else 4 + rng.below(9)
        h, rest = divmod(second, 3600)
        m, s = divmod(rest, 60)
        yield [
            "T%s-%06d" % (BUSINESS_DAY.replace("-", ""), n),
            store,
            sku,
            str(qty),
            str(qty * unit_cents),
            "%sT%02d:%02d:%02dZ" % (BUSINESS_DAY, h, m, s),
        ]


def write_csv(path, count=DEFAULT_COUNT, seed=DEFAULT_SEED):
    """Write the CSV to `path` atomically (a temporary file renamed into place), so a
    reader never sees half a file. Returns the number of rows written."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(HEADER)
            rows = 0
            for row in transactions(count, seed):
                w.writerow(row)
                rows += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return rows


def main(argv):
    p = argparse.ArgumentParser(description="Write invented store transactions as CSV.")
    p.add_argument("--output", default=DEFAULT_OUTPUT, help="file to write (default: %(default)s)")
    p.add_argument("--count", type=int, default=DEFAULT_COUNT, help="rows (default: %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed (default: %(default)s)")
    args = p.parse_args(argv)
    if args.count < 0:
        p.error("--count must not be negative")
    rows = write_csv(args.output, args.count, args.seed)
    print("gen_transactions: wrote %d transactions to %s" % (rows, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
