#!/usr/bin/env python3
"""Draws the benchmarks' figures (the JSON files the benches write with
--samples_dir) as PNGs, for docs/benchmarks.md.

    python3 tools/plot_bench.py DIR

Reads DIR/gpustream_bench.json, DIR/fair_share.json and, when present,
DIR/gpu_bench.json; writes into DIR:
  latency_cdf.png    CDFs of the idle-queue synchronize, the flag wake-up
                     (SignalFlag -> gated launch -> WaitFlag) and the lone
                     launch, per transport, against the echo and bidi floors
  launch_rates.png   launches/s per layer (in-process, Submit unix, Submit
                     TCP, the CUDA backend on the fake driver)
  fair_share.png     each tenant's launches/s over time, per scenario
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # No display: files only.
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def load(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def cdf(ax, samples, label, style="-"):
    values = sorted(samples)
    n = len(values)
    if n == 0:
        return
    ax.plot(values, [(i + 1) / n for i in range(n)], style, label=label)


def latency_cdf(bench, out):
    transports = bench["latency_us"]
    fig, axes = plt.subplots(1, len(transports), figsize=(6 * len(transports), 4.5),
                             squeeze=False)
    names = {"echo": ("gRPC unary echo (floor)", ":"),
             "bidi": ("bidi stream ping-pong (floor)", ":"),
             "sync_stream": ("queue.synchronize() on Submit", "-"),
             "gated_start": ("SignalFlag -> gated launch -> WaitFlag", "-"),
             "lone_launch": ("lone launch -> host sees it", "-")}
    for ax, (transport, series) in zip(axes[0], transports.items()):
        for key, (label, style) in names.items():
            cdf(ax, series.get(key, []), label, style)
        ax.set_xscale("log")
        ax.set_xlabel("latency (µs, log scale)")
        ax.set_ylabel("fraction of round trips")
        ax.set_title(f"round trips, {transport}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def launch_rates(bench, gpu, out):
    labels = {"in_process": "CPU backend\nin-process",
              "submit_unix": "Submit\nunix socket",
              "submit_tcp": "Submit\nTCP"}
    rates = [(labels[k], v) for k, v in bench["launch_rates"].items()
             if k in labels]
    if gpu:
        for key, value in gpu["launch_rates"].items():
            if key.startswith("submit_"):
                rates.append((key[len("submit_"):].replace("_", " ") +
                              " backend\nvia Submit", value))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bars = ax.bar([r[0] for r in rates], [r[1] for r in rates])
    ax.bar_label(bars, labels=[f"{r[1]:,.0f}" for r in rates], fontsize=8)
    ax.axhline(1_000_000, linestyle="--", color="gray",
               label="goal via Submit: 1,000,000/s")
    ax.axhline(3_000_000, linestyle=":", color="gray",
               label="goal in-process: 3,000,000/s")
    ax.set_ylabel("noop launches / s")
    ax.set_title("launch rate per layer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def fair_share(shares, out):
    scenarios = shares["scenarios"]
    step = shares["interval_s"]
    fig, axes = plt.subplots(len(scenarios), 1,
                             figsize=(8, 3.5 * len(scenarios)), squeeze=False)
    for ax, (title, tenants) in zip(axes[:, 0], scenarios.items()):
        for name, series in tenants.items():
            ax.plot([step * (i + 1) for i in range(len(series))], series,
                    label=name)
        ax.set_title(title)
        ax.set_xlabel("seconds")
        ax.set_ylabel("launches / s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = sys.argv[1]
    bench = load(os.path.join(folder, "gpustream_bench.json"))
    shares = load(os.path.join(folder, "fair_share.json"))
    gpu = load(os.path.join(folder, "gpu_bench.json"))
    if bench is None or shares is None:
        print(f"plot_bench: {folder} lacks gpustream_bench.json or "
              "fair_share.json (run the benches with --samples_dir)",
              file=sys.stderr)
        return 1
    latency_cdf(bench, os.path.join(folder, "latency_cdf.png"))
    launch_rates(bench, gpu, os.path.join(folder, "launch_rates.png"))
    fair_share(shares, os.path.join(folder, "fair_share.png"))
    for name in ("latency_cdf.png", "launch_rates.png", "fair_share.png"):
        print(os.path.join(folder, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
