#!/usr/bin/env python3
"""Raft terms spent per fault of a chaos run, by nemesis (RELIABILITY.md, finding 5).

Reads a run's report.json (each fault's start) and members.log (every store
member's term once a second, written by tools/chaos.sh) and prints, for each
kind of fault, how far the highest term rose between that fault's start and
the next fault's start: one fault should cost at most one election.

    tools/terms_per_fault.py reliability/chaos-11
"""
import collections
import datetime
import json
import re
import sys


def seconds_of_day(hhmmss: str) -> int:
    h, m, s = map(int, hhmmss.split(":"))
    return h * 3600 + m * 60 + s


def main(run: str) -> None:
    report = json.load(open(f"{run}/report.json"))
    samples = []  # (second of the day, highest term any member reported)
    for line in open(f"{run}/members.log"):
        terms = [int(t) for t in re.findall(r"term (\d+)", line)]
        if terms:
            samples.append((seconds_of_day(line.split(" | ")[0]), max(terms)))

    def term_at(ms: int):
        t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
        second = t.hour * 3600 + t.minute * 60 + t.second
        seen = [term for at, term in samples if at <= second]
        return seen[-1] if seen else None

    spent = collections.defaultdict(list)
    faults = report["faults"]
    for i, fault in enumerate(faults):
        end = faults[i + 1]["started_at"] if i + 1 < len(faults) else fault["recovered_at"]
        before, after = term_at(fault["started_at"]), term_at(end)
        if before is None or after is None:
            continue
        kind = fault["nemesis"]
        if kind == "partition":
            kind += " " + fault["fault"]["shape"]["shape"]
        if kind == "kill":
            kind += " " + fault["fault"]["target"]["what"]
        spent[kind].append(after - before)
    print(f"{'fault':24} {'count':>5} {'mean terms':>10} {'most':>5}")
    for kind, terms in sorted(spent.items()):
        print(f"{kind:24} {len(terms):5} {sum(terms) / len(terms):10.1f} {max(terms):5}")
    print(f"last term seen: {samples[-1][1]}")


if __name__ == "__main__":
    main(sys.argv[1])
