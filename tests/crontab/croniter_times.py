#!/usr/bin/python3
"""cron's fire times by a reference implementation, for tests/import_crontab.rs.

Reads a JSON list of {"expr": "M H DOM MON DOW", "base": "YYYY-MM-DDTHH:MM:SS", "n": N}
on stdin and prints a JSON list with, for each, the first N wall-clock times after BASE
("YYYY-MM-DDTHH:MM") at which cron fires, as Python's croniter computes them on naive
civil time with day_or=True (either day when both day fields are restricted). The zone,
and so the daylight-saving rules, are left to the caller: croniter 1.3.5 keeps the
first offset across a change when given aware times.
"""
import datetime
import json
import sys

from croniter import croniter


def times(expr, base, n):
    it = croniter(expr, datetime.datetime.fromisoformat(base), day_or=True)
    return [it.get_next(datetime.datetime).strftime("%Y-%m-%dT%H:%M") for _ in range(n)]


print(json.dumps([times(q["expr"], q["base"], q["n"]) for q in json.load(sys.stdin)]))
