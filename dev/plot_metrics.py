#!/usr/bin/env python3
"""Loss curves as a PNG, from the metrics log of any of our training programs.

    python3 dev/plot_metrics.py RUN [RUN ...] -o curves.png [--title TEXT] [--smooth N]
    python3 dev/plot_metrics.py RUN --print          # the parsed series as text (no matplotlib needed)

A RUN is a log file, or a folder holding one (the -o folder of a run):
  train_mlp      metrics.log   epoch:1 train_loss:... train_acc:... val_loss:... val_acc:... s:...
  train_gpt2     main.log      s:1 trl:... lr:... norm:... ms:...   and   s:0 tel:... (validation)
  finetune_lora  metrics.tsv   step lr loss grad_norm val_loss tokens_per_s ms_data ... ms_update (tab-separated, a header)
(train_gpt2.cu and train_mlp.cu write the same logs as their C twins.) The format is told by
the content, not the name. Several runs are drawn on the same axes, one colour each: the
loss (training thin, validation thick, with markers), and below it the learning rate and
the gradient norm where the log has them (train_mlp: the accuracies instead). --smooth N
draws the training loss as a running mean over N points (the raw points stay, faint).

Needs matplotlib (pip install matplotlib; dev/reference/requirements.txt lists it) only to
draw; reading the logs is plain Python.
"""
import argparse
import math
import os
import sys

LOG_NAMES = ("metrics.tsv", "main.log", "metrics.log")


def find_log(path):
    if os.path.isdir(path):
        for name in LOG_NAMES:
            if os.path.isfile(os.path.join(path, name)):
                return os.path.join(path, name)
        sys.exit(f"Error: {path}: no metrics log in it (one of {', '.join(LOG_NAMES)})")
    if not os.path.isfile(path):
        sys.exit(f"Error: {path}: no such file or folder")
    return path


def number(text, path, line_no):
    try:
        return float(text)
    except ValueError:
        sys.exit(f"Error: {path}: line {line_no}: '{text}' is not a number")


def parse(path):
    """A run's series: {"program", "x" (the x axis' name), name: [(x, y), ...]}."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f]
    content = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not content:
        sys.exit(f"Error: {path}: empty: no metrics yet")
    first = content[0][1]
    run = {"path": path}
    if first.startswith("step\t"):  # finetune_lora's metrics.tsv
        header = first.split("\t")
        run.update(program="finetune_lora", x="step")
        names = {"loss": "train loss", "val_loss": "val loss", "lr": "learning rate", "grad_norm": "gradient norm",
                 "tokens_per_s": "tokens/s"}
        for line_no, line in content[1:]:
            fields = line.split("\t")
            if len(fields) != len(header):
                sys.exit(f"Error: {path}: line {line_no}: {len(fields)} fields, the header has {len(header)}")
            step = number(fields[0], path, line_no)
            for key, value in zip(header[1:], fields[1:]):
                if value != "" and key in names:
                    run.setdefault(names[key], []).append((step, number(value, path, line_no)))
        return run
    if first.startswith("epoch:"):  # train_mlp's metrics.log
        run.update(program="train_mlp", x="epoch")
        names = {"train_loss": "train loss", "val_loss": "val loss", "train_acc": "train accuracy", "val_acc": "val accuracy"}
    elif first.startswith("s:"):  # train_gpt2's main.log
        run.update(program="train_gpt2", x="step")
        names = {"trl": "train loss", "tel": "val loss", "lr": "learning rate", "norm": "gradient norm"}
    else:
        sys.exit(f"Error: {path}: not a metrics log of train_mlp (epoch:...), train_gpt2 (s:...) or finetune_lora (a step header)")
    for line_no, line in content:
        pairs = {}
        for item in line.split():
            key, sep, value = item.partition(":")
            if not sep:
                sys.exit(f"Error: {path}: line {line_no}: '{item}' is not key:value")
            pairs[key] = value
        x_key = "epoch" if run["program"] == "train_mlp" else "s"
        if x_key not in pairs:
            sys.exit(f"Error: {path}: line {line_no}: no {x_key}:")
        x = number(pairs[x_key], path, line_no)
        for key, name in names.items():
            if key in pairs:
                run.setdefault(name, []).append((x, number(pairs[key], path, line_no)))
    return run


def running_mean(points, n):
    out, total, window = [], 0.0, []
    for x, y in points:
        window.append(y)
        total += y
        if len(window) > n:
            total -= window.pop(0)
        out.append((x, total / len(window)))
    return out


def print_runs(runs):
    for run in runs:
        series = [k for k in run if k not in ("path", "program", "x")]
        print(f"{run['path']}: {run['program']}, x = {run['x']}")
        for name in series:
            points = run[name]
            finite = [y for _, y in points if math.isfinite(y)]
            last = points[-1]
            print(f"  {name}: {len(points)} points, {run['x']} {points[0][0]:g}..{last[0]:g}, "
                  f"min {min(finite):.6g}, last {last[1]:.6g}" if finite else f"  {name}: {len(points)} points, none finite")


def plot(runs, out, title, smooth):
    try:
        import matplotlib
    except ImportError:
        sys.exit("Error: drawing needs matplotlib (pip install matplotlib); --print shows the series without it")
    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    lower = []  # the panels below the loss: what the logs have
    for name in ("learning rate", "gradient norm", "val accuracy"):
        if any(name in run for run in runs):
            lower.append(name)
    fig, axes = plt.subplots(1 + len(lower), 1, figsize=(9, 4.5 + 2.2 * len(lower)), sharex=True,
                             gridspec_kw={"height_ratios": [3] + [1.3] * len(lower)}, squeeze=False)
    axes = axes[:, 0]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, run in enumerate(runs):
        colour = colours[k % len(colours)]
        label = os.path.basename(os.path.dirname(os.path.abspath(run["path"]))) or run["path"]
        label = f"{label} ({run['program']})"
        train = run.get("train loss", [])
        if train:
            if smooth > 1 and len(train) > smooth:
                axes[0].plot(*zip(*train), color=colour, alpha=0.25, linewidth=0.8)
                axes[0].plot(*zip(*running_mean(train, smooth)), color=colour, linewidth=1.2,
                             label=f"{label}: train (mean of {smooth})")
            else:
                axes[0].plot(*zip(*train), color=colour, linewidth=1.0, label=f"{label}: train")
        if run.get("val loss"):
            axes[0].plot(*zip(*run["val loss"]), color=colour, linewidth=2.2, marker="o", markersize=4, label=f"{label}: val")
        for ax, name in zip(axes[1:], lower):
            if run.get(name):
                ax.plot(*zip(*run[name]), color=colour, linewidth=1.2)
                if name == "val accuracy" and run.get("train accuracy"):
                    ax.plot(*zip(*run["train accuracy"]), color=colour, linewidth=0.8, linestyle="--")
    axes[0].set_ylabel("loss")
    axes[0].grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    for ax, name in zip(axes[1:], lower):
        ax.set_ylabel(name if name != "val accuracy" else "accuracy (val; train dashed)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel(runs[0]["x"])
    axes[0].set_title(title or ", ".join(sorted({run["program"] for run in runs})))
    fig.tight_layout()
    tmp = out + ".tmp.png"  # written whole, then renamed: an old plot is never half overwritten
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser(description="loss curves from train_mlp, train_gpt2 and finetune_lora logs")
    parser.add_argument("runs", nargs="+", help="a metrics log, or a run's folder holding one")
    parser.add_argument("-o", "--out", help="the PNG to write")
    parser.add_argument("--title", default="", help="the plot's title [the programs]")
    parser.add_argument("--smooth", type=int, default=1, help="a running mean of N training losses [1: none]")
    parser.add_argument("--print", action="store_true", help="print the parsed series instead of drawing")
    args = parser.parse_args()
    runs = [parse(find_log(path)) for path in args.runs]
    if len({run["x"] for run in runs}) > 1:
        sys.exit("Error: runs counted in epochs (train_mlp) and in steps do not share an axis: plot them apart")
    if args.print:
        print_runs(runs)
        return
    if not args.out:
        sys.exit("Error: -o FILE.png names the plot (or --print)")
    if not args.out.endswith(".png"):
        sys.exit(f"Error: -o {args.out}: the plot is a PNG: name it .png")
    plot(runs, args.out, args.title, max(1, args.smooth))


if __name__ == "__main__":
    main()
