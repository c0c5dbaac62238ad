#!/usr/bin/env bash
# Throughput of train_mlp.c next to the same MLP in numpy (dev/bench_mlp_numpy.py), run one
# after the other on this machine: 784-512-256-10, ReLU, batch 128, AdamW, float32, the
# Fashion-MNIST training set. Prints one table. Not a test: a benchmark.
#
#     make train_mlp && bash dev/bench_mlp.sh
#
# train_mlp's figure is the median of its per-epoch samples/s over 3 epochs (forward,
# backward, update, and building each batch from the uint8 images; no validation). numpy's is
# batch / median step time. numpy runs twice: with the environment as it is, and with
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, which some machines set for old OpenBLAS builds
# and which slow a current one (see the header of dev/bench_mlp_numpy.py).
set -eu
BIN=${1:-./train_mlp}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
PY=${PYTHON:-python3}
[ -x "$BIN" ] || { echo "Error: $BIN is not built (make train_mlp)"; exit 1; }
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "Error: no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"; exit 1; }
echo "| implementation | sizes | batch | samples/s |"
echo "|---|---|---|---|"
rate=$("$BIN" -d "$DATA" -l 784,512,256,10 -b 128 -e 3 -v 0 -O adamw | awk '/^epoch/ { for (i = 1; i <= NF; i++) if ($i == "samples/s") print $(i - 1) }' | sort -n | sed -n 2p)
echo "| train_mlp.c ($(nproc) threads) | 784,512,256,10 | 128 | $rate |"
if $PY -c 'import numpy' 2> /dev/null; then
    $PY dev/bench_mlp_numpy.py 2> /dev/null | sed 's/^| numpy |/| numpy (environment as is) |/'
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $PY dev/bench_mlp_numpy.py 2> /dev/null | sed 's/^| numpy |/| numpy (OPENBLAS_* unset) |/'
else
    echo "(numpy not installed: pip install numpy to compare)"
fi
