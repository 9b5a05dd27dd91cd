"""The `ga-tfx` command."""

import argparse
import sys


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="ga-tfx", description="Gradient accumulation for Keras 2 and TFX pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="train on the digits data with accumulation and as big batches; compare",
        description="Trains a small CNN on scikit-learn's digits twice from the same initial "
                    "weights, as big batches and with ga_tfx accumulation, and prints the "
                    "largest weight difference.")
    demo.add_argument("--accum-steps", type=_positive_int, default=8,
                      help="micro-batches per optimizer update (default 8)")
    demo.add_argument("--micro-batch", type=_positive_int, default=16,
                      help="micro-batch size (default 16)")
    demo.add_argument("--epochs", type=_positive_int, default=3, help="epochs (default 3)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from pipelines.demo import run_demo

        run_demo(accum_steps=args.accum_steps, micro_batch=args.micro_batch, epochs=args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
