#!/usr/bin/env python3
"""Draws a soak run (tests/soak.rs) as one PNG: admissions and failures a
second, admission latency (p50, p99), kmutate's resident memory and open
descriptors, the apiserver's restarts shaded.

    python3 -m venv target/plot-venv && target/plot-venv/bin/pip install matplotlib
    target/plot-venv/bin/python bench/soak/plot.py target/soak/soak.csv bench/soak/soak.png
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns = {name: [float(r[name]) for r in rows] for name in rows[0]}
    return columns


def outages(down):
    """(start, end) second ranges where the apiserver was down."""
    spans, start = [], None
    for second, flag in enumerate(down):
        if flag and start is None:
            start = second
        if not flag and start is not None:
            spans.append((start, second))
            start = None
    if start is not None:
        spans.append((start, len(down)))
    return spans


def main(source, target):
    c = read(source)
    minutes = [s / 60 for s in c["second"]]
    spans = outages(c["apiserver_down"])
    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    panels = [
        (axes[0], [("admissions", "admissions answered"), ("failed", "failed")], "per second"),
        (axes[1], [("p50_ms", "p50"), ("p99_ms", "p99")], "latency (ms)"),
        (axes[2], [("rss_kb", "resident memory")], "kmutate memory (MB)"),
        (axes[3], [("fds", "open descriptors")], "kmutate descriptors"),
    ]
    for axis, series, label in panels:
        for column, name in series:
            values = c[column]
            if column == "rss_kb":
                values = [v / 1024 for v in values]
            axis.plot(minutes, values, label=name, linewidth=0.8)
        for start, end in spans:
            axis.axvspan(start / 60, end / 60, color="grey", alpha=0.25, linewidth=0)
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        axis.legend(loc="upper right", fontsize="small")
    axes[1].set_yscale("log")
    axes[2].set_ylim(bottom=0)
    axes[3].set_ylim(bottom=0)
    axes[-1].set_xlabel("minutes (grey: kube-apiserver restarting)")
    fig.suptitle("kmutate serve: 200 admissions/s through kube-apiserver, policy changed every 2 s")
    fig.tight_layout()
    fig.savefig(target, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
