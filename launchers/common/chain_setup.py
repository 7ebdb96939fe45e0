"""The training chain's set-up that is not its lesson (train_step1..6: notebooks 04, 05).

The command line for the data, the model and the run; the data splits; GPU kernels that are
the same in every run; several runs in one launch (steps 5 and 6: --variant). What each step
teaches (the sampler, logging, checkpoints, evaluation) and its own options stay in its
launcher.
"""

import os
import sys

import torch
from torch.utils.data import TensorDataset

from common.glyphs import make_dataset


def add_chain_options(parser, several_runs=False):
    """The data set's, the model's and the run's options (`--help` lists their defaults);
    several_runs: --variant too (see variants)."""
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--test-size", type=int, default=1024)
    parser.add_argument("--noise", type=float, default=0.6, help="pixel noise (std)")
    parser.add_argument("--similar", type=int, default=4, help="pixels between look-alike classes")
    parser.add_argument("--label-noise", type=float, default=0.1, help="training labels only")
    parser.add_argument("--norm", choices=["batch", "layer", "none"], default="batch",
                        help="BatchNorm, LayerNorm over channels, or none")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup", type=int, default=10, help="optimizer steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json and logs (rank 0)")
    if several_runs:
        parser.add_argument("--variant", action="append", default=[], metavar="OPTIONS",
                            help='train once per --variant "OPTIONS" (added to the others) '
                            "into OUT/0, OUT/1, ...: several runs in one launch")
    return parser


def glyph_splits(args):
    """(train_set, test_x, test_y): the training set as a TensorDataset (seed 1, a fraction
    --label-noise of its labels random) and the held-out test set (seed 2, never trained on)."""
    size = {"image_size": args.image_size, "classes": args.classes, "noise": args.noise,
            "similar": args.similar}
    train_x, train_y = make_dataset(args.train_size, seed=1, label_noise=args.label_noise, **size)
    test_x, test_y = make_dataset(args.test_size, seed=2, **size)
    return TensorDataset(train_x, train_y), test_x, test_y


def same_gpu_kernels():
    """The same kernels in every run (a resumed run can then match an uninterrupted one):
    cuDNN's default may pick another, nondeterministic or TF32, algorithm per run."""
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False


def variants(parser, args):
    """The options of each run this launch makes, one after another in one process group:
    each --variant's options added to the command line's, into OUT/0, OUT/1, ...; without
    --variant, one run as the command line says."""
    for i, options in enumerate(args.variant or [""]):
        run_args = parser.parse_args([*sys.argv[1:], *options.split()])
        if args.variant:
            run_args.out = os.path.join(args.out, str(i))
        yield run_args
