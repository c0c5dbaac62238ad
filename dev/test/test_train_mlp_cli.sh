#!/usr/bin/env bash
# train_mlp as a user runs it: the gradient check passes, resume is bit-exact,
# bad idx files and bad flags get one clear error, the learning-rate sweep
# reports divergence instead of crashing.
#
#     make train_mlp && bash dev/test/test_train_mlp_cli.sh ./train_mlp
#
# It needs no download: it writes a small fake Fashion-MNIST (idx.gz files made
# of tinyshakespeare's bytes as pixels, labels from a formula) into a temp folder.
# Run it from the repository root.
set -u
BIN=${1:-./train_mlp}
[ -x "$BIN" ] || { echo "Error: $BIN is not built (make train_mlp)"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d /tmp/test_train_mlp.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }

# --- a fake dataset (dev/test/fake_fashion_mnist.sh)
source "$(dirname "$0")/fake_fashion_mnist.sh"
mkdir -p "$TMP/data"
make_split "$TMP/data" train 1200 1 && make_split "$TMP/data" t10k 300 800001
# batches of 64 over 1,000 images: the last batch of every epoch is partial (40);
# warm-up 10 of 64 steps, then the cosine: every part of the schedule is used
COMMON=(-d "$TMP/data" -l 784,32,10 -b 64 -v 200 -e 4 -r 3e-3 -p 0.2 -u 10)

# --- 1. the gradient check
"$BIN" --gradcheck > "$TMP/gc.out" 2>&1 && grep -q "^18 passed, 0 failed" "$TMP/gc.out" &&
    ok "--gradcheck: all 18 tensors of 3 networks within tolerance" || { not_ok "--gradcheck failed"; tail -5 "$TMP/gc.out"; }

# --- 2. a run that stops after epoch 2 and resumes equals an uninterrupted one
for opt in adamw momentum; do
    rm -rf "$TMP/full" "$TMP/part"
    "$BIN" "${COMMON[@]}" -O "$opt" -o "$TMP/full" > "$TMP/full.out" 2>&1 || { not_ok "$opt: uninterrupted run failed"; tail -3 "$TMP/full.out"; continue; }
    mkdir -p "$TMP/part" && cp "$TMP/full/mlp_2.bin" "$TMP/full/metrics.log" "$TMP/part/"
    "$BIN" "${COMMON[@]}" -O "$opt" -o "$TMP/part" -y 1 > "$TMP/part.out" 2>&1
    rc=$?
    strip() { sed -E 's/ s:[0-9.]+//' "$1"; }
    if [ $rc = 0 ] && grep -q "resuming from .*mlp_2.bin: 2 epochs" "$TMP/part.out" && [ "$(grep -c '^epoch' "$TMP/part.out")" = 2 ] &&
       cmp -s "$TMP/full/mlp_4.bin" "$TMP/part/mlp_4.bin" && diff <(strip "$TMP/full/metrics.log") <(strip "$TMP/part/metrics.log") > /dev/null &&
       diff <(sed -n '/^test:/,$p' "$TMP/full.out") <(sed -n '/^test:/,$p' "$TMP/part.out") > /dev/null; then
        ok "$opt with dropout: resumed after epoch 2, identical weights, optimizer state, metrics and test report at epoch 4"
    else
        not_ok "$opt: resumed run differs (exit $rc)"
    fi
done
grep -q "^test: loss .* accuracy" "$TMP/full.out" && grep -q "^most confused" "$TMP/full.out" && grep -q "^Ankle boot" "$TMP/full.out" &&
    ok "the final report has test accuracy, confusion matrix and most confused pairs" || not_ok "final report incomplete"

# --- 3. bad input: one clear message naming the file, non-zero exit
expect_error() {
    local name=$1 pattern=$2
    shift 3
    "$BIN" "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    if [ $rc != 0 ] && grep -qE -- "$pattern" "$TMP/err" && [ "$(grep -c '^Error' "$TMP/err")" = 1 ]; then
        ok "$name: exit $rc, $(grep '^Error' "$TMP/err" | cut -c1-100)"
    else
        not_ok "$name: exit $rc, stderr: $(head -3 "$TMP/err")"
    fi
}
bad() { rm -rf "$TMP/bad"; cp -r "$TMP/data" "$TMP/bad"; }
expect_error "missing data folder" "cannot open .$TMP/nope/train-images-idx3-ubyte.gz" -- "${COMMON[@]}" -d "$TMP/nope"
grep -q "HINT: apt-get install dataset-fashion-mnist" "$TMP/err" && ok "missing data gives the install hint" || not_ok "no install hint"
bad; { be32 2049; be32 1200; be32 28; be32 28; } | gzip -n > "$TMP/bad/train-images-idx3-ubyte.gz"
expect_error "images file with a labels magic" "train-images-idx3-ubyte.gz: bad idx magic number: expected 2051" -- "${COMMON[@]}" -d "$TMP/bad"
bad; gzip -dc "$TMP/data/train-images-idx3-ubyte.gz" | head -c 50000 | gzip -n > "$TMP/bad/train-images-idx3-ubyte.gz"
expect_error "truncated images" "train-images-idx3-ubyte.gz: file ends after" -- "${COMMON[@]}" -d "$TMP/bad"
bad; head -c 3000 "$TMP/data/train-images-idx3-ubyte.gz" > "$TMP/bad/train-images-idx3-ubyte.gz"
expect_error "cut-off gzip stream" "train-images-idx3-ubyte.gz: (file ends|cannot decompress)" -- "${COMMON[@]}" -d "$TMP/bad"
bad; { be32 2049; be32 1100; gzip -dc "$TMP/data/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c 1100; } | gzip -n > "$TMP/bad/train-labels-idx1-ubyte.gz"
expect_error "fewer labels than images" "has 1200 images but .*train-labels-idx1-ubyte.gz has 1100 labels" -- "${COMMON[@]}" -d "$TMP/bad"
bad; { be32 2049; be32 1200; printf '\x0c'; gzip -dc "$TMP/data/train-labels-idx1-ubyte.gz" | tail -c +10; } | gzip -n > "$TMP/bad/train-labels-idx1-ubyte.gz"
expect_error "a label that is not a class" "train-labels-idx1-ubyte.gz: label 0 is 12" -- "${COMMON[@]}" -d "$TMP/bad"
bad; { gzip -dc "$TMP/data/t10k-labels-idx1-ubyte.gz"; printf 'xx'; } | gzip -n > "$TMP/bad/t10k-labels-idx1-ubyte.gz"
expect_error "trailing bytes" "t10k-labels-idx1-ubyte.gz: more data than its header says" -- "${COMMON[@]}" -d "$TMP/bad"
{ be32 2051; be32 2; be32 2147483649; be32 4294967295; } | gzip -n > "$TMP/huge.gz"; bad; cp "$TMP/huge.gz" "$TMP/bad/train-images-idx3-ubyte.gz"
expect_error "idx header with absurd sizes (no huge allocation)" "train-images-idx3-ubyte.gz: idx dimensions 2 2147483649 4294967295 do not fit" -- "${COMMON[@]}" -d "$TMP/bad"
bad; { be32 2051; be32 1200; be32 32; be32 32; gzip -dc "$TMP/data/train-images-idx3-ubyte.gz" | tail -c +17; } | gzip -n > "$TMP/bad/train-images-idx3-ubyte.gz"
expect_error "images that are not 28x28" "idx dimensions 1200 32 32 do not fit" -- "${COMMON[@]}" -d "$TMP/bad"
expect_error "batch larger than the data (also in a sweep)" "batch size -b 300 is larger than the 100 training images" -- "${COMMON[@]}" -N 100 -b 300 --sweep 0.01
expect_error "layers not ending in 10" "-l must start with 784" -- "${COMMON[@]}" -l 784,32,5
expect_error "unknown activation" "-a is relu or tanh, not 'sigmoid'" -- "${COMMON[@]}" -a sigmoid
expect_error "unknown optimizer" "-O is sgd, momentum or adamw" -- "${COMMON[@]}" -O rmsprop
expect_error "dropout out of range" "flag -p needs a number in \[0, 0.95\]" -- "${COMMON[@]}" -p 1.5
expect_error "unknown flag" "unknown flag '-Z'" -- "${COMMON[@]}" -Z 1
expect_error "a new run into a folder with checkpoints" "already holds checkpoints" -- "${COMMON[@]}" -O momentum -o "$TMP/full"
cp "$TMP/full/mlp_4.bin" "$TMP/keep.bin"; head -c 5000 "$TMP/keep.bin" > "$TMP/full/mlp_4.bin"
expect_error "resume from a truncated checkpoint" "mlp_4.bin: (has 5000 bytes|corrupt)" -- "${COMMON[@]}" -O momentum -o "$TMP/full" -y 1
cp "$TMP/keep.bin" "$TMP/full/mlp_4.bin"
expect_error "resume with another learning rate" "mlp_4.bin was written with -r 0.003 .*; this run has -r 0.01" -- "${COMMON[@]}" -O momentum -r 0.01 -o "$TMP/full" -y 1
expect_error "resume with more epochs (would change the schedule)" "this run has .* -e 6" -- "${COMMON[@]}" -O momentum -e 6 -o "$TMP/full" -y 1
expect_error "resume with other layer sizes" "written with other -l" -- "${COMMON[@]}" -l 784,64,10 -O momentum -o "$TMP/full" -y 1

# --- -P: every 5th step timed by phase; each epoch's line gives their mean, which adds up to
# the same steps timed whole
source "$(dirname "$0")/phases_check.sh"
"$BIN" "${COMMON[@]}" -e 2 -P 5 -o "$TMP/phases" > "$TMP/phases.out" 2>&1
read -r lines worst zero <<< "$(phase_lines "$TMP/phases.out")"
if [ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.011) }' && grep -q "(-P 5: 3 steps)" "$TMP/phases.out" &&
   [ "$(grep -c " ms_forward:" "$TMP/phases/metrics.log")" = 2 ]; then
    ok "-P 5: 3 steps an epoch timed by phase, their mean adding up to the step's (within $worst ms), in metrics.log too"
else
    not_ok "-P 5: $lines lines with phases (worst $worst ms, $zero empty passes)"; grep -E "phases|^epoch" "$TMP/phases.out" "$TMP/phases/metrics.log" | head -6
fi
expect_error "-P that is not a count" "flag -P needs an integer >= 0" -- "${COMMON[@]}" -P x

# --- 4. the learning-rate sweep reports divergence instead of crashing
if "$BIN" "${COMMON[@]}" -O sgd -k 40 --sweep 0.01,0.5,1000 > "$TMP/sweep.out" 2>&1 && grep -qE "^\| 1000 \|.*diverges" "$TMP/sweep.out" &&
   grep -qE "^\| 0.01 \|.*(converges|too slow)" "$TMP/sweep.out"; then
    ok "--sweep: a table with one row per rate; 1000 diverges, 0.01 does not"
else
    not_ok "--sweep output unexpected:"; cat "$TMP/sweep.out" | tail -5
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
