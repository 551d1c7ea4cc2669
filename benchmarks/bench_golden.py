"""Time an int8 GoogLeNet (Inception v1) forward pass at 224x224 through the golden integer ops.

The layer sequence is Inception v1's (conv 7x7/2, max pool, LRN, conv 1x1 + 3x3, LRN, max pool,
nine inception modules, global average pool, fc 1000, softmax), built directly from
``dlproc.targets.golden.ops`` calls with random int8 data and weights. Requantization multipliers are chosen
from each accumulator's spread (as calibration would), so ReLU activations (zero point -128) span
the whole int8 range like real ones; that matters because the conv picks its matmul arithmetic from
the operands' actual magnitudes. This is a speed figure, not a test: it prints seconds per op kind,
the total, and how many convs took the float32 / float64 / int64 matmul path.

    python benchmarks/bench_golden.py [--batch N] [--repeat R] [--threads T]

On a shared machine pass ``--threads 1``: a multi-threaded BLAS competing with other jobs for the
cores is slower and far noisier than one thread.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from dlproc.targets.golden import ops
from dlproc.hardware.numerics import quantize_multiplier

# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) of each inception module.
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32),
    "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64),
    "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}
CEIL_POOL_PADS = (0, 0, 1, 1)  # Caffe's ceil-mode 3x3/2 pooling as explicit bottom/right padding


class Net:
    """Random int8 layers, created on first use and timed per op kind."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.seconds: dict[str, float] = defaultdict(float)
        self.macs = 0
        self.paths: dict[str, int] = defaultdict(int)
        lrn = ops.lrn_params(5, 1e-4, 0.75, 1.0, s_in=0.9, s_out=0.6)
        self.lrn_tables = (lrn.mult, lrn.shift)

    def timed(self, kind: str, fn, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[kind] += time.perf_counter() - start
        return out

    def conv(self, x, cout, k, stride=1, pad=0):
        cin = x.shape[1]
        w = self.rng.integers(-128, 128, (cout, cin, k, k)).astype(np.int8)
        bias = self.rng.integers(-5000, 5000, cout).astype(np.int32)
        acc = self.timed("conv", ops.conv2d, x, w, bias, stride, pad, 1, 1, -128)
        self.paths[ops._matmul_dtype(cin * k * k, int(np.abs(x.astype(np.int16) + 128).max()), 128).__name__] += 1
        # Calibrated output scale: one standard deviation of the accumulator becomes 60 codes.
        mult, shift = quantize_multiplier(60.0 / max(float(acc.std()), 1.0))
        self.macs += acc.size // x.shape[0] * cin * k * k
        return self.timed("requantize", ops.requantize, acc, mult, shift, -128, -128, 127)  # fused ReLU

    def maxpool(self, x, k=3, stride=2, pads=CEIL_POOL_PADS):
        return self.timed("maxpool", ops.maxpool, x, k, stride, pads)

    def lrn(self, x):
        return self.timed("lrn", ops.lrn, x, 5, -128, *self.lrn_tables, -128)

    def inception(self, x, spec):
        c1, r3, c3, r5, c5, pp = spec
        b1 = self.conv(x, c1, 1)
        b2 = self.conv(self.conv(x, r3, 1), c3, 3, pad=1)
        b3 = self.conv(self.conv(x, r5, 1), c5, 5, pad=2)
        b4 = self.conv(self.maxpool(x, 3, 1, 1), pp, 1)
        return self.timed("concat", ops.concat, [b1, b2, b3, b4])

    def forward(self, x):
        x = self.conv(x, 64, 7, stride=2, pad=3)  # 112x112
        x = self.lrn(self.maxpool(x))  # 56x56
        x = self.conv(self.conv(x, 64, 1), 192, 3, pad=1)
        x = self.maxpool(self.lrn(x))  # 28x28
        for name in ("3a", "3b"):
            x = self.inception(x, INCEPTION[name])
        x = self.maxpool(x)  # 14x14
        for name in ("4a", "4b", "4c", "4d", "4e"):
            x = self.inception(x, INCEPTION[name])
        x = self.maxpool(x)  # 7x7
        for name in ("5a", "5b"):
            x = self.inception(x, INCEPTION[name])
        mult, shift = ops.pool_multiplier(1.0, 1.0, 49)
        x = self.timed("avgpool", ops.global_avgpool, x, -128, mult, shift, -128)
        w = self.rng.integers(-128, 128, (1000, x.shape[1])).astype(np.int8)
        acc = self.timed("fc", ops.fully_connected, x, w, np.zeros(1000, np.int32), -128)
        self.macs += 1000 * x.shape[1]
        logits = self.timed("requantize", ops.requantize, acc, *quantize_multiplier(40.0 / (74 * 74 * 32.0)))
        return self.timed("softmax", ops.softmax, logits, 0.1, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: BLAS's own)")
    args = parser.parse_args()
    if args.threads is not None:
        from threadpoolctl import threadpool_limits  # installed with scikit-learn

        threadpool_limits(args.threads)
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (args.batch, 3, 224, 224)).astype(np.int8)
    times = []
    for _ in range(args.repeat):
        net = Net()
        start = time.perf_counter()
        probs = net.forward(x)
        times.append(time.perf_counter() - start)
    assert probs.shape == (args.batch, 1000)
    print(f"int8 GoogLeNet 224x224, batch {args.batch}: {net.macs / 1e9:.2f} G MACs per image")
    print(f"forward pass: best {min(times):.2f} s, mean {np.mean(times):.2f} s over {args.repeat} runs "
          "(including the generation of random weights)")
    print(f"golden ops alone (last run): {sum(net.seconds.values()):.2f} s")
    print("  conv matmul paths: " + ", ".join(f"{k} x{v}" for k, v in sorted(net.paths.items())))
    for kind, sec in sorted(net.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:11s} {sec:7.3f} s (last run)")


if __name__ == "__main__":
    main()
