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
expect_error "-a 1 with an empty -i" "-a 1 -i needs a message (without -i: a conversation)" "$BIN" -a 1 -i ""
expect_error "a bad -b list" "lists of positive integers" "$BIN" -m $H -B 1 -b 1,x
expect_error "-Q nf5: a format we do not know" "-Q 'nf5': expected none, q8_0, or nf4 or fp4" "$BIN" -m $H -Q nf5
expect_error "-Q nf4:48: not a blocksize" "-Q 'nf4:48': the blocksize must be a power of two from 32 to 4096" "$BIN" -m $H -Q nf4:48
expect_error "-Q q8_0:64: q8_0's blocks are 32" "-Q 'q8_0:64': expected none" "$BIN" -m $H -Q q8_0:64
expect_error "-Q nf4:64:2: double quantization 0 or 1" "-Q 'nf4:64:2': double quantization is 0 or 1" "$BIN" -m $H -Q nf4:64:2
expect_error "-Q fp4 on a 4-bit file: its own format stays" "build/bnb4_llama.bin: its linear layers are nf4 (blocks of 64, double quantization) already" "$BIN" -m build/bnb4_llama.bin -Q fp4 -z 1 -i 1
expect_error "-Q nf4,q8_0,x: a third part" "-Q 'q8_0,x': expected none" "$BIN" -m $H -Q nf4,q8_0,x
"$BIN" -m $H -Q nf4,q8_0 -z 1 -t 0 -n 4 -i 1,2,3 > /dev/null 2> "$TMP/q.err" && grep -q "linear layers in nf4 (blocks of 64, double quantization), the head in q8_0)" "$TMP/q.err" &&
    ok "-Q nf4,q8_0: the report says the formats" || { not_ok "-Q nf4,q8_0's report"; head -3 "$TMP/q.err"; }

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
"$BIN" -m d1 -a 1 -y "Be brief." -i "Say hi." -n 1 -v 1 > /dev/null 2> "$TMP/err" && grep "^prompt:" "$TMP/err" | grep -qF ': 3856:Be 4506: brief 13:. 198:\n 198:\n 21017:### 46486: Instruction 25:: 198:\n' &&
    ok "-y in the Alpaca template (GPT-2's tokenizer): the system message in place of its opening sentence" || { not_ok "-y with Alpaca"; grep "^prompt" "$TMP/err" | cut -c1-200; }
printf '{"messages": [{"role": "user", "content": "Hi"}]}\n{"messages": [{"role": "system", "content": "Own."}, {"role": "user", "content": "Hi"}]}\n' > "$TMP/sys.jsonl"
"$BIN" -m d1 -a 1 -y "Be brief." -f "$TMP/sys.jsonl" -n 1 -v 1 > /dev/null 2> "$TMP/err" &&
    [ "$(grep '^prompt:' "$TMP/err" | sed -n 1p | grep -c ': 3856:Be 4506: brief 13:.')" = 1 ] && [ "$(grep '^prompt:' "$TMP/err" | sed -n 2p | grep -c 'Be 4506: brief')" = 0 ] &&
    ok "-y with -f {\"messages\"}: the system message of the conversations without one" || { not_ok "-y with -f messages"; grep "^prompt" "$TMP/err" | cut -c1-200; }
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
    # a conversation on standard input: three turns, the cache kept between them (each turn
    # prefills only what is new); then the same conversation as one -f record of "messages",
    # prefilled whole: the same prompt tokens and the same (greedy) third answer. (Turn 2's
    # counts follow from turn 1's: its 37 prompt tokens, transformers' apply_chat_template's,
    # and 7 reply tokens are the 44 in the cache; the 59 are the two turns' conversation,
    # whose layout test_infer checks against apply_chat_template.)
    printf 'What is the capital of France?\nAnd of Germany?\nWhich of the two is larger?\n' |
        "$BIN" -m $S2 -a 1 -n 24 -v 1 > "$TMP/chat.out" 2> "$TMP/chat.err"
    rc=$?
    a1=$(sed -n 2p "$TMP/chat.out"); a2=$(sed -n 4p "$TMP/chat.out"); a3=$(sed -n 6p "$TMP/chat.out")
    [ $rc = 0 ] && [ "$(sed -n 1p "$TMP/chat.out")" = "> What is the capital of France?" ] && [ "$a1" = "The capital of France is Paris." ] &&
        grep -q "sampling: greedy (chat default), repetition penalty 1.1 (chat default)" "$TMP/chat.err" &&
        grep -q "^\[turn 2: 59 prompt tokens, 44 of them from the cache, 15 prefilled" "$TMP/chat.err" && grep -q "^\[turn 3: " "$TMP/chat.err" &&
        ok "a chat on standard input: 3 turns; turn 2 prefills 15 new tokens, 44 from the cache (\"$a1\" / \"$a2\")" ||
        { not_ok "a chat on standard input (exit $rc)"; cat "$TMP/chat.out"; grep -v "^prompt" "$TMP/chat.err" | tail -5; }
    python3 -c 'import json, sys; q = sys.argv[1:4]; a = sys.argv[4:6]
print(json.dumps({"messages": [{"role": "user", "content": q[0]}, {"role": "assistant", "content": a[0]}, {"role": "user", "content": q[1]},
                               {"role": "assistant", "content": a[1]}, {"role": "user", "content": q[2]}]}))' \
        "What is the capital of France?" "And of Germany?" "Which of the two is larger?" "$a1" "$a2" > "$TMP/conv.jsonl"
    "$BIN" -m $S2 -a 1 -n 24 -v 1 -f "$TMP/conv.jsonl" > "$TMP/conv.out" 2> "$TMP/conv.err"
    ids() { grep "^prompt:" "$1" | sed -n "${2}p" | sed 's/^prompt: [0-9]* tokens ([0-9]* in the cache from earlier turns)://; s/ |//'; }
    [ -n "$(ids "$TMP/conv.err" 1)" ] && [ "$(ids "$TMP/chat.err" 3)" = "$(ids "$TMP/conv.err" 1)" ] && [ "$(cat "$TMP/conv.out")" = "$a3" ] &&
        ok "... the same prompt tokens and the same answer as one prefill of {\"messages\": [...]} (\"$a3\")" ||
        { not_ok "conversation = one prefill"; echo "chat: $a3"; echo "-f:   $(cat "$TMP/conv.out")"; ids "$TMP/chat.err" 3 | cut -c1-200; ids "$TMP/conv.err" 1 | cut -c1-200; }
    # what the chat refuses goes on stderr, and the chat goes on: invalid UTF-8, an empty
    # message, a command it does not know; /new starts over, /quit ends
    printf 'Hi\xff there\n\n   \n/help me\nSay yes.\n/new\nSay no.\n/quit\nNever read.\n' | "$BIN" -m $S2 -a 1 -n 4 > "$TMP/bad.out" 2> "$TMP/bad.err"
    rc=$?
    [ $rc = 0 ] && grep -q "^message 1: not valid UTF-8 (byte 3): not sent" "$TMP/bad.err" && grep -q "^message 2: empty: not sent" "$TMP/bad.err" &&
        grep -q "^message 3: empty: not sent" "$TMP/bad.err" && grep -q "^message 4: /help me is no command" "$TMP/bad.err" &&
        grep -q "^a new conversation" "$TMP/bad.err" && [ "$(grep -c '^\[turn' "$TMP/bad.err")" = 2 ] && ! grep -q "Never read" "$TMP/bad.out" &&
        grep -q "^\[turn 2: [0-9]* prompt tokens, [1-9][0-9]* of them from the cache" "$TMP/bad.err" &&
        ok "the chat refuses invalid UTF-8, empty messages, unknown commands (one line each) and goes on; /new, /quit" ||
        { not_ok "the chat's bad input (exit $rc)"; cat "$TMP/bad.err" | tail -12; }
    # -e 1: past the end token; -x still stops
    "$BIN" -m $S2 -a 1 -i "What is the capital of France?" -t 0 -e 1 -n 12 > "$TMP/e.out" 2> "$TMP/e.err" &&
        grep -q "stopped at the length limit: 37 prompt tokens, 12 generated" "$TMP/e.err" && grep -q "^The capital of France is Paris\." "$TMP/e.out" &&
        ok "-e 1: on past <|im_end|> to -n 12" || { not_ok "-e 1"; tail -3 "$TMP/e.err"; }
    # the flags win over the chat's defaults, and the start-up line says so
    "$BIN" -m $S2 -a 1 -i "Hi" -t 0.7 -k 20 -p 0.8 -M 0.05 -r 1.2 -n 1 > /dev/null 2> "$TMP/f.err" &&
        grep -q "^sampling: temperature 0.7 (flag), top-k 20 (flag), top-p 0.8 (flag), min-p 0.05 (flag), repetition penalty 1.2 (flag)" "$TMP/f.err" &&
        ok "sampling flags win, and the start-up line names each setting's source" || { not_ok "sampling flags"; grep sampling "$TMP/f.err"; }
else
    not_ok "$S2 is missing (make smollm2)"
fi

# a conversation that outgrows the context (a random d1: 1024 positions, GPT-2's tokenizer,
# the Alpaca template): the oldest turn goes, and a line says so; -O 0 ends the chat instead
printf 'Tell me a story.\nAnother one.\n' | "$BIN" -m d1 -a 1 -n 1000 -e 1 > "$TMP/full.out" 2> "$TMP/full.err"
rc=$?
[ $rc = 0 ] && grep -q "^\[turn 1: 35 prompt tokens, 0 of them from the cache, 35 prefilled; 989 generated.*stopped at the end of the model's context\]" "$TMP/full.err" &&
    grep -q "^the context is full: the oldest turn goes (2 messages, [0-9]* tokens; 33 of 1024 now)" "$TMP/full.err" && grep -q "^\[turn 2: 33 prompt tokens" "$TMP/full.err" &&
    ok "a chat past the context: the first reply stops at its end, then the oldest turn goes, said on stderr" ||
    { not_ok "a chat past the context (exit $rc)"; grep -v "^prompt" "$TMP/full.err" | tail -4; }
printf 'Tell me a story.\nAnother one.\n' | "$BIN" -m d1 -a 1 -n 1000 -e 1 -O 0 > /dev/null 2> "$TMP/err"
[ $? = 1 ] && grep -q "^Error: the conversation (.* tokens) and -n 1000 no longer fit the context of 1024 tokens (-C); -O 1 drops the oldest turns instead" "$TMP/err" &&
    ok "-O 0: the chat ends there, with one message" || { not_ok "-O 0"; tail -2 "$TMP/err"; }
printf 'Tell me a story.\nAnother one.\n' | "$BIN" -m d1 -a 1 -n 10 -e 1 -C 48 > /dev/null 2> "$TMP/err"
[ $? = 0 ] && grep -q "^the context is full: the oldest turn goes (2 messages, [0-9]* tokens; 33 of 48 now)" "$TMP/err" &&
    ok "-C 48: a conversation's context of 48 tokens, whatever the model's" || { not_ok "-C 48"; grep -v "^prompt" "$TMP/err" | tail -4; }
printf 'Hello there, how are you today?\n' | "$BIN" -m d1 -a 1 -n 4 -C 20 > /dev/null 2> "$TMP/err"
[ $? = 0 ] && grep -q "^message 1: [0-9]* tokens with the template: no room in the context of 20 (-C): not sent" "$TMP/err" &&
    ok "a message longer than the context: one line, not sent, the chat goes on" || { not_ok "a message past the context"; tail -3 "$TMP/err"; }
# a message too long for the context alone is not sent, and the turns before it stay
{ echo "Say one word."; printf 'word %.0s' $(seq 1 40); echo; echo "Say two words."; } | "$BIN" -m d1 -a 1 -n 4 -C 64 -e 1 > /dev/null 2> "$TMP/err"
[ $? = 0 ] && grep -q "^message 2: [0-9]* tokens with the template: no room in the context of 64 (-C): not sent" "$TMP/err" &&
    ! grep -q "the oldest turn goes" "$TMP/err" && grep -q "^\[turn 2: [0-9]* prompt tokens, [1-9][0-9]* of them from the cache" "$TMP/err" &&
    ok "a message too long for the context: not sent, and nothing dropped for it" || { not_ok "a message too long: the turns before"; grep -v "^prompt" "$TMP/err" | tail -4; }
# each turn draws its own random numbers: the same message after /new, sampled, gets another reply
printf 'Tell me something.\n/new\nTell me something.\n' | "$BIN" -m d1 -a 1 -n 12 -e 1 -t 1 -k 0 > "$TMP/out" 2> /dev/null
[ "$(grep -c '^> Tell me something.' "$TMP/out")" = 2 ] && [ "$(sed -n 2p "$TMP/out")" != "$(sed -n 5p "$TMP/out")" ] && [ -n "$(sed -n 5p "$TMP/out")" ] &&
    ok "sampled turns draw their own random numbers: the same message twice, two replies" || { not_ok "the turns' random numbers"; cat "$TMP/out"; }
# GPT-2's tokenizer on a model of 300 tokens: a message with a token past them is not sent
printf 'Hello\n' | "$BIN" -m $H -a 1 -n 2 > /dev/null 2> "$TMP/err"
[ $? = 0 ] && grep -q "^message 1: token [0-9]* is outside the model's vocabulary of 300: not sent" "$TMP/err" &&
    ok "a chat message with a token the model does not have: one line, not sent" || { not_ok "a chat token outside the vocabulary"; tail -3 "$TMP/err"; }
printf '{"messages": [{"role": "tool", "content": "42"}]}\n' > "$TMP/m5.jsonl"
expect_error "-a 1 -f: a role we do not lay out" "$TMP/m5.jsonl: line 1: message 1: role \"tool\": we lay out system, user and assistant messages" "$BIN" -m d1 -a 1 -f "$TMP/m5.jsonl"
# -f records of a conversation: without "messages" (or "instruction") and with broken ones, one message naming the line
printf '{"messages": [{"role": "user", "content": "Hi"}]}\n{"question": "Hi"}\n' > "$TMP/m1.jsonl"
expect_error "-a 1 -f: a record without \"messages\"" "$TMP/m1.jsonl: line 2: no string \"instruction\" and no \"messages\"" "$BIN" -m d1 -a 1 -f "$TMP/m1.jsonl"
printf '{"messages": []}\n' > "$TMP/m2.jsonl"
expect_error "-a 1 -f: an empty \"messages\"" "$TMP/m2.jsonl: line 1: \"messages\" is empty" "$BIN" -m d1 -a 1 -f "$TMP/m2.jsonl"
printf '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant"}]}\n' > "$TMP/m3.jsonl"
expect_error "-a 1 -f: a message without content" "$TMP/m3.jsonl: line 1: message 2 is not {\"role\": \"...\", \"content\": \"...\"}" "$BIN" -m d1 -a 1 -f "$TMP/m3.jsonl"
printf '{"messages": [{"role": "user", "content": "Hi"}]}\n{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]}\n' > "$TMP/m4.jsonl"
"$BIN" -m d1 -a 1 -f "$TMP/m4.jsonl" -n 3 -v 1 > "$TMP/out" 2> "$TMP/err" && [ "$(grep -c '^--- [12] of 2' "$TMP/out")" = 2 ] &&
    grep "^prompt: 32 tokens" "$TMP/err" | grep -qF ' 3886:By 68:e 198:\n 198:\n 21017:### 18261: Response 25:: 198:\n' &&
    ok "-a 1 -f {\"messages\": [...]}: each conversation answered, in the Alpaca template for GPT-2's tokenizer (-v 1: the ids)" ||
    { not_ok "-f messages"; head -4 "$TMP/out"; grep "^prompt" "$TMP/err" | cut -c1-200; }
expect_error "-M above 1" "-M (min-p) must be in [0, 1]" "$BIN" -m d1 -M 2
expect_error "-r 0" "-r (the repetition penalty) must be in (0, 100]" "$BIN" -m d1 -r 0
expect_error "-c without -a 1 -i" "-c (the instruction's input) goes with -a 1 -i" "$BIN" -m d1 -c x

# a model's own generation settings (./convert keeps a folder's generation_config.json in our
# file): used unless a flag says otherwise, each named with its source; its end tokens stop
# generation; do_sample false is greedy
mkdir -p "$TMP/gen" && cp $F/llama_gqa3/config.json $F/llama_gqa3/model.safetensors "$TMP/gen/"
first=$("$BIN" -m build/llama_gqa3.bin -z 1 -t 0 -r 1 -n 1 -i "3,4" 2> /dev/null | awk '{ print $2 }')
printf '{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.05, "eos_token_id": [2, %s]}\n' "$first" > "$TMP/gen/generation_config.json"
./convert -i "$TMP/gen" -o "$TMP/gen.bin" 2> /dev/null
"$BIN" -m "$TMP/gen.bin" -z 1 -i "3,4" -n 5 > "$TMP/out" 2> "$TMP/err"
grep -q "^sampling: temperature 0.6 (the model file), top-k 20 (the model file), top-p 0.9 (the model file), min-p 0 (default), repetition penalty 1.05 (the model file)" "$TMP/err" &&
    ok "a model file's generation settings are used, each named with its source" || { not_ok "the model file's settings"; grep sampling "$TMP/err"; }
"$BIN" -m "$TMP/gen.bin" -z 1 -i "3,4" -n 5 -t 0 -r 1 > "$TMP/out" 2> "$TMP/err"
grep -q "^sampling: greedy (flag), repetition penalty 1 (flag)" "$TMP/err" && grep -q "stopped at an end token of the model's generation settings: 2 prompt tokens, 0 generated" "$TMP/err" &&
    ok "... flags win; the file's second end token ($first) stops generation" || { not_ok "flags over the file, its end tokens"; tail -4 "$TMP/err"; }
"$BIN" -m "$TMP/gen.bin" -z 1 -i "3,4" -n 5 -t 0 -r 1 -e 1 > "$TMP/out" 2> "$TMP/err"
grep -q "stopped at the length limit: 2 prompt tokens, 5 generated" "$TMP/err" && ok "... and -e 1 goes past it" || { not_ok "-e 1 past the file's end tokens"; tail -2 "$TMP/err"; }
printf '{"do_sample": false, "temperature": 0.6}\n' > "$TMP/gen/generation_config.json"
./convert -i "$TMP/gen" -o "$TMP/gen.bin" 2> /dev/null
"$BIN" -m "$TMP/gen.bin" -z 1 -i "3,4" -n 2 > /dev/null 2> "$TMP/err"
grep -q "^sampling: greedy (the model file: do_sample false)" "$TMP/err" && ok "do_sample false in the file: greedy" || { not_ok "do_sample false"; grep sampling "$TMP/err"; }
"$BIN" -m d1 -i "Hi" -n 2 > /dev/null 2> "$TMP/err"
grep -q "^sampling: temperature 1 (default), top-k 50 (default), top-p 1 (default), min-p 0 (default), repetition penalty 1 (default)" "$TMP/err" &&
    ok "no settings anywhere, no chat: transformers' generate() defaults" || { not_ok "generate()'s defaults"; grep sampling "$TMP/err"; }

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
