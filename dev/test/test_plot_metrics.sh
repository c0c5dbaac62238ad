#!/usr/bin/env bash
# Tests dev/plot_metrics.py: it reads the metrics log of each training program (a real
# train_gpt2 run's main.log; train_mlp's and finetune_lora's in their programs' formats),
# finds a log in a run's folder, overlays runs, refuses what it cannot read with the
# file and line, and draws a PNG (where matplotlib is installed; the reading needs only
# python3). Without python3 the test says so and counts nothing.
#
#   bash dev/test/test_plot_metrics.sh
set -u
if ! command -v python3 > /dev/null; then
    echo "python3 is not installed: dev/plot_metrics.py is not tested here"
    echo "0 passed, 0 failed"
    exit 0
fi
PLOT="python3 dev/plot_metrics.py"
TMP=$(mktemp -d /tmp/test_plot_metrics.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
report() {  # report NAME OK(0/1) [detail]
    if [ "$2" = 1 ]; then
        printf '%-72s OK\n' "$1"; passed=$((passed + 1))
    else
        printf '%-72s NOT OK\n' "$1"; failed=$((failed + 1))
        [ -n "${3:-}" ] && printf '  %s\n' "$3"
    fi
}

# train_gpt2: a real run's log (4 steps, validation at 0, 2 and 4)
mkdir -p "$TMP/gpt2"
if [ -x ./train_gpt2 ]; then
    ./train_gpt2 -e d1 -x 4 -v 2 -s 0 -b 2 -t 16 -o "$TMP/gpt2" > "$TMP/gpt2.out" 2>&1
fi
$PLOT "$TMP/gpt2" --print > "$TMP/out" 2>&1
report "train_gpt2's main.log (found in its folder): 4 training losses, 3 validation" \
    $(grep -q "main.log: train_gpt2, x = step" "$TMP/out" && grep -q "train loss: 4 points, step 1..4" "$TMP/out" &&
      grep -q "val loss: 3 points, step 0..4" "$TMP/out" && grep -q "learning rate: 4 points" "$TMP/out" && echo 1 || echo 0) "$(cat "$TMP/out")"

# train_mlp: its metrics.log line (train_mlp.c's format)
mkdir -p "$TMP/mlp"
for e in 1 2 3; do
    printf 'epoch:%d train_loss:%.9g train_acc:%.9g val_loss:%.9g val_acc:%.9g s:%.3f\n' $e "0.$((9 - e))" "0.$((6 + e))" "0.$((8 - e))" "0.$((5 + e))" 1.5
done > "$TMP/mlp/metrics.log"
$PLOT "$TMP/mlp" --print > "$TMP/out" 2>&1
report "train_mlp's metrics.log: losses and accuracies by epoch" \
    $(grep -q "train_mlp, x = epoch" "$TMP/out" && grep -q "val loss: 3 points, epoch 1..3, min 0.5, last 0.5" "$TMP/out" &&
      grep -q "val accuracy: 3 points" "$TMP/out" && echo 1 || echo 0) "$(cat "$TMP/out")"

# finetune_lora: metrics.tsv with the header finetune_lora.c writes (read from its source)
header=$(sed -n 's/^#define METRICS_HEADER "\([^"]*\)".*/\1/p' finetune_lora.c)
{
    printf '%b' "$header"
    printf '0\t\t\t\t1.25\t\t\t\t\t\t\n'
    for s in 1 2 3 4; do # (-P 2's phases on steps 2 and 4)
        printf '%d\t0.0001\t1.%d\t0.5\t%s\t150.0' $s $((5 - s)) "$([ $s = 4 ] && echo 0.75)"
        if [ $((s % 2)) = 0 ]; then printf '\t0.1\t20.5\t30.25\t1.0\t2.0\n'; else printf '\t\t\t\t\t\n'; fi
    done
} > "$TMP/lora.tsv"
$PLOT "$TMP/lora.tsv" --print > "$TMP/out" 2>&1
report "finetune_lora's metrics.tsv: the base model's val loss at 0, 4 steps" \
    $([ -n "$header" ] && grep -q "finetune_lora, x = step" "$TMP/out" && grep -q "val loss: 2 points, step 0..4, min 0.75" "$TMP/out" &&
      grep -q "train loss: 4 points, step 1..4, min 1.1" "$TMP/out" && echo 1 || echo 0) "$(cat "$TMP/out")"

# what it refuses: one line naming the file (and the line), exit 1
expect_error() {  # NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    $PLOT "$@" > "$TMP/stdout" 2> "$TMP/stderr"
    local status=$?
    report "$name" $([ $status = 1 ] && grep -qF -- "$needle" "$TMP/stderr" && echo 1 || echo 0) "exit $status: $(head -2 "$TMP/stderr" | tr '\n' ' ')"
}
printf 'hello world\n' > "$TMP/other.log"
expect_error "a file that is no metrics log" "$TMP/other.log: not a metrics log" "$TMP/other.log" --print
printf 's:1 trl:2.5 lr:0.1\ns:2 trl:oops\n' > "$TMP/bad.log"
expect_error "a value that is not a number: the line" "$TMP/bad.log: line 2: 'oops' is not a number" "$TMP/bad.log" --print
head -3 "$TMP/lora.tsv" > "$TMP/short.tsv"; printf '5\t0.1\n' >> "$TMP/short.tsv"
expect_error "a TSV line of the wrong width" "$TMP/short.tsv: line 4: 2 fields, the header has 11" "$TMP/short.tsv" --print
expect_error "no such file" "$TMP/none: no such file or folder" "$TMP/none" --print
mkdir -p "$TMP/empty_run"
expect_error "a folder without a log" "$TMP/empty_run: no metrics log in it" "$TMP/empty_run" --print
expect_error "epochs and steps on one axis" "do not share an axis" "$TMP/mlp" "$TMP/lora.tsv" --print
expect_error "-o that is not .png" "the plot is a PNG" "$TMP/lora.tsv" -o "$TMP/plot.jpg"

# drawing (needs matplotlib)
if python3 -c "import matplotlib" 2> /dev/null; then
    $PLOT "$TMP/gpt2" "$TMP/lora.tsv" -o "$TMP/both.png" --smooth 2 --title "two runs" > "$TMP/out" 2>&1
    report "two runs overlaid: a PNG" $([ "$(head -c 8 "$TMP/both.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] && echo 1 || echo 0) "$(cat "$TMP/out")"
    $PLOT "$TMP/mlp" -o "$TMP/mlp.png" > "$TMP/out" 2>&1
    report "train_mlp's run: a PNG with its accuracy panel" $([ -s "$TMP/mlp.png" ] && grep -q "wrote $TMP/mlp.png" "$TMP/out" && echo 1 || echo 0)
    before=$(sha256sum < "$TMP/mlp.png")
    $PLOT "$TMP/bad.log" -o "$TMP/mlp.png" > /dev/null 2>&1
    report "a failed run leaves the PNG already there as it was" $([ "$before" = "$(sha256sum < "$TMP/mlp.png")" ] && echo 1 || echo 0)
else
    echo "matplotlib is not installed: the drawing is not tested (pip install matplotlib)"
fi

echo
echo "$passed passed, $failed failed"
[ $failed = 0 ]
