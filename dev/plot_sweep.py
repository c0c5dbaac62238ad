#!/usr/bin/env python3
"""The plot of dev/sweep_gpt2.sh's sweep: memory and tokens/s against batch size.

    python3 dev/plot_sweep.py sweep-logs/sweep.tsv docs/performance-sweep.png

One column a model (GPT-2 124M, 350M), at the longest sequence length of the sweep
and without gradient accumulation. Top: the GPU memory of each cell, as the start-up
table predicts it (lines; the GPU run's ledger equals it) and as the device reported
it in use (dots, when a GPU ran the sweep), with the 16 GiB budget. Bottom: the
GPU's tokens/s (when it ran), and the CPU trainer's cells (dotted lines, labelled).
Colour: recomputation level; line style: precision. Needs matplotlib.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    need = {"device", "model", "precision", "B", "T", "recompute", "accum", "predicted_bytes", "device_mib", "tok_s"}
    if not rows or not need <= set(rows[0]):
        sys.exit(f"Error: {path}: not a sweep table (dev/sweep_gpt2.sh writes one): needs the columns {sorted(need)}")
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: python3 dev/plot_sweep.py SWEEP.tsv OUT.png")
    rows = load(sys.argv[1])
    # a cell measured on the GPU wins over the same cell's table-only row (a TSV may hold both
    # runs: the CPU-mode sweep's whole grid, and a GPU run's rows appended)
    best = {}
    for r in rows:
        if r["device"] == "cpu-trainer" or r["accum"] != "1":
            continue
        key = (r["model"], r["precision"], r["B"], r["T"], r["recompute"])
        if key not in best or r["device"] == "gpu":
            best[key] = r
    cells = list(best.values())
    cpu = [r for r in rows if r["device"] == "cpu-trainer" and r["tok_s"]]
    models = list(dict.fromkeys(r["model"] for r in cells))  # (in the sweep's order)
    if not models:
        sys.exit(f"Error: {sys.argv[1]}: no cells to plot")
    T = max(int(r["T"]) for r in cells)
    colours = {"0": "tab:red", "1": "tab:blue", "2": "tab:green"}
    styles = {"fp32": ":", "bf16": "-", "fp16": "--", "bf16+cudnn": "-."}
    fig, axes = plt.subplots(2, len(models), figsize=(6.5 * len(models), 10), squeeze=False)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    gib = 1024.0**3
    for col, model in enumerate(models):
        mem, tps = axes[0][col], axes[1][col]
        series = sorted({(r["precision"], r["recompute"]) for r in cells if r["model"] == model})
        measured_any = False
        for prec, rec in series:
            pts = sorted((int(r["B"]), r) for r in cells if r["model"] == model and r["precision"] == prec
                         and r["recompute"] == rec and int(r["T"]) == T)
            if not pts:
                continue
            label = f"{prec} -r {rec}"
            bs = [b for b, _ in pts]
            mem.plot(bs, [int(r["predicted_bytes"]) / gib for _, r in pts], styles.get(prec, "-"), marker=".",
                     color=colours.get(rec, "k"), label=label)
            dev = [(b, float(r["device_mib"]) / 1024) for b, r in pts if r["device_mib"]]
            if dev:
                mem.plot(*zip(*dev), "o", color=colours.get(rec, "k"), fillstyle="none")
            speed = [(b, float(r["tok_s"])) for b, r in pts if r["tok_s"]]
            if speed:
                measured_any = True
                tps.plot(*zip(*speed), styles.get(prec, "-"), marker="o", color=colours.get(rec, "k"), label=label)
        mem.axhline(16, color="k", linewidth=0.8)
        mem.text(0.02, 16.3, "16 GiB", fontsize=8, transform=mem.get_yaxis_transform())
        mem.set_xscale("log", base=2)
        mem.xaxis.set_major_formatter(plain)
        mem.set_ylim(0, min(mem.get_ylim()[1], 48))  # (up to 3 x 16 GiB: beyond, the lines only climb)
        mem.set_title(f"{model}, T = {T}: GPU memory\n(lines: the start-up table = the allocation; circles: the device's in use)",
                      fontsize=9)
        mem.set_xlabel("batch size B")
        mem.set_ylabel("GiB")
        if mem.get_legend_handles_labels()[0]:
            mem.legend(fontsize=7)
        cpu_here = [r for r in cpu if r["model"] == model]
        for r in cpu_here:
            tps.axhline(float(r["tok_s"]), color="grey", linestyle=":", linewidth=1)
        if cpu_here:
            text = ", ".join(f"B={r['B']} T={r['T']}: {float(r['tok_s']):.0f}" for r in cpu_here)
            tps.text(0.02, max(float(r["tok_s"]) for r in cpu_here) * 1.2, f"CPU trainer (tokens/s), {text}", fontsize=8,
                     color="grey", transform=tps.get_yaxis_transform())
        values = [float(r["tok_s"]) for r in cpu_here] + [y for line in tps.get_lines() for y in line.get_ydata()]
        if values:
            tps.set_ylim(min(values) / 3, max(values) * 3)
        tps.set_xscale("log", base=2)
        tps.xaxis.set_major_formatter(plain)
        tps.set_yscale("log")
        tps.set_xlabel("batch size B")
        tps.set_ylabel("tokens/s")
        title = "the GPU's (under -G 16)" if measured_any else "no GPU run yet, the CPU trainer's only"
        tps.set_title(f"{model}, T = {T}: tokens/s\n({title})", fontsize=9)
        if measured_any:
            tps.legend(fontsize=7)
        tps.set_xlim(mem.get_xlim())
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
