#!/usr/bin/env bash
# infer as a user runs it: flags, batches, instruction mode, stops, the benchmark table,
# and one clear error for each kind of bad input.
#
#     make infer build/hf_tiny_fp32.bin && bash dev/test/test_infer_cli.sh ./infer
#
# Small models only (the V=300 fixtures, one converted by ./convert into build/, and a random
# d1), so it takes seconds.
set -u
BIN=$(realpath "${1:-./infer}")
[ -x "$BIN" ] || { echo "Error: $BIN is not built (make infer)"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d /tmp/test_infer_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
F=dev/reference/fixtures
H=build/hf_tiny_fp32.bin # fixtures/hf_tiny_fp32 as a checkpoint (make converts it)
[ -f $H ] || { echo "Error: $H is missing (make $H)"; echo "0 passed, 1 failed"; exit 1; }
passed=0
failed=0
ok() { echo "OK      $1"; passed=$((passed + 1)); }
not_ok() { echo "NOT OK  $1"; failed=$((failed + 1)); }
# expect_error NAME TEXT COMMAND...: exits 1, stderr holds TEXT, no crash
expect_error() {
    local name=$1 text=$2
    shift 2
    "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    if [ $rc = 1 ] && grep -qF -- "$text" "$TMP/err"; then ok "$name: $(grep -m1 -F -- "$text" "$TMP/err")"
    else not_ok "$name (exit $rc, wanted 1 and \"$text\"):"; head -3 "$TMP/err"; fi
}

# --- flags
"$BIN" -h > "$TMP/help" && grep -q -- "-p <float>" "$TMP/help" && grep -q "top-k" "$TMP/help" && ok "-h lists the flags with defaults" || not_ok "-h"
expect_error "an unknown flag" "unknown flag -q" "$BIN" -q 1
expect_error "a flag without a value" "needs a value" "$BIN" -n
expect_error "top-p above 1" "-p (top-p) must be in (0, 1]" "$BIN" -p 1.5
expect_error "a negative temperature" "needs a non-negative number" "$BIN" -t -1
expect_error "-a 2" "take 0 or 1" "$BIN" -a 2
expect_error "-a without an instruction" "-a 1 needs an instruction" "$BIN" -a 1
expect_error "a bad -b list" "lists of positive integers" "$BIN" -m $H -B 1 -b 1,x

# --- models that are not there or not right
(cd "$TMP" && expect_error "no -m and no checkpoint in log_gpt2/" "no -m given and no checkpoint in log_gpt2/" "$BIN" -i hi)
expect_error "a model that does not exist" "no/such: no such file or folder" "$BIN" -m no/such
expect_error "a Hugging Face folder: the ./convert command that makes a checkpoint of it" \
    "./convert -i $F/hf_tiny_fp32 -o $F/hf_tiny_fp32.bin" "$BIN" -m $F/hf_tiny_fp32/ -z 1 -i 1
expect_error "a GGUF file: the ./convert command that makes our file of it" \
    "./convert -i $F/llama_gqa3.gguf -o $F/llama_gqa3.bin first" "$BIN" -m $F/llama_gqa3.gguf -z 1 -i 1
./convert -i $F/llama_mha3 -o "$TMP/mha3.bin" 2> /dev/null && head -c 30000 "$TMP/mha3.bin" > "$TMP/mha3_trunc.bin"
expect_error "a truncated Llama-family model file" "$TMP/mha3_trunc.bin: file has 30000 bytes" "$BIN" -m "$TMP/mha3_trunc.bin" -z 1 -i 1
"$BIN" -m "$TMP/mha3.bin" -z 1 -t 0 -n 8 -i "1,2,3" > "$TMP/mha3.out" 2> "$TMP/mha3.err" && grep -q "Llama family L=1 C=48 NH=3 NKV=3 HS=24 H=64 V=128" "$TMP/mha3.err" &&
    [ "$(wc -w < "$TMP/mha3.out")" = 9 ] && ok "a Llama-family model: token ids in and out, the model's shape on stderr" || not_ok "Llama-family model run"
expect_error "a Llama-family model as text without its tokenizer: the file it looked for" \
    "without its tokenizer (no $TMP/mha3_tokenizer.bin)" "$BIN" -m "$TMP/mha3.bin" -i hi
T3=build/tok_llama3_tokenizer.bin # fixtures/tok_llama3 through ./convert (make builds it): 1502 tokens
expect_error "a tokenizer with more tokens than the model" "the model has 128 tokens, the tokenizer ($T3) 1502" \
    "$BIN" -m "$TMP/mha3.bin" -g $T3 -i hi
expect_error "-y without -a 1" "-y (a system message) goes with -a 1" "$BIN" -m $H -y "Be brief." -i hi
expect_error "-y for a model without a chat template" "-y: this model's tokenizer has no chat template" "$BIN" -m $H -a 1 -y "Be brief." -i hi
printf 'junk' > "$TMP/bad_tokenizer.bin"
expect_error "a tokenizer file that is not one" "$TMP/bad_tokenizer.bin: 4 bytes: too short" "$BIN" -m $H -g "$TMP/bad_tokenizer.bin" -i hi
expect_error "llm.c's tokenizer.bin as -g" "an llm.c tokenizer.bin, which only decodes" "$BIN" -m $H -g data/gpt2_tokenizer.bin -i hi
cp $H "$TMP/g.bin" && cp data/gpt2_tokenizer.bin "$TMP/g_tokenizer.bin" # (llm.c's decode-only file, under the name ./convert uses)
"$BIN" -m "$TMP/g.bin" -t 0 -n 4 -i "a" > /dev/null 2> "$TMP/err" &&
    ok "a GPT-2 model beside llm.c's tokenizer.bin of the NAME_tokenizer.bin name: GPT-2's tokenizer, no error" ||
    { not_ok "GPT-2 model beside a decode-only tokenizer.bin"; head -3 "$TMP/err"; }
"$BIN" -m "$TMP/mha3.bin" -z 1 -t 0 -n 4 -i "" > /dev/null 2> "$TMP/empty.err" && grep -q "starts from token 1 (its start token)" "$TMP/empty.err" &&
    ok "a Llama-family model, an empty prompt: it starts from its start token" || not_ok "Llama empty prompt"
"$BIN" -m d1 -z 1 -t 0 -n 1 -i 1 > /dev/null 2> "$TMP/d1.err" && grep -q "model: d1: GPT-2 L=1 .*, [1-9][0-9.]*M parameters" "$TMP/d1.err" &&
    ok "the model's parameters counted on stderr" || not_ok "parameter count: $(head -1 "$TMP/d1.err")"
head -c 5000 $H > "$TMP/trunc.bin"
expect_error "a truncated checkpoint" "$TMP/trunc.bin: file has 5000 bytes" "$BIN" -m "$TMP/trunc.bin" -z 1 -i 1
expect_error "a folder without the tokenizer as -g" "encoder.json: cannot read it" "$BIN" -m d1 -g $F/hf_tiny_fp32 -i hi
expect_error "a model whose vocabulary is not GPT-2's, as text" "no/such/dir/encoder.json" "$BIN" -m $H -g no/such/dir -i hi

# --- prompts that do not fit
long=$(seq -s, 1 40)
expect_error "a prompt longer than the context" "is 40 tokens long; the model's context is 32 tokens" "$BIN" -m $F/gpt2_tiny_model.bin -z 1 -i "$long"
expect_error "a token id outside the vocabulary" "'300' is not a token id in [0, 300)" "$BIN" -m $H -z 1 -i "1,300"
printf '1,2\n\n{"prompt": "5, 999"}\n' > "$TMP/bad_prompts"
expect_error "a bad id in a prompt file" "prompt 2: '999' is not a token id" "$BIN" -m $H -z 1 -f "$TMP/bad_prompts"
printf '{"prompt": 5}\n' > "$TMP/bad_json"
expect_error "a JSON line without a string prompt" "line 1: no string \"prompt\"" "$BIN" -m $H -z 1 -f "$TMP/bad_json"
printf '{"prompt": "1,2"\n' > "$TMP/bad_json"
expect_error "a line that is not JSON" "line 1 starts with '{' but is not a JSON object" "$BIN" -m $H -z 1 -f "$TMP/bad_json"

# --- generation: a batch gives each prompt what it gets alone; the context caps -n
run() { "$BIN" "$@" 2> "$TMP/stderr"; }
a=$(run -m $H -z 1 -t 0 -n 20 -i "1,2,3")
b=$(run -m $H -z 1 -t 0 -n 20 -i "7")
printf '1,2,3\n\n{"prompt": "7"}\n' > "$TMP/prompts"
run -m $H -z 1 -t 0 -n 20 -f "$TMP/prompts" > "$TMP/batch"
if [ "$(sed -n 2p "$TMP/batch")" = "$a" ] && [ "$(sed -n 4p "$TMP/batch")" = "$b" ] && grep -q -- "--- 2 of 2 (1 prompt tokens, 20 generated" "$TMP/batch"; then
    ok "a batch from -f (a blank line, a JSON line) gives each prompt its text alone"
else not_ok "batch vs single:"; cat "$TMP/batch"; echo "$a"; echo "$b"; fi
# an empty prompt starts a new document: from token 0 here (V=300 has no <|endoftext|>), and
# what is printed says so: the same output as the prompt "0", and a line on stderr
e=$(run -m $H -z 1 -t 0 -n 5 -i "")
grep -q "prompt 1 is empty: the model starts from token 0$" "$TMP/stderr" && [ "$e" = "$(run -m $H -z 1 -t 0 -n 5 -i 0)" ] &&
    ok "-z 1 -i \"\": prints the start token ('$e') and says so" || { not_ok "empty prompt in ids: '$e'"; cat "$TMP/stderr"; }
run -m d1 -n 2 -i "" > /dev/null
grep -q "prompt 1 is empty: the model starts from token 50256 (<|endoftext|>)" "$TMP/stderr" && ok "-i \"\" with GPT-2's vocabulary: starts from <|endoftext|> and says so" || { not_ok "empty text prompt"; cat "$TMP/stderr"; }
out=$(run -m $F/gpt2_tiny_model.bin -z 1 -t 0 -n 100 -i "$(seq -s, 1 30)")
[ "$(echo "$out" | wc -w)" = 3 ] && grep -q "stopped at the end of the model's context: 30 prompt tokens, 2 generated" "$TMP/stderr" && ok "the context (32) caps the generation: 2 tokens" || { not_ok "context cap"; echo "$out"; cat "$TMP/stderr"; }
grep -q "KV cache: 32 tokens in use = 0.03 MiB" "$TMP/stderr" && grep -q "time to first token" "$TMP/stderr" && ok "reports: time to first token, KV cache in use" || { not_ok "reports"; cat "$TMP/stderr"; }

# --- text: seeds, stop strings, instruction mode (a random d1 model, GPT-2's vocabulary)
x=$(run -m d1 -i "Hello" -n 16 -s 3)
y=$(run -m d1 -i "Hello" -n 16 -s 3)
z=$(run -m d1 -i "Hello" -n 16 -s 4)
[ "$x" = "$y" ] && [ "$x" != "$z" ] && [ "${x:0:5}" = "Hello" ] && ok "a seed reproduces the text, another changes it" || not_ok "seeds: $x / $y / $z"
stop=${x:12:3}
s=$(run -m d1 -i "Hello" -n 16 -s 3 -x "$stop")
prefix=${x%%"$stop"*}
[ "$s" = "$prefix" ] && grep -q "stopped at the stop string" "$TMP/stderr" && ok "-x \"$stop\": the text up to the stop string, without it" || not_ok "stop string: '$s' vs '$prefix'"
r=$(run -m d1 -a 1 -i "Name a color." -n 5 -t 0)
printf '{"instruction": "Name a color.", "input": ""}\nName a color.\n' > "$TMP/instructions"
run -m d1 -a 1 -f "$TMP/instructions" -n 5 -t 0 > "$TMP/ibatch"
sec1=$(awk '/^--- 1 of 2/{f=1;next} /^--- 2 of 2/{f=0} f' "$TMP/ibatch")
sec2=$(awk '/^--- 2 of 2/{f=1;next} f' "$TMP/ibatch")
[ "$sec1" = "$r" ] && [ "$sec2" = "$r" ] && ! grep -q "Instruction" "$TMP/ibatch" && ok "instruction mode: the response only, -i and JSON lines alike" || { not_ok "instruction mode"; cat "$TMP/ibatch"; echo "[$r]"; }

# --- the benchmark: one row per (batch, prompt, generated), the cache growing with them
run -m $H -B 1 -b 1,2 -l 4,8 -N 3 > "$TMP/bench"
rows=$(grep -c '^| *[0-9]' "$TMP/bench")
[ "$rows" = 4 ] && grep -q "^| *2 | *8 | *3 |.*| *0.02 |$" "$TMP/bench" && ok "-B 1: a 4-row table; 2 x (8 + 3) tokens of cache = 0.02 MiB" || { not_ok "bench table"; cat "$TMP/bench"; }

# --- the real SmolLM2-135M-Instruct (make smollm2; make test fetches it), as the README runs it:
# its tokenizer found beside it, the question in its chat template (37 tokens, 19 with -y: what
# transformers' apply_chat_template makes), the stop at its end of turn. The answers are
# transformers' greedy tokens on the same GGUF: dev/reference/smollm2_reference.py asserts it.
S2=data/smollm2/SmolLM2-135M-Instruct.bin
if [ -f $S2 ]; then
    "$BIN" -m $S2 -a 1 -i "What is the capital of France?" -t 0 -n 30 > "$TMP/s2.out" 2> "$TMP/s2.err" &&
        [ "$(cat "$TMP/s2.out")" = "The capital of France is Paris." ] && grep -q "stopped at <|im_end|>: 37 prompt tokens, 7 generated" "$TMP/s2.err" &&
        ok "SmolLM2 chat: \"$(cat "$TMP/s2.out")\", stopped at <|im_end|>" || { not_ok "SmolLM2 chat"; cat "$TMP/s2.out"; tail -3 "$TMP/s2.err"; }
    "$BIN" -m $S2 -a 1 -y "Answer in French." -i "Hi" -t 0 -n 1 > /dev/null 2> "$TMP/s2.err" &&
        grep -q "stopped at the length limit: 19 prompt tokens" "$TMP/s2.err" &&
        ok "SmolLM2 chat with -y: the system message replaces the template's (19 prompt tokens, as apply_chat_template)" || { not_ok "SmolLM2 -y"; tail -3 "$TMP/s2.err"; }
    "$BIN" -m $S2 -i "1, 2, 3," -t 0 -n 6 > "$TMP/s2.out" 2> /dev/null && [ "$(cat "$TMP/s2.out")" = "1, 2, 3, 4, 5," ] &&
        ok "SmolLM2 completes plain text: \"$(head -1 "$TMP/s2.out")\"" || { not_ok "SmolLM2 plain text"; cat "$TMP/s2.out"; }
else
    not_ok "$S2 is missing (make smollm2)"
fi

# -E's table is valid UTF-8 whatever the text holds: each byte that starts no character (a
# stray continuation byte, an overlong form, a surrogate, a character cut off) is one U+FFFD
printf '{"instruction": "caf\xc3\xa9 bad\x80 over\xc0\xaf sur\xed\xa0\x80 cut\xe2\x82", "answer": "b"}\n' > "$TMP/bytes.jsonl"
"$BIN" -m d1 -E "$TMP/bytes.jsonl" -n 2 > "$TMP/bytes.md" 2> /dev/null
R=$(printf '\xef\xbf\xbd')
if grep -qF "| 1 | café bad$R over$R$R sur$R$R$R cut$R$R |" "$TMP/bytes.md" && iconv -f UTF-8 -t UTF-8 "$TMP/bytes.md" > /dev/null 2>&1; then
    ok "-E: a question's bytes that are no UTF-8 character are each one U+FFFD in the table"
else
    not_ok "-E: bytes that are no UTF-8 character: $(grep '^| 1 |' "$TMP/bytes.md" | cut -c 1-80)"
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
