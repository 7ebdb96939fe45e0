"""The data set and the model of the training chain (notebooks 04, 05, 09, 11): not its lesson.

A synthetic image-classification set made in code (no download): each class is a fixed 5x5
glyph, each image a noisy copy of one glyph at a random place. `Net` is a compact CNN, and
`lr_at` its warmup-then-cosine schedule, a pure function of the step (resume-safe).
"""

import math

import torch
import torch.nn as nn


def make_dataset(n, seed, image_size=16, classes=8, noise=0.3, similar=0, label_noise=0.0):
    """n noisy images, each one of `classes` fixed 5x5 glyphs at a random place: (x, y).
    similar=K: class 2c+1's glyph is class 2c's with only K of its 25 pixels flipped;
    label_noise=p: a fraction p of the labels replaced by random classes."""
    glyphs = torch.rand(classes, 5, 5, generator=torch.Generator().manual_seed(1234))
    glyphs = glyphs.round() * 2 - 1  # +1/-1 pixels: the same glyphs for every split
    flips = torch.Generator().manual_seed(4321)
    for c in range(1, classes, 2) if similar else []:  # pairs of look-alike classes
        flip = torch.randperm(25, generator=flips)[:similar]
        glyphs[c] = glyphs[c - 1]
        glyphs[c].view(-1)[flip] *= -1
    g = torch.Generator().manual_seed(seed)  # a different seed for each split
    labels = torch.randint(classes, (n,), generator=g)
    rows = torch.randint(image_size - 4, (n,), generator=g)
    cols = torch.randint(image_size - 4, (n,), generator=g)
    images = noise * torch.randn(n, 1, image_size, image_size, generator=g)
    for i in range(n):
        images[i, 0, rows[i] : rows[i] + 5, cols[i] : cols[i] + 5] += glyphs[labels[i]]
    noisy = torch.rand(n, generator=g) < label_noise  # no draw changes the images above
    labels = torch.where(noisy, torch.randint(classes, (n,), generator=g), labels)
    return images, labels


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of each pixel (as in ConvNeXt): no batch statistics."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Net(nn.Module):
    """A compact CNN: three conv blocks, a global max-pool, a linear classifier."""

    def __init__(self, classes=8, width=16, norm="batch"):
        super().__init__()

        def block(c_in, c_out):
            norm_layer = {"batch": nn.BatchNorm2d, "layer": ChannelLayerNorm,
                          "none": lambda c: nn.Identity()}[norm](c_out)
            # no bias before BatchNorm: it subtracts each channel's mean, cancelling any bias
            conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=norm != "batch")
            return nn.Sequential(conv, norm_layer, nn.ReLU())

        self.features = nn.Sequential(
            block(1, width), nn.MaxPool2d(2), block(width, 2 * width), nn.MaxPool2d(2),
            block(2 * width, 2 * width),
        )  # fmt: skip
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.head(self.features(x).amax(dim=(2, 3)))


def lr_at(step, total_steps, args):
    """Linear warmup, then cosine decay to zero: a pure function of the step (resume-safe)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, total_steps - args.warmup)
    return args.lr * 0.5 * (1 + math.cos(math.pi * progress))
