#!/usr/bin/env bash
# Tests the error handling of the tokenizer program (data/tokenizer.c) through its command line:
# the loader exits on a bad file, so these cannot be tested from inside test_tokenizer.c.
# For each bad input we check: exit status 1, a message that names the offending file, and
# that no output file (final or .tmp) was left behind or overwritten.
#
# Run from the repository root, after building the program:
#   gcc -O3 -march=native -Wall -Wextra -Werror -std=c11 data/tokenizer.c -o data/tokenizer
#   bash dev/test/test_tokenizer_cli.sh ./data/tokenizer
set -u

BIN=${1:-./data/tokenizer}
if [ ! -x "$BIN" ]; then
    echo "Error: $BIN is not an executable; build it first (see the top of this script)"
    exit 1
fi
TMP=$(mktemp -d /tmp/test_tokenizer_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/out"      # every run writes here; after a failed run it must stay empty
mkdir "$OUT"
passed=0
failed=0

report() {  # report NAME OK(0/1) [detail]
    if [ "$2" = 1 ]; then
        printf '%-70s OK\n' "$1"; passed=$((passed + 1))
    else
        printf '%-70s NOT OK\n' "$1"; failed=$((failed + 1))
        [ -n "${3:-}" ] && printf '  %s\n' "$3"
    fi
}

# expect_error NAME NEEDLE ARGS...: the run must exit 1, print NEEDLE (usually the file's
# name) in its error message, and leave $OUT empty
expect_error() {
    local name=$1 needle=$2
    shift 2
    "$BIN" "$@" > "$TMP/stdout" 2> "$TMP/stderr"
    local status=$? ok=1 why=""
    if [ $status -ne 1 ]; then ok=0; why="exit status $status, wanted 1"; fi
    if ! grep -qF -- "$needle" "$TMP/stderr"; then ok=0; why="$why; stderr does not mention '$needle': $(head -c 300 "$TMP/stderr")"; fi
    if [ -n "$(ls -A "$OUT")" ]; then ok=0; why="$why; left files behind: $(ls -A "$OUT" | tr '\n' ' ')"; rm -f "$OUT"/*; fi
    report "$name" $ok "${why#; }"
}

GOOD="$TMP/gpt2"      # a copy of the vocabulary files that we break one way at a time
mkdir "$GOOD"
cp data/gpt2/encoder.json data/gpt2/vocab.bpe "$GOOD/"
SMALL="$TMP/small.txt"
printf 'Hello world' > "$SMALL"

# --- the command line itself
"$BIN" -h > "$TMP/help" 2>&1
status=$?
all_listed=1
for flag in -i -o -v -t -g -e -s -h; do grep -qF -- "  $flag " "$TMP/help" || all_listed=0; done
report "-h exits 0 and lists -i -o -v -t -g -e -s -h" $([ $status -eq 0 ] && [ $all_listed = 1 ] && echo 1 || echo 0)
report "-h shows the defaults" $(grep -qF "default data/gpt2)" "$TMP/help" && grep -qF "default 32768)" "$TMP/help" && echo 1 || echo 0)
expect_error "unknown flag -x is rejected" "'-x'" -x
expect_error "a stray argument is rejected" "'input.txt'" input.txt
expect_error "-i without a value is rejected" "'-i' needs a value" -i
expect_error "-v abc is rejected" "'abc'" -v abc -o "$OUT/ts"
expect_error "-v 0 is rejected" "'0'" -v 0 -o "$OUT/ts"

# --- missing and malformed vocabulary files
expect_error "missing -g folder names encoder.json" "$TMP/nowhere/encoder.json" -g "$TMP/nowhere" -o "$OUT/ts" -t ""
expect_error "llm.c's decode-only tokenizer.bin as -g" "data/gpt2_tokenizer.bin: an llm.c tokenizer.bin, which only decodes" -g data/gpt2_tokenizer.bin -o "$OUT/ts" -t ""
mkdir "$TMP/no_vocab" && cp "$GOOD/encoder.json" "$TMP/no_vocab/"
expect_error "missing vocab.bpe is named" "$TMP/no_vocab/vocab.bpe" -g "$TMP/no_vocab" -o "$OUT/ts" -t ""
mkdir "$TMP/truncated" && head -c 500000 "$GOOD/encoder.json" > "$TMP/truncated/encoder.json" && cp "$GOOD/vocab.bpe" "$TMP/truncated/"
expect_error "truncated encoder.json is named" "$TMP/truncated/encoder.json" -g "$TMP/truncated" -o "$OUT/ts" -t ""
mkdir "$TMP/dup_id" && sed 's/"!": 0,/"!": 1,/' "$GOOD/encoder.json" > "$TMP/dup_id/encoder.json" && cp "$GOOD/vocab.bpe" "$TMP/dup_id/"
expect_error "encoder.json with a repeated id is named" "$TMP/dup_id/encoder.json" -g "$TMP/dup_id" -o "$OUT/ts" -t ""
mkdir "$TMP/not_json" && echo "[1, 2, 3]" > "$TMP/not_json/encoder.json" && cp "$GOOD/vocab.bpe" "$TMP/not_json/"
expect_error "encoder.json that is not an object is named" "$TMP/not_json/encoder.json" -g "$TMP/not_json" -o "$OUT/ts" -t ""
mkdir "$TMP/swapped" && cp "$GOOD/encoder.json" "$TMP/swapped/" && sed '2{h;d};3{G}' "$GOOD/vocab.bpe" > "$TMP/swapped/vocab.bpe"
expect_error "vocab.bpe with two merges swapped is named" "$TMP/swapped/vocab.bpe" -g "$TMP/swapped" -o "$OUT/ts" -t ""
mkdir "$TMP/short_bpe" && cp "$GOOD/encoder.json" "$TMP/short_bpe/" && head -n 40000 "$GOOD/vocab.bpe" > "$TMP/short_bpe/vocab.bpe"
expect_error "vocab.bpe missing merges is named" "$TMP/short_bpe/vocab.bpe" -g "$TMP/short_bpe" -o "$OUT/ts" -t ""
mkdir "$TMP/no_version" && cp "$GOOD/encoder.json" "$TMP/no_version/" && tail -n +2 "$GOOD/vocab.bpe" > "$TMP/no_version/vocab.bpe"
expect_error "vocab.bpe without its #version line is named" "$TMP/no_version/vocab.bpe" -g "$TMP/no_version" -o "$OUT/ts" -t ""

# --- bad input text and outputs that cannot be written
expect_error "an input that is a folder is named" "$TMP/gpt2" -i "$TMP/gpt2" -o "$OUT/ts" -t "$OUT/tok.bin"
expect_error "missing input is named" "$TMP/missing.txt" -i "$TMP/missing.txt" -o "$OUT/ts" -t "$OUT/tok.bin"
: > "$TMP/empty.txt"
expect_error "empty input is named" "$TMP/empty.txt" -i "$TMP/empty.txt" -o "$OUT/ts" -t "$OUT/tok.bin"
expect_error "fewer tokens than the val split names the input" "$SMALL" -i "$SMALL" -o "$OUT/ts" -t "$OUT/tok.bin"
report "  ... and prints a HINT" $(grep -q "^HINT: .*-v" "$TMP/stderr" && echo 1 || echo 0)
expect_error "an output folder that cannot be made is named" "$SMALL" -i "$SMALL" -v 1 -o "$SMALL/sub/ts" -t ""
# the val shard is written, then the tokenizer.bin under a file (not a folder) fails: both must go
expect_error "a failure after the first output removes it too" "$SMALL/tok.bin.tmp" -i "$SMALL" -v 1 -o "$OUT/ts" -t "$SMALL/tok.bin"

# --- successful runs
"$BIN" -i "$SMALL" -v 1 -o "$OUT/ts" -t "" > /dev/null 2>&1
report "-v 1 on 'Hello world' writes val and train, -t '' skips tokenizer.bin" \
    $([ $? -eq 0 ] && [ "$(ls "$OUT" | tr '\n' ' ')" = "ts_train.bin ts_val.bin " ] && echo 1 || echo 0)
# llm.c convention: [EOT] + "Hello world" = [50256, 15496, 995]; 1 val token, 2 train tokens
report "  ... shard headers count 1 and 2 tokens" \
    $([ "$(od -An -tu4 -j8 -N4 "$OUT/ts_val.bin" | tr -d ' ')" = 1 ] && [ "$(od -An -tu4 -j8 -N4 "$OUT/ts_train.bin" | tr -d ' ')" = 2 ] && echo 1 || echo 0)
# the README's own-text command, `-o data/my/my`, into folders that do not exist yet (mkdir -p)
"$BIN" -i "$SMALL" -v 1 -o "$TMP/new/deeper/my" -t "$TMP/new/tok/tok.bin" > "$TMP/stdout" 2>&1
report "-o and -t into missing folders make them (like mkdir -p) and say so" \
    $([ $? -eq 0 ] && [ -s "$TMP/new/deeper/my_val.bin" ] && [ -s "$TMP/new/deeper/my_train.bin" ] && [ -s "$TMP/new/tok/tok.bin" ] \
      && grep -qF "made folder $TMP/new/deeper" "$TMP/stdout" && echo 1 || echo 0)
report "  ... and the start-up line counts 50257 tokens, EOT as id 50256" \
    $(grep -qF "tokenizer: 50257 tokens from data/gpt2: 256 bytes + 50000 merges + <|endoftext|> (id 50256)" "$TMP/stdout" && echo 1 || echo 0)
cp "$OUT/ts_val.bin" "$TMP/val_before.bin"
"$BIN" -i "$TMP/empty.txt" -v 1 -o "$OUT/ts" -t "" > /dev/null 2>&1
report "a failed run leaves the earlier good output untouched" \
    $(cmp -s "$OUT/ts_val.bin" "$TMP/val_before.bin" && [ "$(ls "$OUT" | wc -l)" = 2 ] && echo 1 || echo 0)
rm -f "$OUT"/*
"$BIN" -e -s -i "$SMALL" -o "$OUT/hello.bin" -t "$OUT/tok.bin" > /dev/null 2>&1
report "-e writes exactly the -o file (plus -t), tokens [15496, 995]" \
    $([ $? -eq 0 ] && [ "$(ls "$OUT" | tr '\n' ' ')" = "hello.bin tok.bin " ] \
      && [ "$(od -An -tu2 -j1024 "$OUT/hello.bin" | tr -s ' ')" = " 15496 995" ] && echo 1 || echo 0)

# --- tokenizer files (./convert's NAME_tokenizer.bin): a text's tokens, ids back to text, shards
# -p gives the ids of the reference's "prompt" line: Hugging Face's tokenizers running each
# model's own definition (dev/reference/bpe_tokenizer_reference.py), the start token where it adds one
Q="What is the ISO 3166 two-letter code of Germany?  Answer in 2 words. "
rm -f "$OUT"/*
for pair in smollm2:data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin llama3:build/tok_llama3_tokenizer.bin qwen2:build/tok_qwen2_tokenizer.bin; do
    name=${pair%%:*}; tok=${pair#*:}
    want=$(grep "^prompt " dev/reference/fixtures/bpe_$name.txt | cut -d' ' -f4- | tr ' ' ',')
    got=$("$BIN" -g "$tok" -p "$Q" 2> "$TMP/stderr" | sed -n 's/^ids: //p')
    report "-p with $name's tokenizer: the reference's ids ($(echo "$got" | tr ',' '\n' | wc -l) tokens)" \
        $([ -n "$want" ] && [ "$got" = "$want" ] && echo 1 || echo 0) "ours $got, the reference $want $(cat "$TMP/stderr")"
    back=$("$BIN" -g "$tok" -d "$(echo "$got" | sed 's/^\(1,\|128000,\)//')" | tail -1)
    [ "$name" = llama3 ] && back=${back#<|begin_of_text|>}
    report "-d with $name's tokenizer: the ids back to the text" $([ "$back" = "$Q" ] && echo 1 || echo 0) "\"$back\""
done
"$BIN" -p "Hello world" | grep -q "^2 tokens: 15496:Hello 995: world$" && report "-p with GPT-2's tokenizer (the default): tiktoken's 15496 995" 1 ||
    report "-p with GPT-2's tokenizer" 0 "$("$BIN" -p "Hello world" | tail -2)"
"$BIN" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -p "Hi <|im_end|>" -s | grep -q "^3 tokens: 26843:Hi 216:  2:<|im_end|>$" &&
    report "-p -s: special tokens' text is the special token" 1 || report "-p -s: special tokens' text is the special token" 0 "$("$BIN" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -p "Hi <|im_end|>" -s | head -1)"
# -j with SmolLM2's tokenizer: each document <|endoftext|> (id 0) + its tokens, into uint16 shards
printf '{"text": "Hello world."}\n\n{"text": "Bonjour\\n"}\n' > "$TMP/docs.jsonl"
a=$("$BIN" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -p "Hello world." | sed -n 's/^ids: //p')
b=$("$BIN" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -p "Bonjour
" | sed -n 's/^ids: //p')
"$BIN" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -j -i "$TMP/docs.jsonl" -o "$TMP/docs" -v 2 > "$TMP/stdout" 2>&1
got=$(cat "$TMP/docs_val.bin" "$TMP/docs_train.bin" 2>/dev/null | od -An -tu2 -j1024 -w4096 | head -c 0; { od -An -tu2 -j1024 "$TMP/docs_val.bin"; od -An -tu2 -j1024 "$TMP/docs_train.bin"; } 2>/dev/null | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
report "-j: each JSON line a document, <|endoftext|> first; no tokenizer.bin written for a tokenizer file" \
    $([ "$got" = "0,$a,0,$b" ] && [ ! -e data/gpt2_tokenizer.bin.tmp ] && grep -q "each document after <|endoftext|>" "$TMP/stdout" && echo 1 || echo 0) "ours $got, want 0,$a,0,$b; $(tail -2 "$TMP/stdout")"
printf '{"text": "ok"}\n{"txt": "no"}\n' > "$TMP/bad.jsonl"
expect_error "-j: a line without \"text\"" "$TMP/bad.jsonl: line 2: no string \"text\"" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -j -i "$TMP/bad.jsonl" -o "$OUT/j"
expect_error "-t with a tokenizer file" "-t writes GPT-2's decoding table" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -i "$TMP/docs.jsonl" -j -o "$OUT/j" -t "$OUT/t.bin"
expect_error "-d with an id outside the vocabulary" "-d: '99999' is not a token id" -g data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin -d 1,99999
# a vocabulary past 65,536 tokens: uint32 shards (version 2, as llm.c's for Llama 3). The
# tokenizer file is made here: the 256 bytes, then special tokens <|x256|> .. <|x69999|>
python3 - "$TMP/wide_tokenizer.bin" <<'PY'
import struct, sys
V = 70000
h = [20241201, 1, V, 0, 0, 0, -1, V - 1, -1, 0, 0] + [0] * 245
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *h))
    for i in range(V):
        kind, b = (0, bytes([i])) if i < 256 else (1, f"<|x{i}|>".encode())
        f.write(struct.pack("<BH", kind, len(b)) + b)
PY
printf 'ab<|x69999|>c' > "$TMP/wide.txt"
"$BIN" -g "$TMP/wide_tokenizer.bin" -s -e -i "$TMP/wide.txt" -o "$TMP/wide.bin" > "$TMP/stdout" 2>&1
report "a vocabulary of 70,000: a uint32 shard (version 2) holding id 69999" \
    $([ "$(od -An -tu4 -j4 -N8 "$TMP/wide.bin" 2>/dev/null | tr -s ' ')" = " 2 4" ] && [ "$(od -An -tu4 -j1024 "$TMP/wide.bin" | tr -s ' ')" = " 97 98 69999 99" ] && echo 1 || echo 0) \
    "$(tail -2 "$TMP/stdout")"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
