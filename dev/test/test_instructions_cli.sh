#!/usr/bin/env bash
# Tests data/instructions.c (the fine-tuning chapter's instruction data) on a made-up
# iso-codes folder written here, so that it runs without Debian's iso-codes package:
# the records it writes, the held-out countries kept out of the training data, the same
# bytes for the same seed, and each bad input's one error line (exit 1, the file named,
# earlier outputs untouched). The leakage checks here are our own (grep), not the program's.
#
#   make data/instructions && bash dev/test/test_instructions_cli.sh ./data/instructions
set -u

BIN=${1:-./data/instructions}
if [ ! -x "$BIN" ]; then
    echo "Error: $BIN is not an executable; build it first (make data/instructions)"
    exit 1
fi
TMP=$(mktemp -d /tmp/test_instructions_cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

report() {  # report NAME OK(0/1) [detail]
    if [ "$2" = 1 ]; then
        printf '%-74s OK\n' "$1"; passed=$((passed + 1))
    else
        printf '%-74s NOT OK\n' "$1"; failed=$((failed + 1))
        [ -n "${3:-}" ] && printf '  %s\n' "$3"
    fi
}

# A made-up ISO 3166-1 table: 40 countries "Land 00".."Land 39" (codes QA..QZ, RA..RN; numeric
# 100..139), official names for the even ones; Germany; "Guinea" and "New Guinea" (the first
# a word of the second: never held out); a name with a quote and a backslash (JSON escapes);
# a common_name. And ISO 4217: a currency per country, coded from its alpha-2 (QAX, ...), and
# two more not tied to any (XAU-like codes).
ISO="$TMP/iso"
mkdir -p "$ISO"
{
    printf '{\n  "3166-1": [\n'
    i=0
    for first in Q R; do
        for second in A B C D E F G H I J K L M N O P Q R S T U V W X Y Z; do
            [ $i -ge 40 ] && break
            official=""
            [ $((i % 2)) = 0 ] && official=", \"official_name\": \"Republic of Land $(printf %02d $i)\""
            printf '    {"alpha_2": "%s%s", "alpha_3": "%s%sL", "name": "Land %02d", "numeric": "%03d"%s},\n' \
                $first $second $first $second $i $((100 + i)) "$official"
            i=$((i + 1))
        done
    done
    printf '    {"alpha_2": "DE", "alpha_3": "DEU", "name": "Germany", "numeric": "276", "official_name": "Federal Republic of Germany"},\n'
    printf '    {"alpha_2": "GN", "alpha_3": "GIN", "name": "Guinea", "numeric": "324"},\n'
    printf '    {"alpha_2": "NG", "alpha_3": "NGU", "name": "New Guinea", "numeric": "598"},\n'
    printf '    {"alpha_2": "SQ", "alpha_3": "SQT", "name": "Quote \\"Land\\" \\\\ Back", "numeric": "901"},\n'
    printf '    {"alpha_2": "BO", "alpha_3": "BOL", "name": "Bolivia, Plurinational State of", "common_name": "Bolivia", "numeric": "068"}\n'
    printf '  ]\n}\n'
} > "$ISO/iso_3166-1.json"
{
    printf '{\n  "4217": [\n'
    k=0
    for code in $(grep -o '"alpha_2": "[A-Z]*"' "$ISO/iso_3166-1.json" | cut -d'"' -f4); do
        printf '    {"alpha_3": "%sX", "name": "Money of %s", "numeric": "%03d"},\n' "$code" "$code" $((200 + k))
        k=$((k + 1))
    done
    printf '    {"alpha_3": "XAG", "name": "Silver", "numeric": "961"},\n'
    printf '    {"alpha_3": "XAU", "name": "Gold", "numeric": "959"}\n'
    printf '  ]\n}\n'
} > "$ISO/iso_4217.json"
countries=45
currencies=47

OUT="$TMP/out"
"$BIN" -d "$ISO" -o "$OUT" -e 8 -s 5 > "$TMP/log" 2>&1
report "runs on a made-up iso-codes folder (45 countries, 47 currencies)" $([ $? = 0 ] && [ -s "$OUT/train.jsonl" ] && [ -s "$OUT/eval.jsonl" ] && echo 1 || echo 0) "$(cat "$TMP/log")"

# the held-out countries: the eval file's subjects (its alpha-2 questions name them)
grep -o 'two-letter code of [^?]*?' "$OUT/eval.jsonl" | sed 's/two-letter code of //; s/?$//' > "$TMP/held"
held=$(wc -l < "$TMP/held")
report "8 held-out countries, each asked its alpha-2 code" $([ "$held" = 8 ] && echo 1 || echo 0) "$held"
report "Germany is always held out" $(grep -qx 'Germany' "$TMP/held" && echo 1 || echo 0)
report "... and the alpha-3 code of a third of them (3): 11 questions" $([ "$(wc -l < "$OUT/eval.jsonl")" = 11 ] && echo 1 || echo 0)
report "Guinea, a word of New Guinea's name, is never held out" $(grep -qx 'Guinea' "$TMP/held" && echo 0 || echo 1)
ok=1
while read -r name; do
    line=$(grep -F "\"name\": \"$name\"" "$ISO/iso_3166-1.json" | head -1)
    a2=$(echo "$line" | grep -o '"alpha_2": "[A-Z]*"' | cut -d'"' -f4)
    a3=$(echo "$line" | grep -o '"alpha_3": "[A-Z]*"' | cut -d'"' -f4)
    for word in "$name" "$a2" "$a3"; do
        if grep -qw -- "$word" "$OUT/train.jsonl"; then ok=0; echo "  leaked: $word ($name)"; fi
    done
    grep -q "\"answer\": \"$a2\"" "$OUT/eval.jsonl" || { ok=0; echo "  no answer $a2 for $name"; }
done < "$TMP/held"
report "no held-out country's name, alpha-2 or alpha-3 code is a word of train.jsonl" $ok
ok=1
while read -r name; do
    a2=$(grep -F "\"name\": \"$name\"" "$ISO/iso_3166-1.json" | head -1 | grep -o '"alpha_2": "[A-Z]*"' | cut -d'"' -f4)
    grep -q "${a2}X" "$OUT/train.jsonl" && { ok=0; echo "  currency ${a2}X kept"; }
done < "$TMP/held"
report "currencies coded from a held-out country are left out" $ok
# the counts: per country kept, 2 alpha-2 + alpha-3 + numeric + 2 reverse (+ official name
# where it has one); per currency kept, 3
kept=$((countries - held))
officials=0
while IFS= read -r line; do
    name=$(echo "$line" | sed 's/.*"name": "\(\([^"\\]\|\\.\)*\)".*/\1/')
    name_plain=$(printf '%b' "${name//\\\"/\"}")
    grep -qxF "$name_plain" "$TMP/held" && continue
    echo "$line" | grep -q official_name && officials=$((officials + 1))
done < <(grep '"alpha_2"' "$ISO/iso_3166-1.json")
expect=$((kept * 6 + officials + (currencies - held) * 3))
got=$(wc -l < "$OUT/train.jsonl")
report "train.jsonl: 6 records a kept country (+1 official name), 3 a currency ($expect)" $([ "$got" = "$expect" ] && echo 1 || echo 0) "got $got"
report "no two training records the same" $([ -z "$(sort "$OUT/train.jsonl" | uniq -d)" ] && echo 1 || echo 0)
bad=$(grep -cv '^{"instruction": "[^"].*", "input": ".*", "output": "[^"].*"}$' "$OUT/train.jsonl")
report "every training line: instruction, input, output, in that order, non-empty" $([ "$bad" = 0 ] && echo 1 || echo 0) "$bad lines not"
bad=$(grep -cEv '^\{"instruction": ".*", "input": "", "output": ".*", "answer": "([A-Z]{2}", "partial": \["[A-Z]{3}|[A-Z]{3}", "partial": \["[A-Z]{2})"\]\}$' "$OUT/eval.jsonl")
report "every eval line: instruction, empty input, output, answer, partial (the other code)" $([ "$bad" = 0 ] && echo 1 || echo 0) "$bad lines not"
if grep -qxF 'Quote "Land" \ Back' "$TMP/held"; then quoted="$OUT/eval.jsonl"; else quoted="$OUT/train.jsonl"; fi
report "a quote and a backslash in a name come out JSON-escaped" \
    $(grep -qF 'Quote \"Land\" \\ Back' "$quoted" && echo 1 || echo 0)
report "a country's common_name stands for its name" \
    $(grep -qF 'Bolivia, Plurinational' "$OUT/train.jsonl" "$OUT/eval.jsonl" && echo 0 || echo 1)
report "some records carry their subject in Alpaca's input field" $(grep -q '"input": "[^"]' "$OUT/train.jsonl" && echo 1 || echo 0)

"$BIN" -d "$ISO" -o "$TMP/again" -e 8 -s 5 > /dev/null 2>&1
report "the same seed: the same bytes" $(cmp -s "$OUT/train.jsonl" "$TMP/again/train.jsonl" && cmp -s "$OUT/eval.jsonl" "$TMP/again/eval.jsonl" && echo 1 || echo 0)
"$BIN" -d "$ISO" -o "$TMP/other" -e 8 -s 6 > /dev/null 2>&1
report "another seed: other held-out countries" $(cmp -s "$OUT/eval.jsonl" "$TMP/other/eval.jsonl" && echo 0 || echo 1)

# bad input: one error line naming the problem, exit 1, the earlier outputs untouched
before=$(cat "$OUT"/*.jsonl | sha256sum)
expect_error() {  # expect_error NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    "$BIN" -o "$OUT" "$@" > "$TMP/stdout" 2> "$TMP/stderr"
    local status=$? ok=1
    [ $status = 1 ] || ok=0
    grep -qF -- "$needle" "$TMP/stderr" || ok=0
    [ "$(cat "$OUT"/*.jsonl | sha256sum)" = "$before" ] || ok=0
    [ -z "$(ls "$OUT" | grep -v '\.jsonl$')" ] || ok=0
    report "$name" $ok "exit $status: $(head -2 "$TMP/stderr" | tr '\n' ' ')"
}
mkdir -p "$TMP/bad"
expect_error "no such folder: the file named, and the iso-codes hint" "$TMP/none/iso_3166-1.json" -d "$TMP/none"
cp "$ISO/iso_4217.json" "$TMP/bad/"
head -c 500 "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "truncated JSON: the file and the byte" "iso_3166-1.json: JSON error at byte" -d "$TMP/bad"
sed 's/"alpha_2": "QC", //' "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "an entry without alpha_2: its index" "entry 2 lacks one of alpha_2" -d "$TMP/bad"
sed 's/"alpha_2": "QC"/"alpha_2": "Q1"/' "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "an alpha-2 code that is not two letters A-Z" 'entry 2: "alpha_2" is "Q1"' -d "$TMP/bad"
sed 's/"alpha_2": "QC"/"alpha_2": "QA"/' "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "two countries with one code" "entries 0 and 2: the same code or name" -d "$TMP/bad"
sed 's/"numeric": "102"/"numeric": 102/' "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "a number where a string belongs" '"numeric" is not a non-empty string' -d "$TMP/bad"
sed 's/"3166-1"/"3166-2"/' "$ISO/iso_3166-1.json" > "$TMP/bad/iso_3166-1.json"
expect_error "no \"3166-1\" table" 'no "3166-1" array' -d "$TMP/bad"
cp "$ISO/iso_3166-1.json" "$TMP/bad/"
sed 's/"alpha_3": "XAU"/"alpha_3": "XA"/' "$ISO/iso_4217.json" > "$TMP/bad/iso_4217.json"
expect_error "a currency code that is not three letters" 'iso_4217.json: entry 46: "alpha_3" is "XA"' -d "$TMP/bad"
expect_error "-e above a quarter of the countries" "-e 12: at most a quarter of the 45 countries (11)" -d "$ISO" -e 12
expect_error "-e 0" "flag -e needs an integer >= 1" -d "$ISO" -e 0
expect_error "an unknown flag" "unknown flag -q" -d "$ISO" -q 1
touch "$TMP/file"
expect_error "-o under a file, not a folder" "$TMP/file/sub" -d "$ISO" -e 8 -o "$TMP/file/sub"

echo
echo "$passed passed, $failed failed"
[ $failed = 0 ]
