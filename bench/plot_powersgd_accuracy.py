"""One plot of validation accuracy per epoch for runs of the digits job, from their ``log`` files.

Run:  .venv/bin/python bench/plot_powersgd_accuracy.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...]
e.g.  ... docs/powersgd_accuracy.png float32=/tmp/acc/float32 powersgd=/tmp/acc/powersgd

Each RUN_DIR is a run directory of ``python -m mnframe`` (its LogReport file ``log``, a JSON list
of per-epoch records). Prints each run's last validation accuracy and the difference to the first
run's, in points; the plot has one curve per run (solid: validation, dotted: training accuracy).
"""

import json
import os
import sys

KEY, TRAIN_KEY = "validation/main/accuracy", "main/accuracy"


def read_log(run_dir):
    with open(os.path.join(run_dir, "log")) as f:
        records = json.load(f)
    return [r for r in records if KEY in r]


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        sys.exit(f"usage: {os.path.basename(__file__)} OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...]")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, runs = argv[0], [a.split("=", 1) for a in argv[1:]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    first = None
    for label, run_dir in runs:
        records = read_log(run_dir)
        epochs = [r["epoch"] for r in records]
        line = ax.plot(epochs, [100 * r[KEY] for r in records], label=f"{label} (validation)")[0]
        ax.plot(epochs, [100 * r[TRAIN_KEY] for r in records], ":", color=line.get_color(), label=f"{label} (train)")
        last = 100 * records[-1][KEY]
        first = last if first is None else first
        print(f"{label}: validation accuracy {last:.2f}% after {epochs[-1]} epochs ({last - first:+.2f} points)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(60, 100.5)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("digits MLP, 2 ranks: float32 vs PowerSGD (rank 4)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
