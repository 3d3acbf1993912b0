#!/usr/bin/env python3
"""A training-like job that uses only Python's standard library.

It reads what mlfsd prepares, the way code written for Alibaba PAI does:
hyperparameters from $PAI_USER_ARGS (with argparse) and from
$PAI_CONFIG_DIR/hyperparameters.json, a CSV file from the single-object
channel $PAI_INPUT_TRAIN and every CSV file under the directory channel
$PAI_INPUT_VALIDATION. It fits y = w*x + b by mini-batch gradient descent,
writes a checkpoint per epoch to $PAI_OUTPUT_CHECKPOINTS, the model to
$PAI_OUTPUT_MODEL and a log to $PAI_OUTPUT_LOGS. It also writes
$PAI_OUTPUT_LOGS/seen.json: everything it read, for tests to check.
"""
import argparse
import csv
import json
import os
import shlex
import sys


def parser():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--learning-rate", type=float, default=0.01)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--note", default="")
    return p


def read_csv(path):
    with open(path, newline="") as f:
        return [(float(r["x"]), float(r["y"])) for r in csv.DictReader(f)]


def main():
    # PAI_USER_ARGS is shell-quoted (shlex.quote): shlex.split gives back
    # every value exactly, spaces and quotes included. Arguments given on
    # the command line come after, and win.
    user_args = shlex.split(os.environ.get("PAI_USER_ARGS", ""))
    args = parser().parse_args(user_args + sys.argv[1:])
    with open(os.path.join(os.environ["PAI_CONFIG_DIR"], "hyperparameters.json")) as f:
        hps = json.load(f)
    # The file and PAI_USER_ARGS say the same (the file's values are strings).
    from_env = vars(parser().parse_args(user_args))
    for name, text in hps.items():
        value = from_env[name.replace("-", "_")]
        assert type(value)(text) == value, (name, text, value)

    train_path = os.environ["PAI_INPUT_TRAIN"]  # single object: the file itself
    train = read_csv(train_path)
    val_dir = os.environ["PAI_INPUT_VALIDATION"]  # directory channel
    val_files = sorted(
        os.path.relpath(os.path.join(d, n), val_dir)
        for d, _, names in os.walk(val_dir) for n in names if n.endswith(".csv"))
    val = [row for rel in val_files for row in read_csv(os.path.join(val_dir, rel))]

    ckpt_dir = os.environ["PAI_OUTPUT_CHECKPOINTS"]
    model_dir = os.environ["PAI_OUTPUT_MODEL"]
    logs_dir = os.environ["PAI_OUTPUT_LOGS"]
    log = open(os.path.join(logs_dir, "train.log"), "w")

    w = b = 0.0
    lr, bs = args.learning_rate, args.batch_size
    for epoch in range(1, args.epochs + 1):
        for i in range(0, len(train), bs):
            batch = train[i:i + bs]
            gw = sum(2 * (w * x + b - y) * x for x, y in batch) / len(batch)
            gb = sum(2 * (w * x + b - y) for x, y in batch) / len(batch)
            w, b = w - lr * gw, b - lr * gb
        mse = sum((w * x + b - y) ** 2 for x, y in val) / len(val)
        print(f"epoch {epoch}: w={w:.4f} b={b:.4f} val_mse={mse:.5f}", file=log, flush=True)
        with open(os.path.join(ckpt_dir, f"epoch-{epoch:03d}.json"), "w") as f:
            json.dump({"epoch": epoch, "w": w, "b": b, "val_mse": mse}, f)

    with open(os.path.join(model_dir, "model.json"), "w") as f:
        json.dump({"w": w, "b": b, "val_mse": mse, "epochs": args.epochs}, f)
    with open(os.path.join(logs_dir, "seen.json"), "w") as f:
        json.dump({
            "args": vars(args),
            "hyperparameters_file": hps,
            "user_args": os.environ.get("PAI_USER_ARGS"),
            "cwd": os.getcwd(),
            "train_path": train_path,
            "train_rows": len(train),
            "validation_files": val_files,
            "validation_rows": len(val),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("PAI_", "SM_"))},
        }, f, indent=2, ensure_ascii=False)
    print(f"trained {args.epochs} epochs on {len(train)} rows: w={w:.3f} b={b:.3f} val_mse={mse:.4f}")


if __name__ == "__main__":
    main()
