#!/usr/bin/env bash
# train_gpt2 as a user runs it: resume is bit-exact, bad input gets one clear
# error, and a failed run never touches an existing checkpoint.
#
#     make train_gpt2 data/tokenizer && bash dev/test/test_train_gpt2_cli.sh ./train_gpt2
#
# Everything runs on a small model (d1) and a small shard cut from tinyshakespeare,
# so the whole script takes well under a minute on 2 cores.
set -u
BIN=${1:-./train_gpt2}
TOK=${2:-./data/tokenizer}
for b in "$BIN" "$TOK"; do
    [ -x "$b" ] || { echo "Error: $b is not built (make train_gpt2 data/tokenizer)"; echo "0 passed, 1 failed"; exit 1; }
done
TMP=$(mktemp -d /tmp/test_train_gpt2.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }

# a small corpus: 20 KB of tinyshakespeare, about 6,000 tokens, as one shard
head -c 20000 data/tinyshakespeare/input.txt > "$TMP/small.txt"
"$TOK" -e -i "$TMP/small.txt" -o "$TMP/small.bin" -t "" > /dev/null || { not_ok "could not make the test shard"; echo "$passed passed, $failed failed"; exit 1; }
COMMON=(-e d1 -b 4 -t 32 -i "$TMP/small.bin" -j "$TMP/small.bin" -k data/gpt2_tokenizer.bin -l 3e-3 -u 3 -m 2 -g 8)

# --- 1. a run that stops and resumes reproduces an uninterrupted run bit for bit
# resume_case NAME EVERY OPTIONS...: an uninterrupted run of 60 steps with a
# checkpoint every EVERY steps; then the run "as it stood" after its first
# checkpoint (its log still holding the lines written after it, as when a run
# dies) is resumed with -y 1. The two must agree on every logged number but the
# timing, on every sample, and on the final model and optimizer state, byte for byte.
strip_ms() { sed -E 's/ ms:[0-9.]+//' "$1"; }
resume_case() {
    local name=$1 every=$2
    shift 2
    local full="$TMP/full_$every" part="$TMP/resumed_$every" first
    first=$(printf '%08d' "$every")
    "$BIN" "${COMMON[@]}" -x 60 -n "$every" "$@" -o "$full" > "$full.out" 2>&1 || { not_ok "$name: uninterrupted run failed"; tail -3 "$full.out"; return; }
    mkdir -p "$part"
    cp "$full/model_$first.bin" "$full/state_$first.bin" "$full/main.log" "$part/"
    "$BIN" "${COMMON[@]}" -x 60 -n "$every" "$@" -o "$part" -y 1 > "$part.out" 2>&1
    local rc=$?
    if [ $rc = 0 ] && grep -q "resuming from .*state_$first.bin at step $every" "$part.out" &&
       diff <(strip_ms "$full/main.log") <(strip_ms "$part/main.log") > "$TMP/diff" &&
       cmp -s "$full/model_00000060.bin" "$part/model_00000060.bin" && cmp -s "$full/state_00000060.bin" "$part/state_00000060.bin" &&
       diff <(sed -n "/^wrote checkpoint .*model_$first.bin/,\$p" "$full.out" | grep -v -e ' ms |' -e '^wrote') \
            <(grep -v -e ' ms |' -e '^wrote' -e '^resuming' -e '^model:' -e '^data:' -e '^batch:' -e '^hardware:' -e '^memory:' "$part.out") > "$TMP/diff_out"; then
        ok "$name: resumed at step $every, identical log, samples, model and optimizer state at step 60"
    else
        not_ok "$name: resumed run differs (exit $rc)"; head -5 "$TMP/diff" "$TMP/diff_out"
    fi
}
# 60 steps of 4 x 32 tokens cross the shard's end (188 sequences = 47 batches):
# the runs must also reshuffle the next epoch alike
resume_case "checkpoint mid-epoch" 25 -v 10 -s 30
resume_case "checkpoint on a validation and sample step" 20 -v 10 -s 20
resume_case "checkpoint at the end of the data (sequence 188 of 188)" 47 -v 10 -s 0
ls "$TMP"/full_*/*.tmp > /dev/null 2>&1 && not_ok "a .tmp file was left behind" || ok "no .tmp files left behind"

# two shards of 9 and 6 sequences, in a shuffled order that changes every epoch:
# batches of 4 straddle shards and epochs; resuming from every one of 19
# checkpoints must end in the same model
mkdir -p "$TMP/two"
head -c 1100 data/tinyshakespeare/input.txt > "$TMP/a.txt"
tail -c 700 data/tinyshakespeare/input.txt > "$TMP/b.txt"
"$TOK" -e -i "$TMP/a.txt" -o "$TMP/two/shard_a.bin" -t "" > /dev/null && "$TOK" -e -i "$TMP/b.txt" -o "$TMP/two/shard_b.bin" -t "" > /dev/null
TWO=(-e d1 -b 4 -t 32 -i "$TMP/two/shard_*.bin" -j "$TMP/small.bin" -v 0 -s 0 -x 20 -n 1)
"$BIN" "${TWO[@]}" -o "$TMP/two_full" > /dev/null 2>&1 || not_ok "two-shard run failed"
bad_steps=""
for k in $(seq 1 19); do
    rm -rf "$TMP/two_part"; mkdir -p "$TMP/two_part"
    cp "$TMP/two_full/model_$(printf '%08d' $k).bin" "$TMP/two_full/state_$(printf '%08d' $k).bin" "$TMP/two_part/"
    "$BIN" "${TWO[@]}" -o "$TMP/two_part" -y 1 > /dev/null 2>&1 && cmp -s "$TMP/two_full/model_00000020.bin" "$TMP/two_part/model_00000020.bin" || bad_steps="$bad_steps $k"
done
[ -z "$bad_steps" ] && ok "two shards: resuming from each of steps 1..19 ends in the same model" || not_ok "two shards: resuming from step(s)$bad_steps differs"

# --- 2. bad input: one clear message naming the file, a non-zero exit
# expect_error NAME PATTERN -- ARGS...: run, want exit != 0 and stderr matching PATTERN
expect_error() {
    local name=$1 pattern=$2
    shift 3
    "$BIN" "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    if [ $rc != 0 ] && grep -qE -- "$pattern" "$TMP/err" && [ "$(grep -c '^Error' "$TMP/err")" = 1 ] && ! grep -q "Segmentation\|core dumped" "$TMP/err"; then
        ok "$name: exit $rc, $(grep '^Error' "$TMP/err" | cut -c1-110)"
    else
        not_ok "$name: exit $rc, stderr: $(head -3 "$TMP/err")"
    fi
}
cp "$TMP/full_25/model_00000060.bin" "$TMP/good_model.bin"
head -c 100000 "$TMP/good_model.bin" > "$TMP/truncated_model.bin"
head -c 500 "$TMP/good_model.bin" > "$TMP/short_model.bin"
{ printf 'this is not a model file'; head -c 2000 /dev/zero; } > "$TMP/wrong_magic.bin"
cp "$TMP/small.bin" "$TMP/bad_magic_shard.bin"; printf '\x01\x02\x03\x04' | dd of="$TMP/bad_magic_shard.bin" bs=1 conv=notrunc status=none
head -c 5000 "$TMP/small.bin" > "$TMP/truncated_shard.bin"
# a shard whose token 100 is 60000, beyond GPT-2's 50257
cp "$TMP/small.bin" "$TMP/big_token.bin"; printf '\x60\xea' | dd of="$TMP/big_token.bin" bs=1 seek=$((1024 + 200)) conv=notrunc status=none
expect_error "missing training data" "no data file matches '$TMP/nope.bin'" -- "${COMMON[@]}" -i "$TMP/nope.bin" -o ""
expect_error "missing model file" "d-not-a-file.bin" -- "${COMMON[@]}" -e "$TMP/d-not-a-file.bin" -o ""
expect_error "truncated checkpoint" "truncated_model.bin.*truncated" -- "${COMMON[@]}" -e "$TMP/truncated_model.bin" -o ""
expect_error "checkpoint shorter than its header" "short_model.bin.*too short" -- "${COMMON[@]}" -e "$TMP/short_model.bin" -o ""
expect_error "wrong magic checkpoint" "wrong_magic.bin.*bad magic" -- "${COMMON[@]}" -e "$TMP/wrong_magic.bin" -o ""
expect_error "wrong magic shard" "bad_magic_shard.bin.*not a token shard" -- "${COMMON[@]}" -i "$TMP/bad_magic_shard.bin" -o ""
expect_error "truncated shard" "truncated_shard.bin.*truncated" -- "${COMMON[@]}" -i "$TMP/truncated_shard.bin" -o ""
expect_error "token id >= vocab size" "big_token.bin: token 100 has id 60000" -- "${COMMON[@]}" -i "$TMP/big_token.bin" -o ""
expect_error "batch x seq longer than the data" "small.bin: the data holds 47 sequences of T\+1 = 129 tokens, fewer than the B = 64" -- "${COMMON[@]}" -b 64 -t 128 -o ""
expect_error "sequence longer than the model's" "-t 2048 is longer" -- "${COMMON[@]}" -t 2048 -o ""
expect_error "flag that is not a number" "flag -b needs an integer" -- "${COMMON[@]}" -b abc -o ""
expect_error "negative learning rate" "flag -l needs a non-negative number" -- "${COMMON[@]}" -l -1 -o ""
expect_error "unknown flag" "unknown flag '-Q'" -- "${COMMON[@]}" -Q 3 -o ""
expect_error "flag without a value" "flag -x needs a value" -- "${COMMON[@]}" -o "" -x
expect_error "stray argument" "unknown argument 'foo'" -- "${COMMON[@]}" foo -o ""
expect_error "bad model descriptor" "d0.*neither an existing file nor a descriptor" -- "${COMMON[@]}" -e d0 -o ""
expect_error "total batch not a multiple of B*T" "not a multiple of B\*T" -- "${COMMON[@]}" -d 1000 -o ""
# a checkpoint whose header claims 100000 layers
cp "$TMP/good_model.bin" "$TMP/huge_header.bin"; printf '\xa0\x86\x01\x00' | dd of="$TMP/huge_header.bin" bs=1 seek=16 conv=notrunc status=none
expect_error "checkpoint header with absurd sizes" "huge_header.bin: impossible model shape" -- "${COMMON[@]}" -e "$TMP/huge_header.bin" -o ""
head -c 3000 data/gpt2_tokenizer.bin > "$TMP/short_tokenizer.bin"
expect_error "truncated tokenizer" "short_tokenizer.bin: ends inside token" -- "${COMMON[@]}" -k "$TMP/short_tokenizer.bin" -o ""
cp data/gpt2_tokenizer.bin "$TMP/eot_tokenizer.bin"; printf '\x9f\x86\x01\x00' | dd of="$TMP/eot_tokenizer.bin" bs=1 seek=12 conv=notrunc status=none
expect_error "tokenizer end-of-text id beyond the vocabulary" "eot_tokenizer.bin: .*end-of-text id 99999" -- "${COMMON[@]}" -k "$TMP/eot_tokenizer.bin" -o ""
head -c 1100 "$TMP/small.bin" > "$TMP/tiny_shard.bin"; printf '\x26\x00\x00\x00' | dd of="$TMP/tiny_shard.bin" bs=1 seek=8 conv=notrunc status=none
expect_error "a shard shorter than one sequence" "tiny_shard.bin: has 38 tokens, fewer than the T\+1" -- "${COMMON[@]}" -i "$TMP/tiny_shard.bin" -t 64 -o ""
expect_error "more validation batches than the data" "-m 100 validation batches" -- "${COMMON[@]}" -m 100 -o ""
expect_error "samples longer than the sequence" "-g 40 tokens per sample" -- "${COMMON[@]}" -g 40 -s 10 -o ""
expect_error "diverging training stops" "training diverged" -- "${COMMON[@]}" -l 1e30 -z 0 -x 5 -v 0 -s 0 -o ""
expect_error "resume without a checkpoint" "no checkpoint .* in $TMP/empty" -- "${COMMON[@]}" -y 1 -o "$TMP/empty"

# --- 3. a failed run never touches an existing checkpoint
FULL="$TMP/full_25"
sums_before=$(cd "$FULL" && sha256sum model_* state_* main.log)
expect_error "resume with other flags than the checkpoint's" "written with -b 4 -t 32" -- "${COMMON[@]}" -b 2 -x 60 -o "$FULL" -y 1
expect_error "resume with a corrupt validation file" "bad_magic_shard.bin" -- "${COMMON[@]}" -x 70 -j "$TMP/bad_magic_shard.bin" -o "$FULL" -y 1
expect_error "a new run into a directory with checkpoints" "$FULL already holds checkpoints" -- "${COMMON[@]}" -x 60 -n 10 -o "$FULL"
cp "$FULL/state_00000060.bin" "$TMP/state_backup.bin"
head -c 3000 "$TMP/state_backup.bin" > "$FULL/state_00000060.bin"
expect_error "resume from a truncated state file" "state_00000060.bin: has 3000 bytes" -- "${COMMON[@]}" -x 60 -o "$FULL" -y 1
cp "$TMP/state_backup.bin" "$FULL/state_00000060.bin"
expect_error "resume when -x is already reached" "state after step 60; nothing left to do" -- "${COMMON[@]}" -x 60 -o "$FULL" -y 1
sums_after=$(cd "$FULL" && sha256sum model_* state_* main.log)
[ "$sums_before" = "$sums_after" ] && ok "checkpoints and log unchanged by the failed runs" || not_ok "a failed run changed the checkpoint directory"

# --- 4. the embedded default run: the defaults fit together (2 steps of it)
if "$BIN" -x 2 -v 1 -s 2 -o "$TMP/default" > "$TMP/default.out" 2>&1 && grep -q "step 2 | val loss" "$TMP/default.out" &&
   grep -q "^generating" "$TMP/default.out" && [ "$(grep -c '^s:' "$TMP/default/main.log")" -ge 2 ]; then
    ok "the default run (data/tinyshakespeare, d4) trains, validates, samples and logs"
else
    not_ok "the default run failed:"; tail -3 "$TMP/default.out"
fi

# --- 5. the help lists every flag with its default
"$BIN" -h > "$TMP/help" 2>&1
missing=""
for f in i j k e o b t d l u q c z x v m s g n y p P h; do grep -q -- "^  -$f " "$TMP/help" || missing="$missing -$f"; done
[ -z "$missing" ] && ok "-h lists all 23 flags" || not_ok "-h does not list:$missing"

# --- -F 1: flash attention trains the same model as the attention that keeps its scores
# (to fp32 rounding; T = 80 is two and a half tiles of 32), with less activation memory
FLASH=(-e d2 -b 2 -t 80 -i "$TMP/small.bin" -v 0 -s 0 -x 8 -l 3e-3 -u 2 -o "")
"$BIN" "${FLASH[@]}" -F 0 > "$TMP/flash0.out" 2>&1 && "$BIN" "${FLASH[@]}" -F 1 > "$TMP/flash1.out" 2>&1
worst=$(paste <(grep -o 'loss [0-9.]*' "$TMP/flash0.out" | cut -d' ' -f2) <(grep -o 'loss [0-9.]*' "$TMP/flash1.out" | cut -d' ' -f2) |
        awk 'NF == 2 { n++; d = ($1 - $2) / $1; d = d < 0 ? -d : d; if (d > w) w = d } END { print n == 8 ? w + 0 : "missing" }')
act0=$(grep -o 'activations [0-9.]* MiB' "$TMP/flash0.out" | cut -d' ' -f2)
act1=$(grep -o 'activations [0-9.]* MiB' "$TMP/flash1.out" | cut -d' ' -f2)
if [ "$worst" != missing ] && awk -v w="$worst" -v a="$act0" -v b="$act1" 'BEGIN { exit !(w <= 1e-5 && b + 0 < a + 0) }' &&
   grep -q "flash attention (-F 1)" "$TMP/flash1.out"; then
    ok "-F 1: 8 steps' losses within $worst (relative) of -F 0's, activations $act1 MiB instead of $act0 MiB"
else
    not_ok "-F 1 against -F 0: worst relative loss difference $worst, activations $act1 / $act0 MiB"; tail -3 "$TMP/flash1.out"
fi
expect_error "-F that is not 0 or 1" "-F 2: 0 .* or 1" -- "${COMMON[@]}" -F 2 -o ""

# --- -P: the phases of every 2nd step (with two micro-batches a step), adding up to its time
source "$(dirname "$0")/phases_check.sh"
"$BIN" "${COMMON[@]}" -x 4 -d 256 -v 0 -s 0 -P 2 -o "$TMP/phases" > "$TMP/phases.out" 2>&1
read -r lines worst zero <<< "$(phase_lines "$TMP/phases.out")"
read -r log_lines log_worst <<< "$(phase_log_lines "$TMP/phases/main.log")"
if [ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.11) }' && [ "$log_lines" = 2 ] &&
   awk -v w="$log_worst" 'BEGIN { exit !(w <= 0.08) }' && grep -q "^s:2 .* ms_data:" "$TMP/phases/main.log" && grep -q "^s:4 .* ms_update:" "$TMP/phases/main.log"; then
    ok "-P 2: steps 2 and 4 timed by phase, which add up to the step's time (within $worst ms on the line, $log_worst in main.log)"
else
    not_ok "-P 2: $lines lines with phases (worst $worst ms, $zero empty passes), $log_lines in main.log (worst $log_worst)"; grep -E "^step|^s:" "$TMP/phases.out" "$TMP/phases/main.log" | head -8
fi
expect_error "-P that is not a count" "flag -P needs an integer >= 0" -- "${COMMON[@]}" -P -2 -o ""

echo "$passed passed, $failed failed"
[ $failed = 0 ]
