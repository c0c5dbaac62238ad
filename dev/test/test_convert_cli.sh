#!/usr/bin/env bash
# convert as a user runs it: flags, every direction (Hugging Face folder <-> checkpoint,
# fp32 <-> bf16, shards, the tokenizer's files), byte-for-byte round trips from the command
# line, and one clear error for each kind of bad input, with nothing on disk lost.
#
#     make convert && bash dev/test/test_convert_cli.sh ./convert
#
# Small models only (the V=300 fixtures and a random d1), so it takes seconds.
set -u
BIN=$(realpath "${1:-./convert}")
[ -x "$BIN" ] || { echo "Error: $BIN is not built (make convert)"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d /tmp/test_convert_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
F=dev/reference/fixtures
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
run() { "$BIN" "$@" 2> "$TMP/stderr"; }
# A model file's origin (lib/model_notes.h: header bytes 512..1023, the Hugging Face folder it
# was converted from), and whether two model files are the same but for it
origin() { dd if="$1" bs=512 skip=1 count=1 status=none | tr -d '\0'; }
same_but_origin() { cmp -s -n 512 "$1" "$2" && cmp -s -i 1024 "$1" "$2"; }

# --- flags
"$BIN" -h > "$TMP/help" && grep -q -- "-S <size>" "$TMP/help" && grep -q "auto" "$TMP/help" && ok "-h lists the flags with defaults" || not_ok "-h"
expect_error "an unknown flag" "unknown flag -q" "$BIN" -q 1
expect_error "a flag without a value" "needs a value" "$BIN" -i
expect_error "no -o" "-i (the model to read) and -o (what to write) are both needed" "$BIN" -i d1
expect_error "-d other than auto/fp32/bf16" "-d takes auto, fp32 or bf16" "$BIN" -i d1 -o x.bin -d fp8
expect_error "-S into a checkpoint" "-S (shards) is for Hugging Face folders" "$BIN" -i d1 -o x.bin -S 1M
expect_error "-S without a size" "needs a size like 2G" "$BIN" -i d1 -o dir -S 5Q
expect_error "a model that does not exist" "no/such: no such file or folder" "$BIN" -i no/such -o x.bin

# --- round trips from the command line, byte for byte
run -i $F/gpt2_tiny_model.bin -o "$TMP/hf" && run -i "$TMP/hf" -o "$TMP/back.bin" && same_but_origin "$TMP/back.bin" $F/gpt2_tiny_model.bin &&
    [ "$(origin "$TMP/back.bin")" = "$TMP/hf" ] && [ -z "$(origin $F/gpt2_tiny_model.bin)" ] &&
    ok "checkpoint -> folder -> checkpoint: the same bytes, and the folder noted as its origin" || not_ok "export/import round trip"
run -i $F/gpt2_tiny_model.bin -o "$TMP/bf16.bin" -d bf16 && run -i "$TMP/bf16.bin" -o "$TMP/hf16" && grep -q '"dtype": "bfloat16"' "$TMP/hf16/config.json" &&
    run -i "$TMP/hf16" -o "$TMP/bf16_again.bin" && same_but_origin "$TMP/bf16.bin" "$TMP/bf16_again.bin" &&
    ok "bf16 checkpoint (v5) -> BF16 folder -> v5 (-d auto keeps bf16): the same bytes" || not_ok "bf16 round trip"
run -i "$TMP/bf16.bin" -o "$TMP/widened.bin" -d fp32 && [ "$(od -An -tu4 -j4 -N4 "$TMP/widened.bin" | tr -d ' ')" = 3 ] &&
    ok "-d fp32 widens a bf16 checkpoint to version 3" || not_ok "-d fp32"
run -i $F/gpt2_tiny_model.bin -o "$TMP/sharded" -S 100K && [ "$(ls "$TMP/sharded" | grep -c -- '-of-00006.safetensors')" = 6 ] &&
    run -i "$TMP/sharded" -o "$TMP/sharded.bin" && same_but_origin "$TMP/sharded.bin" $F/gpt2_tiny_model.bin &&
    ok "-S 100K: 6 shards and an index; back: the same bytes" || not_ok "shards"
run -i d1 -o "$TMP/d1" && cmp -s "$TMP/d1/vocab.json" data/gpt2/encoder.json && cmp -s "$TMP/d1/merges.txt" data/gpt2/vocab.bpe &&
    ok "a model with GPT-2's vocabulary gets vocab.json + merges.txt (data/gpt2's)" || not_ok "tokenizer into the folder"
[ ! -e "$TMP/hf/vocab.json" ] && ok "a model with another vocabulary (V=300) gets no tokenizer files" || not_ok "V=300 got GPT-2's tokenizer"
run -i "$TMP/d1" -o "$TMP/d1.bin" -t "$TMP/tok" && cmp -s "$TMP/tok/encoder.json" data/gpt2/encoder.json && cmp -s "$TMP/tok/vocab.bpe" data/gpt2/vocab.bpe &&
    ok "-t DIR: the folder's vocab.json + merges.txt become DIR/encoder.json + vocab.bpe" || not_ok "-t on import"

# --- bad input: one message, nothing on disk lost
head -c 1000 $F/hf_tiny_fp32/model.safetensors > "$TMP/head.safetensors"
mkdir -p "$TMP/trunc" && cp $F/hf_tiny_fp32/config.json "$TMP/trunc/" && cp "$TMP/head.safetensors" "$TMP/trunc/model.safetensors"
expect_error "a truncated model.safetensors" "$TMP/trunc/model.safetensors: header length" "$BIN" -i "$TMP/trunc" -o "$TMP/x.bin"
expect_error "-o into a missing folder" "cannot open '$TMP/no/dir/x.bin.tmp'" "$BIN" -i $F/gpt2_tiny_model.bin -o "$TMP/no/dir/x.bin"
cp "$TMP/back.bin" "$TMP/keep.bin"
"$BIN" -i "$TMP/trunc" -o "$TMP/keep.bin" > /dev/null 2>&1
cmp -s "$TMP/back.bin" "$TMP/keep.bin" && [ ! -e "$TMP/keep.bin.tmp" ] && ok "a failed run leaves the file it would have written untouched" || not_ok "file overwritten"
cp -r "$TMP/hf" "$TMP/hf_keep"
expect_error "shards into a folder that holds model.safetensors" "holds model.safetensors: a model in the other layout" "$BIN" -i d1 -o "$TMP/hf" -S 1M
diff -r "$TMP/hf" "$TMP/hf_keep" > /dev/null && ok "... and the folder is as it was" || not_ok "the folder changed"

# a sharded export over an older one with as many shards, failing half-way: the old model
# stays whole (the new shards are renamed into place only when all are written)
run -i d1 -s 1 -o "$TMP/sh" -S 4M && n=$(ls "$TMP/sh" | grep -c -- '-of-') && last=$(ls "$TMP/sh" | grep -- '-of-' | tail -1) &&
    mkdir "$TMP/sh/$last.tmp" && ! run -i d1 -s 2 -o "$TMP/sh" -S 4M && rmdir "$TMP/sh/$last.tmp" &&
    run -i "$TMP/sh" -o "$TMP/sh_back.bin" && run -i d1 -s 1 -o "$TMP/seed1.bin" && same_but_origin "$TMP/sh_back.bin" "$TMP/seed1.bin" &&
    ok "a sharded re-export that fails half-way leaves the old model whole ($n shards)" || not_ok "sharded re-export failure: a mixed model"
expect_error "-t with a checkpoint in and out" "-t goes with a Hugging Face folder" "$BIN" -i $F/gpt2_tiny_model.bin -o "$TMP/t.bin" -t "$TMP/tok2"
mkdir -p "$TMP/elsewhere" && (cd "$TMP/elsewhere" && "$BIN" -i d1 -o out > /dev/null 2> err) && grep -q "gets no tokenizer files" "$TMP/elsewhere/err" &&
    [ -f "$TMP/elsewhere/out/model.safetensors" ] && ok "an export away from the repository: no data/gpt2 there, a note, no failure" || not_ok "export elsewhere"


# --- the Llama family
run -i $F/llama_gqa3.gguf -o "$TMP/ll.bin" && run -i "$TMP/ll.bin" -o "$TMP/ll_hf" -S 100K && run -i "$TMP/ll_hf" -o "$TMP/ll_back.bin" &&
    same_but_origin "$TMP/ll.bin" "$TMP/ll_back.bin" && grep -q '"LlamaForCausalLM"' "$TMP/ll_hf/config.json" &&
    ok "GGUF -> our Llama file -> sharded folder -> our file: the same bytes" || not_ok "Llama round trip"
# generation_config.json: its sampling settings and end tokens kept in our file, and written back
mkdir -p "$TMP/gen" && cp $F/llama_gqa3/config.json $F/llama_gqa3/model.safetensors "$TMP/gen/" &&
    printf '{"do_sample": true, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05, "min_p": null,\n "eos_token_id": [2, 1], "bos_token_id": 1}\n' > "$TMP/gen/generation_config.json" &&
    run -i "$TMP/gen" -o "$TMP/gen.bin" && grep -q "generation settings: do_sample true, temperature 0.6, top-k 20, top-p 0.9, repetition penalty 1.05, end tokens 2 1" "$TMP/stderr" &&
    run -i "$TMP/gen.bin" -o "$TMP/gen_hf" && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d != {'do_sample': True, 'temperature': 0.6, 'top_p': 0.9, 'top_k': 20, 'repetition_penalty': 1.05, 'eos_token_id': [2, 1]})" "$TMP/gen_hf/generation_config.json" &&
    run -i "$TMP/gen_hf" -o "$TMP/gen_back.bin" && same_but_origin "$TMP/gen.bin" "$TMP/gen_back.bin" && [ "$(origin "$TMP/gen.bin")" = "$TMP/gen" ] &&
    ok "generation_config.json -> our file (on stderr) -> generation_config.json: the same settings" || not_ok "generation settings round trip"
[ ! -e "$TMP/ll_hf/generation_config.json" ] && ok "a model without generation settings gets no generation_config.json" || not_ok "an empty generation_config.json"
run -i "$TMP/ll.bin" -o "$TMP/gen_hf" && [ ! -e "$TMP/gen_hf/generation_config.json" ] && grep -q "removed $TMP/gen_hf/generation_config.json" "$TMP/stderr" &&
    ok "... and an older export's generation_config.json in the folder is removed, said on stderr" || not_ok "a stale generation_config.json"
printf '{"eos_token_id": []}' > "$TMP/gen/generation_config.json"
run -i "$TMP/gen" -o "$TMP/x.bin" && ! grep -q "generation settings" "$TMP/stderr" && ok "\"eos_token_id\": [] is no end tokens" || not_ok "an empty eos_token_id"
printf '{"eos_token_id": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}' > "$TMP/gen/generation_config.json"
run -i "$TMP/gen" -o "$TMP/x.bin" && grep -q "lists 10 end tokens; we keep the first 8" "$TMP/stderr" && grep -q "end tokens 1 2 3 4 5 6 7 8$" "$TMP/stderr" &&
    ok "ten end tokens: the first 8 kept, with a note" || { not_ok "ten end tokens"; cat "$TMP/stderr"; }
printf '{"top_p": 1.5}' > "$TMP/gen/generation_config.json"
expect_error "a generation_config.json with top_p 1.5" "$TMP/gen/generation_config.json: a bad top-p setting" "$BIN" -i "$TMP/gen" -o "$TMP/x.bin"
printf '{"eos_token_id": [2, 999]}' > "$TMP/gen/generation_config.json"
expect_error "an end token outside the vocabulary" "\"eos_token_id\" holds something that is no token id of the 128" "$BIN" -i "$TMP/gen" -o "$TMP/x.bin"
cp "$TMP/gen.bin" "$TMP/badnotes.bin" && printf '\377\377\377\177' | dd of="$TMP/badnotes.bin" bs=4 seek=64 conv=notrunc status=none
expect_error "a model file whose notes are corrupt" "$TMP/badnotes.bin: its notes (header fields 64..): a bad set of flags" "$BIN" -i "$TMP/badnotes.bin" -o "$TMP/x.bin"
run -i $F/qwen2_gqa4 -o "$TMP/qw.bin" -d bf16 && [ "$(od -An -tu4 -j4 -N4 "$TMP/qw.bin" | tr -d ' ')" = 5 ] &&
    grep -q "Qwen2, L=1 C=64 NH=4 NKV=1 HS=16 H=64 V=128 maxT=128, tied head, q/k/v biases" "$TMP/stderr" &&
    ok "a Qwen2 folder -> version 5, with what it read on stderr" || not_ok "Qwen2 to bf16"
expect_error "-t with a Llama-family model" "-t is GPT-2's: a Llama-family tokenizer goes next to the model file" "$BIN" -i $F/llama_mha3 -o "$TMP/m.bin" -t "$TMP/tok3"

# --- the Llama family's tokenizers
"$BIN" -i $F/tok_llama3/tokenizer.json -o "$TMP/l3_tokenizer.bin" 2> "$TMP/err" &&
    grep -q "wrote $TMP/l3_tokenizer.bin (tokenizer: 1502 tokens (5 special), .* merges, Llama 3's pre-tokenizer, chat template Llama 3)" "$TMP/err" &&
    ok "a tokenizer.json alone -> our tokenizer file, described in one line" || { not_ok "tokenizer.json alone"; cat "$TMP/err"; }
"$BIN" -i $F/tok_qwen2/tokenizer.json -o "$TMP/q2_tokenizer.bin" 2> "$TMP/err" && grep -q "merges, NFC, Qwen2's pre-tokenizer" "$TMP/err" &&
    grep -q 'chat template ChatML (default system message: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")' "$TMP/err" &&
    ok "Qwen2's: NFC first, and the template's default system message" || { not_ok "Qwen2's tokenizer"; cat "$TMP/err"; }
"$BIN" -i $F/llama_gqa3.gguf -o "$TMP/g3.bin" 2> "$TMP/err" && [ -f "$TMP/g3.bin" ] && [ ! -f "$TMP/g3_tokenizer.bin" ] &&
    grep -q 'pre-tokenizer "default" is not one we have' "$TMP/err" &&
    ok "a GGUF file whose tokenizer we lack: the model converts, with a note" || { not_ok "GGUF with an unknown pre-tokenizer"; cat "$TMP/err"; }
mkdir -p "$TMP/badtok"
sed 's/"type": "Split"/"type": "Whitespace"/' $F/tok_llama3/tokenizer.json > "$TMP/badtok/tokenizer.json"
expect_error "a tokenizer.json with a pre-tokenizer we lack" "$TMP/badtok/tokenizer.json: a pre_tokenizer we do not have" "$BIN" -i "$TMP/badtok/tokenizer.json" -o "$TMP/b_tokenizer.bin"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['model']['merges'][7]=['zz','qq']; json.dump(d,open(sys.argv[2],'w'))" \
    $F/tok_llama3/tokenizer.json "$TMP/badtok/tokenizer.json" 2> /dev/null &&
    expect_error "a merge of tokens that are not in the vocabulary" "$TMP/badtok/tokenizer.json: merge 7 is not two tokens" "$BIN" -i "$TMP/badtok/tokenizer.json" -o "$TMP/b_tokenizer.bin"
head -c 20000 $F/tok_llama3/tokenizer.json > "$TMP/badtok/tokenizer.json"
expect_error "a truncated tokenizer.json" "$TMP/badtok/tokenizer.json: JSON error" "$BIN" -i "$TMP/badtok/tokenizer.json" -o "$TMP/b_tokenizer.bin"
[ ! -e "$TMP/b_tokenizer.bin" ] && ok "no tokenizer file is left behind by a failed conversion" || not_ok "a failed conversion left $TMP/b_tokenizer.bin"
# ours back to Hugging Face's tokenizer.json + tokenizer_config.json: the bytes that
# transformers loaded and matched (dev/reference/bpe_tokenizer_reference.py)
S2=data/smollm2/SmolLM2-135M-Instruct # (make smollm2; make test fetches it)
mkdir -p "$TMP/tokexp"
"$BIN" -i $S2.bin -o "$TMP/tokexp/smollm2" 2> "$TMP/err" && grep -q "wrote $TMP/tokexp/smollm2/tokenizer.json" "$TMP/err" &&
    "$BIN" -i build/tok_llama3_tokenizer.bin -o "$TMP/tokexp/llama3" 2>> "$TMP/err" &&
    "$BIN" -i build/tok_llama31_tokenizer.bin -o "$TMP/tokexp/llama31" 2>> "$TMP/err" &&
    "$BIN" -i build/tok_llama32_tokenizer.bin -o "$TMP/tokexp/llama32" 2>> "$TMP/err" &&
    "$BIN" -i build/tok_qwen2_tokenizer.bin -o "$TMP/tokexp/qwen2" 2>> "$TMP/err" &&
    (cd "$TMP/tokexp" && sha256sum -c --quiet "$OLDPWD/$F/tokenizer_export.sha256") &&
    ok "SmolLM2 (with its model) and the Llama 3 (3.1, 3.2 templates) / Qwen2 rules back to Hugging Face tokenizer files: transformers' bytes" ||
    { not_ok "tokenizer export"; cat "$TMP/err"; }
rm -rf "$TMP/tokexp"
cp build/llama_mha3.bin "$TMP/mha.bin" && cp build/tok_llama3_tokenizer.bin "$TMP/mha_tokenizer.bin"
expect_error "a tokenizer beside a model it does not fit" "$TMP/mha_tokenizer.bin: 1502 tokens, but the model beside it" "$BIN" -i "$TMP/mha.bin" -o "$TMP/mha_hf"

# --- GGUF files listed
run -i $F/gguf_tiny.gguf > "$TMP/gguf.txt" && grep -q "GGUF version 3, 17 key-value pairs, 11 tensors, data from byte 1088 (alignment 64)" "$TMP/gguf.txt" &&
    grep -q 'test.str  *str "héllo\\nworld"' "$TMP/gguf.txt" && grep -q "q6_k  *Q6_K  *\[512, 3\]" "$TMP/gguf.txt" &&
    ok "-i FILE.gguf lists its metadata and tensors" || not_ok "GGUF listing"
expect_error "a GGUF file without a model's metadata" "gguf_tiny.gguf: no llama.context_length" "$BIN" -i $F/gguf_tiny.gguf -o "$TMP/x.bin"
head -c 3000 $F/gguf_tiny.gguf > "$TMP/trunc.gguf"
expect_error "a truncated GGUF file" "$TMP/trunc.gguf: at byte" "$BIN" -i "$TMP/trunc.gguf"
expect_error "a GGUF file that does not exist" "no/such.gguf: cannot open it" "$BIN" -i no/such.gguf

# --- a hostile shard index: 200,000 tensors in one shard, all of them in the index. The
# index's checks sort and search (O(n log n)); one search per entry through the shard's
# list was 2 x 10^10 string comparisons, minutes. (The run then stops at the first name
# that is not GPT-2's, as it should.) And an index naming more shards than we open.
H="$TMP/hostile" && mkdir -p "$H" && cp "$F/hf_tiny_fp32/config.json" "$H/"
N=200000
awk -v n=$N 'BEGIN { printf "{"; for (i = 0; i < n; i++) printf "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", (i ? "," : ""), i, 4 * i, 4 * i + 4; printf "}" }' > "$TMP/header"
hl=$(stat -c %s "$TMP/header")
{ printf "$(printf '\\x%02x' $((hl & 255)) $((hl >> 8 & 255)) $((hl >> 16 & 255)) $((hl >> 24 & 255)) 0 0 0 0)"; cat "$TMP/header"; head -c $((4 * N)) /dev/zero; } > "$H/model-00001-of-00001.safetensors"
awk -v n=$N 'BEGIN { printf "{\"metadata\":{},\"weight_map\":{"; for (i = 0; i < n; i++) printf "%s\"t%d\":\"model-00001-of-00001.safetensors\"", (i ? "," : ""), i; printf "}}" }' > "$H/model.safetensors.index.json"
start=$(date +%s)
timeout 120 "$BIN" -i "$H" -o "$TMP/hostile.bin" > /dev/null 2> "$TMP/err"
rc=$?
secs=$(($(date +%s) - start))
if [ $rc = 1 ] && grep -q "not part of GPT-2\|is missing" "$TMP/err"; then ok "a shard index of $N entries is checked and the folder refused in ${secs} s: $(head -c 100 "$TMP/err")"
else not_ok "a shard index of $N entries (exit $rc after ${secs} s; 124: did not finish in 120 s): $(head -c 200 "$TMP/err")"; fi
awk 'BEGIN { printf "{\"weight_map\":{"; for (i = 0; i < 5000; i++) printf "%s\"t%d\":\"model-%05d-of-05000.safetensors\"", (i ? "," : ""), i, i; printf "}}" }' > "$H/model.safetensors.index.json"
expect_error "an index naming 5,000 shards" "names more than 4096 shards" "$BIN" -i "$H" -o "$TMP/hostile.bin"
# a tensor in two shards, the index naming it in one of them: which one is meant?
shard() { # FILE TENSOR...: a safetensors file of one-float tensors
    local out=$1 header="{" i=0
    shift
    for t in "$@"; do header="$header$([ $i = 0 ] || echo ,)\"$t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[$((4 * i)),$((4 * i + 4))]}"; i=$((i + 1)); done
    header="$header}"
    local n=${#header}
    { printf "$(printf '\\x%02x' $((n & 255)) $((n >> 8 & 255)) 0 0 0 0 0 0)"; printf '%s' "$header"; head -c $((4 * i)) /dev/zero; } > "$out"
}
rm -f "$H"/*.safetensors
shard "$H/model-00001-of-00002.safetensors" t0
shard "$H/model-00002-of-00002.safetensors" t0 t1
printf '{"weight_map": {"t0": "model-00001-of-00002.safetensors", "t1": "model-00002-of-00002.safetensors"}}' > "$H/model.safetensors.index.json"
expect_error "a tensor in two shards" "tensor t0 is in two shards" "$BIN" -i "$H" -o "$TMP/hostile.bin"

# --- Hugging Face *-bnb-4bit folders (dev/reference/bnb4_reference.py: transformers saved them
# with bitsandbytes' 4-bit layers): their bytes kept in our version-7 file, and back
F=dev/reference/fixtures
for m in llama qwen2; do
    rm -rf "$TMP/bnb4_$m"
    if run -i $F/bnb4_$m -o "$TMP/bnb4_$m.bin" && run -i "$TMP/bnb4_$m.bin" -o "$TMP/bnb4_$m" && run -i "$TMP/bnb4_$m" -o "$TMP/bnb4_${m}_again.bin" &&
        same_but_origin "$TMP/bnb4_$m.bin" "$TMP/bnb4_${m}_again.bin" && [ "$(od -An -tu4 -j4 -N4 "$TMP/bnb4_$m.bin" | tr -d ' ')" = 7 ] &&
        grep -q '"quant_method": "bitsandbytes", "load_in_4bit": true' "$TMP/bnb4_$m/config.json"; then
        ok "bnb4_$m: folder -> version-7 file -> *-bnb-4bit folder -> the same file, byte for byte"
    else not_ok "bnb4_$m round trip"; tail -2 "$TMP/stderr"; fi
done
# (transformers loads such an export: python dev/reference/bnb4_reference.py --check-ours DIR NAME)
bad_bnb() { # bad_bnb NAME: a copy of the llama folder to spoil
    rm -rf "$TMP/$1"; cp -r $F/bnb4_llama "$TMP/$1"; chmod -R u+w "$TMP/$1"
}
bad_bnb q_type; sed -i 's/"bnb_4bit_quant_type": "nf4"/"bnb_4bit_quant_type": "nf5"/' "$TMP/q_type/config.json"
expect_error "a 4-bit type we do not know" 'bnb_4bit_quant_type "nf5": we know nf4 and fp4' "$BIN" -i "$TMP/q_type" -o "$TMP/q_type.bin"
bad_bnb q_8bit; sed -i 's/"load_in_8bit": false/"load_in_8bit": true/; s/"load_in_4bit": true/"load_in_4bit": false/' "$TMP/q_8bit/config.json"
expect_error "an 8-bit bitsandbytes checkpoint" "a bitsandbytes 8-bit (LLM.int8) checkpoint; we read its 4-bit ones" "$BIN" -i "$TMP/q_8bit" -o "$TMP/q_8bit.bin"
bad_bnb q_gptq; sed -i 's/"quant_method": "bitsandbytes"/"quant_method": "gptq"/' "$TMP/q_gptq/config.json"
expect_error "another method's quantization" "its quantization_config is gptq's" "$BIN" -i "$TMP/q_gptq" -o "$TMP/q_gptq.bin"
bad_bnb q_dq; sed -i 's/"bnb_4bit_use_double_quant": true/"bnb_4bit_use_double_quant": false/' "$TMP/q_dq/config.json"
expect_error "double quantization config.json does not say" "double quantization, which config.json does not have" "$BIN" -i "$TMP/q_dq" -o "$TMP/q_dq.bin"
bad_bnb q_bs; LC_ALL=C sed -i 's/"blocksize": 64, "dtype"/"blocksize": 48, "dtype"/' "$TMP/q_bs/model.safetensors"
expect_error "a blocksize bitsandbytes does not have" "blocksize 48; bitsandbytes' are powers of two from 32 to 4096" "$BIN" -i "$TMP/q_bs" -o "$TMP/q_bs.bin"
bad_bnb q_state; LC_ALL=C sed -i 's/layers\.1\.mlp\.up_proj\.weight\.quant_state\.bitsandbytes__nf4/layers.1.mlp.up_proj.weight.quant_state.bitsandbytes__xx4/' "$TMP/q_state/model.safetensors"
expect_error "a layer with another type's quantization state" "tensor model.layers.1.mlp.up_proj.weight.quant_state.bitsandbytes__xx4: a quantization state other than config.json's nf4" "$BIN" -i "$TMP/q_state" -o "$TMP/q_state.bin"
for b in q_type q_8bit q_gptq q_dq q_bs q_state; do [ ! -e "$TMP/$b.bin" ] || not_ok "$b: a file was written"; done
# -Q: any Llama-family model into 4 bits (the same bytes as finetune_lora -Q), and back
run -i build/llama_gqa3.bin -o "$TMP/gqa3_fp4.bin" -Q fp4:128:0 && run -i "$TMP/gqa3_fp4.bin" -o "$TMP/gqa3_back.bin" -Q none &&
    grep -q "wrote $TMP/gqa3_back.bin (Llama-family model file, version 3: fp32)" "$TMP/stderr" &&
    ./infer -m "$TMP/gqa3_fp4.bin" -z 1 -t 0 -n 16 -i 1,2,3 > "$TMP/a" 2> /dev/null && ./infer -m "$TMP/gqa3_back.bin" -z 1 -t 0 -n 16 -i 1,2,3 > "$TMP/b" 2> /dev/null &&
    cmp -s "$TMP/a" "$TMP/b" && ! cmp -s "$TMP/gqa3_back.bin" build/llama_gqa3.bin &&
    ok "-Q fp4:128:0, then -Q none: a 4-bit file and its dequantized floats, the same greedy tokens" || not_ok "-Q fp4:128:0 and back"
expect_error "-Q on a GPT-2" "-Q (4-bit linear layers) is for the Llama family's models, not GPT-2's" "$BIN" -i d1 -o "$TMP/g.bin" -Q nf4
expect_error "-Q nf4:100" "-Q nf4:100: expected nf4 or fp4" "$BIN" -i build/llama_gqa3.bin -o "$TMP/g.bin" -Q nf4:100
head -c 5000 "$TMP/bnb4_llama.bin" > "$TMP/bnb4_trunc.bin"
expect_error "a truncated 4-bit file" "$TMP/bnb4_trunc.bin: file has 5000 bytes" "$BIN" -i "$TMP/bnb4_trunc.bin" -o "$TMP/x.bin"

echo "$passed passed, $failed failed"
[ $failed = 0 ]
