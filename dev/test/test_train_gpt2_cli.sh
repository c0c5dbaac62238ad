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
# 60 steps of 4 x 32 tokens cross the shard's end (about 47 batches): the resumed
# run must also reshuffle the next epoch exactly as the uninterrupted one did.
"$BIN" "${COMMON[@]}" -x 60 -n 25 -v 10 -s 30 -o "$TMP/full" > "$TMP/full.out" 2>&1
rc=$?
[ $rc = 0 ] && ok "uninterrupted run of 60 steps" || { not_ok "uninterrupted run exited $rc"; tail -5 "$TMP/full.out"; }
# the "interrupted" run: the same run, as it stood after its checkpoint at step 25
mkdir -p "$TMP/resumed"
cp "$TMP/full/model_00000025.bin" "$TMP/full/state_00000025.bin" "$TMP/resumed/"
awk -F'[: ]' '{ if ($2 <= 25) print }' "$TMP/full/main.log" > "$TMP/resumed/main.log"
"$BIN" "${COMMON[@]}" -x 60 -n 25 -v 10 -s 30 -o "$TMP/resumed" -y 1 > "$TMP/resumed.out" 2>&1
rc=$?
grep -q "resuming from .*state_00000025.bin at step 25" "$TMP/resumed.out" && ok "resume finds the checkpoint of step 25" || not_ok "resume did not report step 25"
# compare every logged number except the timing
strip_ms() { sed -E 's/ ms:[0-9.]+//' "$1"; }
if [ $rc = 0 ] && diff <(strip_ms "$TMP/full/main.log") <(strip_ms "$TMP/resumed/main.log") > "$TMP/diff"; then
    ok "resumed run: train losses, lr, grad norms, val losses identical to the uninterrupted run (steps 26..60)"
else
    not_ok "resumed run differs from the uninterrupted one (exit $rc):"; head -5 "$TMP/diff"
fi
if cmp -s "$TMP/full/model_00000060.bin" "$TMP/resumed/model_00000060.bin" && cmp -s "$TMP/full/state_00000060.bin" "$TMP/resumed/state_00000060.bin"; then
    ok "final model and optimizer state identical byte for byte"
else
    not_ok "final checkpoints differ"
fi
# the samples at step 30 and 60 are the same text too
if diff <(sed -n '/^step 30 | val/,$p' "$TMP/full.out" | grep -v ' ms |' | grep -v '^wrote') <(sed -n '/^step 30 | val/,$p' "$TMP/resumed.out" | grep -v ' ms |' | grep -v '^wrote') > /dev/null; then
    ok "samples after resume identical"
else
    not_ok "samples after resume differ"
fi
ls "$TMP/full"/*.tmp > /dev/null 2>&1 && not_ok "a .tmp file was left behind" || ok "no .tmp files left behind"

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
cp "$TMP/full/model_00000060.bin" "$TMP/good_model.bin"
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
expect_error "batch x seq longer than the data" "small.bin: has [0-9]+ tokens, fewer than the B\*T\+1" -- "${COMMON[@]}" -b 64 -t 128 -o ""
expect_error "sequence longer than the model's" "-t 2048 is longer" -- "${COMMON[@]}" -t 2048 -o ""
expect_error "flag that is not a number" "flag -b needs an integer" -- "${COMMON[@]}" -b abc -o ""
expect_error "negative learning rate" "flag -l needs a non-negative number" -- "${COMMON[@]}" -l -1 -o ""
expect_error "unknown flag" "unknown flag '-Q'" -- "${COMMON[@]}" -Q 3 -o ""
expect_error "flag without a value" "flag -x needs a value" -- "${COMMON[@]}" -o "" -x
expect_error "stray argument" "unknown argument 'foo'" -- "${COMMON[@]}" foo -o ""
expect_error "bad model descriptor" "d0.*neither an existing file nor a descriptor" -- "${COMMON[@]}" -e d0 -o ""
expect_error "total batch not a multiple of B*T" "not a multiple of B\*T" -- "${COMMON[@]}" -d 1000 -o ""
expect_error "resume without a checkpoint" "no checkpoint .* in $TMP/empty" -- "${COMMON[@]}" -y 1 -o "$TMP/empty"

# --- 3. a failed run never touches an existing checkpoint
sums_before=$(cd "$TMP/full" && sha256sum model_* state_* main.log)
expect_error "resume with other flags than the checkpoint's" "written with -b 4 -t 32" -- "${COMMON[@]}" -b 2 -x 60 -o "$TMP/full" -y 1
expect_error "resume with a corrupt validation file" "bad_magic_shard.bin" -- "${COMMON[@]}" -x 60 -j "$TMP/bad_magic_shard.bin" -o "$TMP/full" -y 1
expect_error "a new run into a directory with checkpoints" "$TMP/full already holds checkpoints" -- "${COMMON[@]}" -x 60 -o "$TMP/full"
cp "$TMP/full/state_00000060.bin" "$TMP/state_backup.bin"
head -c 3000 "$TMP/state_backup.bin" > "$TMP/full/state_00000060.bin"
expect_error "resume from a truncated state file" "state_00000060.bin: has 3000 bytes" -- "${COMMON[@]}" -x 60 -o "$TMP/full" -y 1
cp "$TMP/state_backup.bin" "$TMP/full/state_00000060.bin"
sums_after=$(cd "$TMP/full" && sha256sum model_* state_* main.log)
[ "$sums_before" = "$sums_after" ] && ok "checkpoints and log unchanged by the failed runs" || not_ok "a failed run changed the checkpoint directory"

# --- 4. the help lists every flag with its default
"$BIN" -h > "$TMP/help" 2>&1
missing=""
for f in i j k e o b t d l u q c z x v m s g n y r h; do grep -q -- "^  -$f " "$TMP/help" || missing="$missing -$f"; done
[ -z "$missing" ] && ok "-h lists all 22 flags" || not_ok "-h does not list:$missing"

echo "$passed passed, $failed failed"
[ $failed = 0 ]
