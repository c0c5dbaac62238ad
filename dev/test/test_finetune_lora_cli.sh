#!/usr/bin/env bash
# Tests finetune_lora's command line on SmolLM2-135M-Instruct (make smollm2): the data's
# checks (each problem counted, dropped or refused with its line), a short training run and
# the files it writes (PEFT's adapter, metrics.tsv), a run that starts from that adapter,
# the same bytes for the same seed, and bad flags and files: one error each, exit 1.
#
#   make finetune_lora infer smollm2 && bash dev/test/test_finetune_lora_cli.sh ./finetune_lora
set -u

BIN=${1:-./finetune_lora}
MODEL=data/smollm2/SmolLM2-135M-Instruct.bin
if [ ! -x "$BIN" ] || [ ! -f "$MODEL" ]; then
    echo "Error: needs $BIN and $MODEL (make finetune_lora smollm2)"
    exit 1
fi
TMP=$(mktemp -d /tmp/test_finetune_lora_cli.XXXXXX)
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
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# 12 good records, then one of each problem: an empty output, no instruction, invalid UTF-8
# (a lone continuation byte), a duplicate of the first, one far longer than -t 64 tokens; and
# a blank line (skipped)
D="$TMP/data.jsonl"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    printf '{"instruction": "What is %d plus %d?", "input": "", "output": "%d plus %d is %d."}\n' $i $i $i $i $((2 * i))
done > "$D"
printf '{"instruction": "Say nothing.", "input": "", "output": ""}\n' >> "$D"                 # line 13
printf '{"input": "x", "output": "no instruction"}\n' >> "$D"                                 # line 14
printf '{"instruction": "Bad \x80 byte", "input": "", "output": "x"}\n' >> "$D"               # line 15
head -1 "$D" >> "$D"                                                                         # line 16
printf '{"instruction": "Count.", "input": "", "output": "%s"}\n' "$(seq -s ' ' 1 200)" >> "$D" # line 17
printf '\n' >> "$D"
OUT="$TMP/out"
printf '{"instruction": "Name a striped animal.", "answer": "zebra"}\n' > "$TMP/clean_eval.jsonl"
"$BIN" -d "$D" -o "$OUT" -t 64 -n 2 -b 2 -k 1 -v 1 -V 0.2 -r 4 -T q_proj,v_proj -E "$TMP/clean_eval.jsonl" > "$TMP/log" 2>&1
status=$?
report "-E: the leakage check passes a question the data does not hold" $(grep -q "^leakage: none of $TMP/clean_eval.jsonl's 1 questions and answers is in $D's 17 records" "$TMP/log" && echo 1 || echo 0) "$(grep -i leak "$TMP/log")"
report "trains on the good records: exit 0" $([ $status = 0 ] && echo 1 || echo 0) "$(tail -3 "$TMP/log")"
report "the report: 17 records, 5 dropped, one of each problem" \
    $(grep -q "17 records; 5 dropped: 2 with an empty or missing instruction or output, 1 with invalid UTF-8, 1 duplicates, 1 longer than T = 64" "$TMP/log" && echo 1 || echo 0) \
    "$(grep '^data:' "$TMP/log")"
report "the token-length distribution is printed" $(grep -q '^tokens per example (template, response, end token): min [0-9]*, median' "$TMP/log" && echo 1 || echo 0)
report "the split: 10 for training, 2 for validation" $(grep -q '^split: 10 for training, 2 for validation' "$TMP/log" && echo 1 || echo 0)
report "LoRA on q_proj and v_proj of 30 layers: 60 modules" $(grep -q '60 modules (q_proj,v_proj)' "$TMP/log" && echo 1 || echo 0) "$(grep '^LoRA' "$TMP/log")"
report "the base model's validation loss, then the steps'" $(grep -q 'step     0/2 | val loss' "$TMP/log" && grep -q 'step     2/2 | loss .* val loss' "$TMP/log" && echo 1 || echo 0)
report "adapter_config.json: PEFT's LoRA, r 4, dropout 0.05, q_proj and v_proj" \
    $(grep -q '"peft_type": "LORA"' "$OUT/adapter_config.json" && grep -q '"r": 4,' "$OUT/adapter_config.json" && grep -q '"lora_dropout": 0.05,' "$OUT/adapter_config.json" && grep -q '"q_proj"' "$OUT/adapter_config.json" && grep -q '"v_proj"' "$OUT/adapter_config.json" && echo 1 || echo 0)
# 60 modules, each A (4, 576) and B (576 or 192, 4): 30 x 4 x (576 + 576 + 576 + 192) floats
bytes=$(stat -c %s "$OUT/adapter_model.safetensors")
data=$((30 * 4 * (576 + 576 + 576 + 192) * 4))
report "adapter_model.safetensors holds the 120 tensors' $data bytes" $([ "$bytes" -gt "$data" ] && [ "$bytes" -lt $((data + 40000)) ] && echo 1 || echo 0) "$bytes bytes"
report "metrics.tsv: a header, the base model's line and 2 steps" $([ "$(wc -l < "$OUT/metrics.tsv")" = 4 ] && echo 1 || echo 0)

# -P 1: each step (of two micro-batches) timed by phase, adding up to the step's time; the
# phases in metrics.tsv's ms_ columns (11 fields a line)
source "$(dirname "$0")/phases_check.sh"
"$BIN" -d "$D" -o "$TMP/phases" -t 64 -n 2 -b 2 -k 2 -v 2 -V 0.2 -r 4 -T q_proj,v_proj -P 1 > "$TMP/phases.log" 2>&1
read -r lines worst zero <<< "$(phase_lines "$TMP/phases.log")"
report "-P 1: both steps timed by phase, adding up to the step's time (within $worst ms)" \
    $([ "$lines" = 2 ] && [ "$zero" = 0 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.11) }' &&
      [ "$(awk -F'\t' 'NR > 2 && NF == 11 && $7 != "" && $11 != ""' "$TMP/phases/metrics.tsv" | wc -l)" = 2 ] && echo 1 || echo 0) \
    "$(grep -E '^step' "$TMP/phases.log" | head -3)"

"$BIN" -d "$D" -o "$TMP/again" -t 64 -n 2 -b 2 -k 1 -v 1 -V 0.2 -r 4 -T q_proj,v_proj > /dev/null 2>&1
report "the same seed: the same adapter, bit for bit" $(cmp -s "$OUT/adapter_model.safetensors" "$TMP/again/adapter_model.safetensors" && echo 1 || echo 0)
"$BIN" -d "$D" -o "$TMP/more" -t 64 -n 1 -b 2 -k 1 -V 0.2 -i "$OUT" > "$TMP/log2" 2>&1
report "-i: starts from that adapter (its rank and modules), trains on" \
    $([ $? = 0 ] && grep -q 'r=4, alpha 16 .*60 modules (from -i)' "$TMP/log2" && echo 1 || echo 0) "$(grep '^LoRA\|Error' "$TMP/log2")"

# -i keeps the adapter's own LoRA dropout (its adapter_config.json's lora_dropout), unless -D
# is given; -D's value is then what the new adapter records
sed 's/"lora_dropout": 0.05,/"lora_dropout": 0.125,/' "$OUT/adapter_config.json" > "$TMP/drop.json"
mkdir -p "$TMP/drop_in" && cp "$OUT/adapter_model.safetensors" "$TMP/drop_in/" && mv "$TMP/drop.json" "$TMP/drop_in/adapter_config.json"
"$BIN" -d "$D" -o "$TMP/drop_kept" -t 64 -n 1 -b 2 -k 1 -V 0.2 -i "$TMP/drop_in" > "$TMP/log_drop" 2>&1
report "-i: the adapter's own dropout (0.125), in the run and in what it writes" \
    $(grep -q 'dropout 0.125, 60 modules (from -i)' "$TMP/log_drop" && grep -q '"lora_dropout": 0.125,' "$TMP/drop_kept/adapter_config.json" && echo 1 || echo 0) \
    "$(grep '^LoRA\|Error' "$TMP/log_drop")"
"$BIN" -d "$D" -o "$TMP/drop_set" -t 64 -n 1 -b 2 -k 1 -V 0.2 -i "$TMP/drop_in" -D 0.25 > "$TMP/log_drop2" 2>&1
report "-i with -D 0.25: -D's" \
    $(grep -q 'dropout 0.25, 60 modules (from -i)' "$TMP/log_drop2" && grep -q '"lora_dropout": 0.25,' "$TMP/drop_set/adapter_config.json" && echo 1 || echo 0) \
    "$(grep '^LoRA\|Error' "$TMP/log_drop2")"

# checkpoints: a run of 4 steps saving every 2; the same run stopped after step 2 (its step 4
# files removed) and resumed with -y 1 must end with the same adapter, bit for bit, and the
# same metrics (but the timing column)
R="-d $D -t 64 -n 4 -b 2 -k 1 -v 2 -V 0.2 -r 4 -T q_proj,v_proj -S 2"
"$BIN" $R -o "$TMP/whole" > /dev/null 2>&1
"$BIN" $R -o "$TMP/stopped" > /dev/null 2>&1
rm -rf "$TMP/stopped/step_000004" "$TMP/stopped/state_000004.bin" "$TMP/stopped/adapter_model.safetensors"
head -4 "$TMP/stopped/metrics.tsv" > "$TMP/m" && printf '3\t0\t9\t9\t\t0\t\t\t\t\t\n' >> "$TMP/m" && mv "$TMP/m" "$TMP/stopped/metrics.tsv" # (and a line past the checkpoint)
report "checkpoints every 2 steps: step_000002/, state_000002.bin, ..._4" \
    $([ -f "$TMP/whole/step_000002/adapter_model.safetensors" ] && [ -f "$TMP/whole/state_000002.bin" ] && [ -f "$TMP/whole/state_000004.bin" ] && echo 1 || echo 0)
"$BIN" $R -o "$TMP/stopped" -y 1 > "$TMP/log3" 2>&1
report "-y 1 resumes at step 2" $(grep -q 'resuming at step 2 of 4' "$TMP/log3" && echo 1 || echo 0) "$(grep -i 'error\|resum' "$TMP/log3")"
report "... and ends with the same adapter, bit for bit" $(cmp -s "$TMP/whole/adapter_model.safetensors" "$TMP/stopped/adapter_model.safetensors" && cmp -s "$TMP/whole/step_000004/adapter_model.safetensors" "$TMP/stopped/step_000004/adapter_model.safetensors" && cmp -s "$TMP/whole/state_000004.bin" "$TMP/stopped/state_000004.bin" && echo 1 || echo 0)
report "... and the same metrics.tsv (the line past the checkpoint gone)" $(diff <(cut -f1-5 "$TMP/whole/metrics.tsv") <(cut -f1-5 "$TMP/stopped/metrics.tsv") > /dev/null && echo 1 || echo 0) "$(diff <(cut -f1-5 "$TMP/whole/metrics.tsv") <(cut -f1-5 "$TMP/stopped/metrics.tsv") | head -4 | tr '\n' ' ')"
# a run checkpointed by an older finetune_lora, whose metrics.tsv had 6 columns (no -P
# phases): resumed, its kept lines are padded to today's 11, one table again
"$BIN" $R -o "$TMP/old_columns" > /dev/null 2>&1
rm -rf "$TMP/old_columns/step_000004" "$TMP/old_columns/state_000004.bin" "$TMP/old_columns/adapter_model.safetensors"
head -4 "$TMP/old_columns/metrics.tsv" | cut -f1-6 > "$TMP/m" && mv "$TMP/m" "$TMP/old_columns/metrics.tsv"
"$BIN" $R -o "$TMP/old_columns" -y 1 > "$TMP/log_old" 2>&1
report "resuming a 6-column metrics.tsv: every line 11 columns, the old values kept" \
    $([ "$(awk -F'\t' 'NF != 11' "$TMP/old_columns/metrics.tsv" | wc -l)" = 0 ] && [ "$(wc -l < "$TMP/old_columns/metrics.tsv")" = 6 ] &&
      diff <(cut -f1-5 "$TMP/whole/metrics.tsv") <(cut -f1-5 "$TMP/old_columns/metrics.tsv") > /dev/null && echo 1 || echo 0) \
    "$(awk -F'\t' '{ printf "%d ", NF }' "$TMP/old_columns/metrics.tsv"; grep -i error "$TMP/log_old")"

# -M: the adapter merged into a model file that infer runs, computing what model + adapter did
"$BIN" -d "$D" -t 64 -V 0.2 -i "$OUT" -M "$TMP/merged.bin" > "$TMP/log4" 2>&1
losses=$(grep '^validation loss:' "$TMP/log4" | sed 's/validation loss: \([0-9.]*\) with the adapter, \([0-9.]*\) merged/\1 \2/')
report "-M: the merged model's validation loss is the adapter's (to 1e-4)" \
    $(echo "$losses" | awk '{ d = $1 - $2; if (d < 0) d = -d; exit !(NF == 2 && d < 1e-4) }' && echo 1 || echo 0) "$losses"
report "... written as a model file, with its tokenizer beside it" $([ -s "$TMP/merged.bin" ] && [ -s "$TMP/merged_tokenizer.bin" ] && echo 1 || echo 0)
./infer -m "$TMP/merged.bin" -a 1 -i "What is 3 plus 3?" -t 0 -n 8 > "$TMP/answer" 2> "$TMP/infer_log"
report "... which infer runs" $([ $? = 0 ] && [ -s "$TMP/answer" ] && echo 1 || echo 0) "$(tail -2 "$TMP/infer_log")"
# infer -L: the adapter applied unmerged, the merged model's greedy tokens. (Not sampled
# ones: the two sum in different orders, and a logit 1e-6 away moves a draw that falls
# within 1e-6 of a boundary to the next token: seen once in 144.)
head -12 "$D" > "$TMP/prompts.jsonl"
./infer -m "$MODEL" -L "$OUT" -f "$TMP/prompts.jsonl" -a 1 -t 0 -n 12 > "$TMP/unmerged" 2> "$TMP/unmerged_log"
./infer -m "$TMP/merged.bin" -f "$TMP/prompts.jsonl" -a 1 -t 0 -n 12 > "$TMP/merged_out" 2> /dev/null
report "infer -L (unmerged): the merged model's greedy tokens, 12 prompts" $([ -s "$TMP/unmerged" ] && cmp -s "$TMP/unmerged" "$TMP/merged_out" && echo 1 || echo 0) "$(diff "$TMP/unmerged" "$TMP/merged_out" | head -3 | tr '\n' ' ')"
report "... and names the adapter: r 4, 60 modules" $(grep -q "^adapter: $OUT (r=4, alpha=16, 60 modules" "$TMP/unmerged_log" && echo 1 || echo 0) "$(grep '^adapter' "$TMP/unmerged_log")"

# QLoRA (-Q nf4): the base's linear layers in 4 bits, their fp32 freed; -M merges into the
# dequantized weights. SmolLM2-135M: 106.2M of its 134.5M parameters are in the linear layers.
"$BIN" -d "$D" -o "$TMP/qlora" -t 64 -n 2 -b 2 -k 1 -v 1 -V 0.2 -r 4 -T q_proj,v_proj -Q nf4 > "$TMP/qlog" 2>&1
status=$?
report "-Q nf4: trains, exit 0; the model line names NF4, blocksize 64, double quantization" \
    $([ $status = 0 ] && grep -q '^model: .*, its linear layers in nf4 (blocksize 64, double quantization): [0-9.]* MiB in all$' "$TMP/qlog" && echo 1 || echo 0) "$(grep '^model' "$TMP/qlog"; tail -1 "$TMP/qlog")"
mib=$(sed -n 's/^memory (MiB): base weights \([0-9.]*\) (the linear layers 4-bit, the rest fp32.*/\1/p' "$TMP/qlog")
report "... the base held in about 165 MiB (fp32 for 28.3M parameters, 4.127 bits for 106.2M), not fp32's 513" \
    $(awk -v m="$mib" 'BEGIN { exit !(m > 160 && m < 170) }' && echo 1 || echo 0) "$(grep '^memory' "$TMP/qlog")"
loss_fp32=$(grep 'step     0/2 | val loss' "$TMP/log" | sed 's/.*val loss \([0-9.]*\).*/\1/')
loss_nf4=$(grep 'step     0/2 | val loss' "$TMP/qlog" | sed 's/.*val loss \([0-9.]*\).*/\1/')
# (the same model, not equal: measured 1.013 against 1.191 on these 2 validation records; a
# base gone wrong, a random model's, is near ln 49152 = 10.8)
report "... the NF4 base's validation loss within 30% of the fp32 base's, not equal ($loss_nf4 and $loss_fp32)" \
    $(awk -v a="$loss_nf4" -v b="$loss_fp32" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d > 0 && d < 0.3 * b) }' && echo 1 || echo 0)
# a 4-bit model file (./convert -Q nf4: bitsandbytes' bytes, as a *-bnb-4bit folder gives them)
# is the same QLoRA base: -m it without -Q, the same losses as the run above, to the digit
./convert -i "$MODEL" -o "$TMP/nf4.bin" -Q nf4 2> /dev/null
"$BIN" -m "$TMP/nf4.bin" -d "$D" -o "$TMP/qlora_file" -t 64 -n 2 -b 2 -k 1 -v 1 -V 0.2 -r 4 -T q_proj,v_proj > "$TMP/qlog_file" 2>&1
report "-m a 4-bit file (./convert -Q nf4), no -Q: the run of -Q nf4, loss for loss" \
    $([ $? = 0 ] && [ -n "$(grep '^step' "$TMP/qlog")" ] && cmp -s <(grep '^step' "$TMP/qlog" | sed 's/| [0-9]* tokens\/s //; s/ETA.*//') <(grep '^step' "$TMP/qlog_file" | sed 's/| [0-9]* tokens\/s //; s/ETA.*//') &&
      grep -q "^model: $TMP/nf4.bin: Llama family, 134.5M parameters, frozen, its linear layers in nf4 (blocksize 64, double quantization): 160.6 MiB in all" "$TMP/qlog_file" && echo 1 || echo 0) \
    "$(grep '^step' "$TMP/qlog_file" | head -2 | tr '\n' ' '; tail -1 "$TMP/qlog_file")"
"$BIN" -m "$TMP/nf4.bin" -d "$D" -t 64 -n 1 -Q fp4 > "$TMP/qlog_fp4" 2>&1
report "... -Q fp4 on it: one clear error" $([ $? = 1 ] && grep -q "nf4.bin: its linear layers are nf4 in blocks of 64 with double quantization already" "$TMP/qlog_fp4" && echo 1 || echo 0) "$(tail -1 "$TMP/qlog_fp4")"
"$BIN" -d "$D" -t 64 -V 0.2 -i "$TMP/qlora" -Q nf4 -M "$TMP/qmerged.bin" > "$TMP/qlog2" 2>&1
losses=$(grep '^validation loss:' "$TMP/qlog2" | sed 's/validation loss: \([0-9.]*\) with the adapter, \([0-9.]*\) merged/\1 \2/')
report "-Q nf4 -M: merged into the dequantized base, the adapter's validation loss (to 1e-4)" \
    $(echo "$losses" | awk '{ d = $1 - $2; if (d < 0) d = -d; exit !(NF == 2 && d < 1e-4) }' && [ -s "$TMP/qmerged.bin" ] && echo 1 || echo 0) "$losses"

# -A 1 (activation recomputation) on the CPU: the same losses as the run above, less memory
"$BIN" -d "$D" -o "$TMP/recompute" -t 64 -n 2 -b 2 -k 1 -v 1 -V 0.2 -r 4 -T q_proj,v_proj -Q nf4 -A 1 > "$TMP/alog" 2>&1
report "-A 1: the -Q nf4 run, loss for loss, its activations smaller" \
    $([ $? = 0 ] && [ -n "$(grep '^step' "$TMP/qlog")" ] && cmp -s <(grep '^step' "$TMP/qlog" | sed 's/| [0-9]* tokens\/s //; s/ETA.*//') <(grep '^step' "$TMP/alog" | sed 's/| [0-9]* tokens\/s //; s/ETA.*//') &&
      awk -v a="$(sed -n 's/^ledger (bytes): .*activations \([0-9]*\),.*/\1/p' "$TMP/alog")" -v q="$(sed -n 's/^ledger (bytes): .*activations \([0-9]*\),.*/\1/p' "$TMP/qlog")" 'BEGIN { exit !(a > 0 && a < q) }' && echo 1 || echo 0) \
    "$(grep '^ledger' "$TMP/alog" "$TMP/qlog" | tr '\n' ' ')"
# --plan: the CPU's allocations predicted to the byte (the ledger the runs above printed), and
# the tables for a shape that is not loaded
for run in "log|" "qlog|-Q nf4" "alog|-Q nf4 -A 1"; do
    log=$TMP/${run%%|*} q=${run#*|}
    t=$(sed -n 's/^memory (MiB): .*(B=2, T=\([0-9]*\))$/\1/p' "$log")
    ledger=$(sed -n 's/^ledger (bytes): .*, total \([0-9]*\)$/\1/p' "$log")
    plan=$("$BIN" -m "$MODEL" -b 2 -t "${t:-0}" -r 4 -T q_proj,v_proj $q --plan 2>&1 | sed -n 's/^(\([0-9]*\) bytes)$/\1/p')
    report "--plan ${q:-(fp32)}: the total is what the run allocated, to the byte ($plan)" $([ -n "$ledger" ] && [ "$ledger" = "$plan" ] && echo 1 || echo 0) \
        "plan $plan, ledger $ledger (T=$t)"
done
"$BIN" -m llama:llama3.1-8b -b 1 -t 2048 -r 16 -Q nf4 --plan -G 80 > "$TMP/plan" 2>&1
report "--plan -m llama:llama3.1-8b: the parts, full / LoRA / QLoRA, what fits 80 GiB" \
    $([ $? = 0 ] && grep -q '^| base weights, 4-bit codes (the linear layers) | 3328.0 |$' "$TMP/plan" && grep -q '^| full (estimate: 16 B a parameter) |' "$TMP/plan" &&
      grep -q '^| QLoRA (nf4) | .* | yes |$' "$TMP/plan" && grep -q '^| LoRA | .* | yes |$' "$TMP/plan" && grep -q '^| full .* | no |$' "$TMP/plan" &&
      grep -q '^in 80 GiB, with these settings: the largest micro-batch at T=2048 is B=[0-9]*; the longest T at B=1 is [0-9]*' "$TMP/plan" && echo 1 || echo 0) \
    "$(tail -3 "$TMP/plan" | tr '\n' ' ')"

# adapter_config.json names the base as PEFT expects: base_model_name_or_path is the Hugging
# Face folder our model file came from (./convert notes it), else null; our file in the
# safetensors metadata's base_model_file
report "adapter_config.json: base_model_name_or_path null (SmolLM2 came from a GGUF); our file in the weights' metadata" \
    $(grep -q '"base_model_name_or_path": null,' "$OUT/adapter_config.json" && head -c 300 "$OUT/adapter_model.safetensors" | grep -qaF "\"__metadata__\":{\"format\":\"pt\",\"base_model_file\":\"$MODEL\"}" && echo 1 || echo 0) \
    "$(grep base_model "$OUT/adapter_config.json" | tr '\n' ' '; head -c 200 "$OUT/adapter_model.safetensors" | tail -c 190)"
# a GPT-2 from a Hugging Face folder (a random d1 exported and read back), tuned with GPT-2's
# tokenizer folder (-g data/gpt2), then merged: the folder is named, and nothing is copied
./convert -i d1 -o "$TMP/g2hf" > /dev/null 2>&1 && ./convert -i "$TMP/g2hf" -o "$TMP/g2.bin" > /dev/null 2>&1
"$BIN" -m "$TMP/g2.bin" -g data/gpt2 -d "$D" -o "$TMP/g2out" -t 64 -n 1 -b 2 -V 0.2 > "$TMP/log_g2" 2>&1
report "a GPT-2 converted from a folder: base_model_name_or_path is that folder" \
    $(grep -qF "\"base_model_name_or_path\": \"$TMP/g2hf\"," "$TMP/g2out/adapter_config.json" && echo 1 || echo 0) "$(tail -2 "$TMP/log_g2"; grep base_model "$TMP/g2out/adapter_config.json" | tr '\n' ' ')"
"$BIN" -m "$TMP/g2.bin" -g data/gpt2 -d "$D" -t 64 -V 0.2 -i "$TMP/g2out" -M "$TMP/g2merged.bin" > "$TMP/log_g2m" 2>&1
report "-M with GPT-2's tokenizer folder (-g data/gpt2): exit 0, the model written, no tokenizer copied" \
    $([ $? = 0 ] && [ -s "$TMP/g2merged.bin" ] && [ ! -e "$TMP/g2merged_tokenizer.bin" ] && echo 1 || echo 0) "$(tail -2 "$TMP/log_g2m")"

# infer -E: the evaluation, base model and tuned model on the same questions
{
    printf '{"instruction": "What is 5 plus 5?", "input": "", "answer": "10"}\n'
    printf '{"instruction": "What is 7 plus 7?", "input": "", "answer": "14", "partial": ["fourteen"]}\n'
    printf '{"instruction": "Name the ISO 3166 two-letter code of France.", "answer": "FR", "partial": ["FRA"]}\n'
} > "$TMP/eval.jsonl"
./infer -m "$MODEL" -L "$OUT" -E "$TMP/eval.jsonl" -n 16 > "$TMP/eval.md" 2> "$TMP/eval_log"
report "-E: exit 0, a table row per question with both models' classes" \
    $([ $? = 0 ] && [ "$(grep -cE '^\| [1-3] \| .*\| (correct|partially correct|format error|hallucination) \|.*\| (correct|partially correct|format error|hallucination) \|$' "$TMP/eval.md")" = 3 ] && echo 1 || echo 0) "$(tail -3 "$TMP/eval_log")"
report "... and the counts, adding up to 3 for each model" \
    $(awk -F'|' '/^\| (base model|with the adapter) \|/ { n++; if ($3 + $4 + $5 + $6 != 3) bad = 1 } END { exit !(n == 2 && !bad) }' "$TMP/eval.md" && echo 1 || echo 0) "$(tail -3 "$TMP/eval.md" | tr '\n' ' ')"
report "... valid UTF-8 (a byte that is no character printed as U+FFFD)" $(iconv -f UTF-8 -t UTF-8 "$TMP/eval.md" > /dev/null 2>&1 && echo 1 || echo 0)
report "... with progress and an ETA on stderr" $(grep -q '^evaluation, with the adapter: 3/3 questions, [0-9.]* s, ETA 0s$' "$TMP/eval_log" && echo 1 || echo 0)
./infer -m "$MODEL" -E "$TMP/eval.jsonl" -n 16 > "$TMP/eval_base.md" 2> /dev/null
report "... without -L: the base model's column only, the same answers" \
    $(diff <(grep '^| [1-3] |' "$TMP/eval.md" | cut -d'|' -f2-6) <(grep '^| [1-3] |' "$TMP/eval_base.md" | cut -d'|' -f2-6) > /dev/null && ! grep -q 'with the adapter' "$TMP/eval_base.md" && echo 1 || echo 0)
printf '{"instruction": "a", "answer": "b"}\n{"instruction": "c"}\n' > "$TMP/eval_bad.jsonl"
./infer -m "$MODEL" -E "$TMP/eval_bad.jsonl" > /dev/null 2> "$TMP/stderr"
report "-E: a question without an answer: exit 1, its line" $([ $? = 1 ] && grep -qF 'eval_bad.jsonl: line 2: no "answer" string' "$TMP/stderr" && echo 1 || echo 0) "$(head -2 "$TMP/stderr" | tr '\n' ' ')"
./infer -m "$MODEL" -E "$TMP/eval.jsonl" -i "hello" > /dev/null 2> "$TMP/stderr"
report "-E with -i: a usage error" $([ $? = 1 ] && grep -qF -- '-E (an evaluation) asks its own questions' "$TMP/stderr" && echo 1 || echo 0) "$(head -1 "$TMP/stderr")"
./infer -m "$MODEL" -L "$TMP/none" -i "hi" > /dev/null 2> "$TMP/stderr"
report "-L: a folder that is no adapter: exit 1, the file" $([ $? = 1 ] && grep -qF "$TMP/none/adapter_config.json" "$TMP/stderr" && echo 1 || echo 0) "$(head -1 "$TMP/stderr")"
./infer -m build/hf_tiny_fp32.bin -L "$OUT" -z 1 -i 1 > /dev/null 2> "$TMP/stderr"
report "-L: an adapter for another model: exit 1, which" $([ $? = 1 ] && grep -qF "adapter_model.safetensors" "$TMP/stderr" && echo 1 || echo 0) "$(head -1 "$TMP/stderr")"

# errors: exit 1, one line naming the problem
expect_error() {  # expect_error NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    "$BIN" "$@" > "$TMP/stdout" 2> "$TMP/stderr"
    local status=$?
    report "$name" $([ $status = 1 ] && grep -qF -- "$needle" "$TMP/stderr" && echo 1 || echo 0) "exit $status: $(head -2 "$TMP/stderr" | tr '\n' ' ')"
}
expect_error "-x 1 refuses the records with problems, naming their lines" "$D: line 13: an empty or missing field" -d "$D" -o "$TMP/x" -t 64 -x 1
grep -q "line 15: invalid UTF-8" "$TMP/stderr" && grep -q "line 16: a duplicate" "$TMP/stderr" && grep -q "line 17: longer than T" "$TMP/stderr"
report "... each kind with its first line" $([ $? = 0 ] && echo 1 || echo 0) "$(cat "$TMP/stderr" | tr '\n' ' ')"
printf '{"instruction": "a", "output": "b"}\n{"instruction": "a", "output": \n' > "$TMP/broken.jsonl"
expect_error "a line that is not JSON: its number" "broken.jsonl: line 2: JSON error" -d "$TMP/broken.jsonl" -o "$TMP/x"
printf '{"instruction": "a", "output": 3}\n' > "$TMP/number.jsonl"
expect_error "a field that is not a string" "line 1: instruction, input and output must be strings" -d "$TMP/number.jsonl" -o "$TMP/x"
expect_error "no such data file" "$TMP/none.jsonl: cannot read it" -d "$TMP/none.jsonl" -o "$TMP/x"
expect_error "a module SmolLM2 does not have" 'no module "c_attn"' -d "$D" -o "$TMP/x" -t 64 -T c_attn
expect_error "a rank above a layer's size" "-r 600: larger than" -d "$D" -o "$TMP/x" -t 64 -r 600
expect_error "-t beyond the model's context" "-t 9000: longer than the model's context (8192)" -d "$D" -t 9000
expect_error "an unknown flag" "unknown flag -Z" -Z 1
expect_error "-P that is not a count" "flag -P needs an integer >= 0" -P -1
expect_error "-Q with a type we do not know" "-Q nf5: expected nf4, fp4 or none" -Q nf5
expect_error "-Q with a blocksize bitsandbytes does not take" "-Q nf4:48: the blocksize must be a power of two from 32 to 4096" -Q nf4:48
expect_error "-Q with double quantization neither 0 nor 1" "-Q fp4:64:2: double quantization is 0 or 1" -Q fp4:64:2
expect_error "-Q none with a blocksize" "-Q none:64: expected" -Q none:64
expect_error "-Q with text after it" "-Q nf4:64:1:0: expected" -Q nf4:64:1:0
expect_error "--plan with a shape we do not know" "llama:llama9: no such shape" -m llama:llama9 --plan
expect_error "--plan -G 0" "-G 0: the memory to plan for must be above 0 GiB" -m llama:smollm2-135m --plan -G 0
expect_error "--plan with a module the model does not have" 'no module "c_attn"' -m llama:smollm2-135m --plan -T c_attn
expect_error "--plan with -t beyond the context" "-t 9000: longer than the model's context (8192)" -m llama:smollm2-135m --plan -t 9000
expect_error "-D 1: a dropout that drops everything" "-D: the dropout probability must be below 1" -D 1
expect_error "an adapter folder that is not one" "$TMP/none/adapter_config.json" -d "$D" -o "$TMP/x" -t 64 -i "$TMP/none"
expect_error "-E: evaluation questions in the training data: refused" "eval.jsonl: 2 of its 3 questions are in the training data" -d "$D" -o "$TMP/x" -t 64 -E "$TMP/eval.jsonl"
grep -q "eval.jsonl line 1: the same question as $D line 5" "$TMP/stderr" && grep -q "eval.jsonl line 2: the same question as $D line 7" "$TMP/stderr"
report "... each with its line and the record's" $([ $? = 0 ] && [ ! -e "$TMP/x" ] && echo 1 || echo 0) "$(head -3 "$TMP/stderr" | tr '\n' ' ')"
expect_error "-M without -i" "-M $TMP/m.bin: merges an adapter: name it with -i" -M "$TMP/m.bin"
expect_error "-y 1 with no checkpoint" "$TMP/x: -y 1, but no checkpoint here" $R -o "$TMP/x" -y 1
expect_error "a new run into checkpoints: not written over" "already holds checkpoints (the newest: step 4)" $R -o "$TMP/whole"
before=$(sha256sum "$OUT/adapter_model.safetensors" "$OUT/metrics.tsv")
expect_error "a new run into a finished one's folder: not written over" "already holds an adapter" -d "$D" -o "$OUT" -t 64 -n 1
report "... whose adapter and metrics are untouched" $([ "$before" = "$(sha256sum "$OUT/adapter_model.safetensors" "$OUT/metrics.tsv")" ] && echo 1 || echo 0)
expect_error "resuming with other flags: which" "state_000004.bin: written by a run with 10 training records, -b 2" $R -o "$TMP/whole" -y 1 -b 1
expect_error "resuming with another base (-Q nf4 over an fp32 run's state): which" "written by a run whose base was fp32 (no -Q); this one's is -Q nf4:64:1" $R -o "$TMP/whole" -y 1 -Q nf4

echo
echo "$passed passed, $failed failed"
[ $failed = 0 ]
