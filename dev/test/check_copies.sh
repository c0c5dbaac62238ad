#!/usr/bin/env bash
# Copies must not drift apart (../shared/STYLE.md section 1). The rules, and the table of
# every copy, are in dev/README.md ("How the code is organised: shared copies").
#
# Every copy is marked by a comment line with "shared-copy" in it (so that
# `grep -rn shared-copy` finds them all), of one of two kinds:
#  - a block that several files hold verbatim:
#        // --- begin shared-copy: NAME ---
#        // --- end shared-copy: NAME ---
#    Each copy must be byte-identical to the one in the block's home file (HOME_ORDER and
#    HOME_OF below). Blocks may nest: a block is everything between its two markers, the
#    markers of the blocks nested in it included. A marker without its partner, an end that
#    crosses the end of a block nested inside, a block inside itself or twice in one file,
#    a malformed marker and a block found in one file only are errors.
#  - one definition of a dev/ ladder that is a program's, under another name: the line
#    right above it says whose it is,
#        // --- shared-copy of train_gpt2.cu: adamw_kernel (as adamw_kernel1) ---
#        __global__ void adamw_kernel1(...) {
#    (without "(as ...)" when the name is the same). We take the definition below the marker
#    and the program's (a function through its closing brace, with the template <...> line
#    in front of it if it has one; a #define's line; a typedef struct through "} NAME;"; an
#    anonymous enum, named by one of its enumerators, its braces), rename the copy back and
#    compare the two with runs of whitespace and line breaks made one space: the rename
#    re-aligns the continuation lines of a signature, and nothing else may differ. Every
#    dev/cuda/*.cu that includes precision.h is a ladder of a program's kernels and needs
#    one such marker at least.
# Prints one OK / NOT OK line per block and per ladder copy, and one for the table in
# dev/README.md (which must be what --table prints), then "N passed, M failed"; exits
# non-zero if anything failed. Fast (about a second): it runs in make test.
#     bash dev/test/check_copies.sh             check, from anywhere
#     bash dev/test/check_copies.sh --table     the Markdown table for dev/README.md
#     bash dev/test/check_copies.sh --where     the lines of every copy (file:first-last)
#     bash dev/test/check_copies.sh --root DIR  check the tree at DIR instead (for the self-test,
#                                               dev/test/test_check_copies.sh)
set -u
mode=check
root="$(dirname "$0")/../.."
while [ $# -gt 0 ]; do
    case $1 in
        --table) mode=table ;;
        --where) mode=where ;;
        --root) root=$2; shift ;;
        *) echo "usage: bash dev/test/check_copies.sh [--table | --where] [--root DIR]" >&2; exit 2 ;;
    esac
    shift
done
cd "$root" || exit 2

# A block's home, the copy that is edited first and copied to the others, is the first of
# these files that holds it: the chapter that introduces the code (chapter 1's train_mlp.c
# for the MLP's files, train_gpt2.c for the GPT-2 layers and model files, infer.c for
# inference), a .c before its .cu, the programs before their tests. (What no chapter
# teaches is not copied at all: it lives in lib/, included.)
# A block in none of them lives in the first of its files in alphabetical order.
HOME_ORDER="train_mlp.c data/tokenizer.c train_gpt2.c infer.c convert.c
            train_mlp.cu train_gpt2.cu infer.cu test_gpt2.c test_infer.c test_convert.c test_gpt2.cu test_infer.cu"
# the exceptions: the file formats' code belongs to the conversion program
HOME_OF="model-file-write=convert.c llama-model-write=convert.c llama-config=convert.c llama-model-read=convert.c lora-adapter=finetune_lora.c lora-types=finetune_lora.c quant4=finetune_lora.c quant4-device-codes=finetune_lora.cu"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the C and CUDA sources: git's tracked and untracked-but-not-ignored files in a checkout
# (build outputs stay out), all files elsewhere
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
    git ls-files -co --exclude-standard
else
    find . -name .git -prune -o -type f -print | sed 's|^\./||'
fi | grep -E '\.(c|h|cu|cuh)$' | sort > "$tmp/sources"
# the files with markers, and the ladders of the programs' kernels (which must have some)
tr '\n' '\0' < "$tmp/sources" | xargs -0 -r grep -ls -e 'shared-copy' -e "^[ 	]*// [A-Za-z_.]*'s copy: " > "$tmp/marked"
grep -E '^dev/cuda/[^/]*\.cu$' "$tmp/sources" | tr '\n' '\0' | xargs -0 -r grep -ls '^#include "precision.h"' > "$tmp/ladders"
files=$(sort -u "$tmp/marked" "$tmp/ladders")

# ---- the blocks: one awk pass reads every marked file, checks its markers, collects each
# block's copies and compares them with the home copy. It writes its report to stdout, its
# counts to $tmp/counts, the ladder markers to $tmp/ladder_markers, and one line per block
# for --table and --where ($tmp/blocks, $tmp/where).
echo "$files" | tr '\n' '\0' | xargs -0 -r awk -v tmp="$tmp" -v order="$HOME_ORDER" -v home_of="$HOME_OF" '
    # a marker error; the copy of block b in this file (if any) is then not compared
    function err(msg, b) { print "NOT OK  " FILENAME ":" FNR ": " msg; failed++; if (b != "") broken[b, FILENAME] = 1 }
    # a line belongs to every block open at that point (but a block repeated in a file,
    # which is reported, and whose lines are kept once)
    function append(line,   i) { for (i = 1; i <= depth; i++) if (!repeat[i]) body[stk[i], FILENAME] = body[stk[i], FILENAME] line "\n" }
    function push(name, is_repeat) { stk[++depth] = name; stkline[depth] = FNR; repeat[depth] = is_repeat }
    function end_of_file(   i) {
        for (i = depth; i >= 1; i--) {
            print "NOT OK  " file ":" stkline[i] ": begin of " stk[i] " has no end"; failed++; broken[stk[i], file] = 1
        }
        depth = 0
    }
    # how early a file comes in the choice of a home: HOME_ORDER, then the rest
    function before(a, b) { return rank[a] != rank[b] ? rank[a] < rank[b] : a < b }
    BEGIN {
        n = split(order, w, /[ \t\n]+/); for (i = 1; i <= n; i++) if (w[i] != "") rank[w[i]] = i
        n = split(home_of, w, /[ \t\n]+/); for (i = 1; i <= n; i++) if (split(w[i], kv, "=") == 2) home_named[kv[1]] = kv[2]
        BEGIN_RE = "^[ \t]*// --- begin shared-copy: [A-Za-z0-9_.-]+ ---[ \t]*$"
        END_RE = "^[ \t]*// --- end shared-copy: [A-Za-z0-9_.-]+ ---[ \t]*$"
        LADDER_RE = "^[ \t]*// --- shared-copy of [^ :]+: [A-Za-z_][A-Za-z0-9_]*( \\(as [A-Za-z_][A-Za-z0-9_]*\\))? ---[ \t]*$"
    }
    FNR == 1 { if (file != "") end_of_file(); file = FILENAME; if (!(FILENAME in rank)) rank[FILENAME] = 1000 }
    $0 ~ BEGIN_RE {
        name = $5
        for (i = 1; i <= depth; i++) if (stk[i] == name) { err("begin of " name " inside " name " (begun on line " stkline[i] ")", name); push(name, 1); next }
        if ((name, FILENAME) in first) { err("a second block " name " in this file (the first begins on line " first[name, FILENAME] ")", name); push(name, 1); next }
        append($0)
        if (!(name in ncopies)) names[++nnames] = name
        copy[name, ++ncopies[name]] = FILENAME
        first[name, FILENAME] = FNR; body[name, FILENAME] = ""
        if (depth > 0 && index(" " inside[name] " ", " " stk[depth] " ") == 0) inside[name] = inside[name] (inside[name] == "" ? "" : " ") stk[depth]
        push(name, 0)
        next
    }
    $0 ~ END_RE {
        name = $5
        for (i = depth; i >= 1 && stk[i] != name; i--) ;
        if (i < 1) { err("end of " name " without its begin"); append($0); next }
        if (i < depth) {
            # the blocks crossed are broken here too; they stay open, so their ends are no error
            err("end of " name " crosses block " stk[depth] " (begun on line " stkline[depth] " inside it, not ended yet)", name)
            for (j = i + 1; j <= depth; j++) broken[stk[j], FILENAME] = 1
            for (; i < depth; i++) { stk[i] = stk[i + 1]; stkline[i] = stkline[i + 1]; repeat[i] = repeat[i + 1] }
            depth--; next
        }
        if (!repeat[depth]) last[name, FILENAME] = FNR
        depth--
        append($0)
        next
    }
    $0 ~ LADDER_RE {
        split($0, w, " ")
        prog = w[5]; sub(/:$/, "", prog); as = w[6]
        if (w[7] == "(as") { as = w[8]; sub(/\)$/, "", as) }
        print FILENAME "\t" FNR "\t" prog "\t" w[6] "\t" as > (tmp "/ladder_markers")
        append($0)
        next
    }
    /\/\/ ---.*shared-copy/ || /^[ \t]*\/\/ [A-Za-z_.]*\047s copy: / {
        err("not a marker this checker knows: \"" $0 "\" (dev/README.md has the two forms)"); append($0); next
    }
    { append($0) }
    END {
        if (file != "") end_of_file()
        # the blocks in name order
        for (i = 2; i <= nnames; i++) for (j = i; j > 1 && names[j - 1] > names[j]; j--) { t = names[j]; names[j] = names[j - 1]; names[j - 1] = t }
        for (b = 1; b <= nnames; b++) {
            name = names[b]; n = ncopies[name]
            # the copies, the home first
            for (i = 2; i <= n; i++) for (j = i; j > 1 && before(copy[name, j], copy[name, j - 1]); j--) {
                t = copy[name, j]; copy[name, j] = copy[name, j - 1]; copy[name, j - 1] = t
            }
            home = copy[name, 1]
            if (name in home_named) {
                home = home_named[name]
                for (i = 1; i <= n && copy[name, i] != home; i++) ;
                if (i > n) { print "NOT OK  shared-copy \047" name "\047: its home " home " (HOME_OF in dev/test/check_copies.sh) holds no copy"; failed++; continue }
                for (; i > 1; i--) copy[name, i] = copy[name, i - 1]
                copy[name, 1] = home
            }
            others = ""; where = name
            for (i = 1; i <= n; i++) {
                if (i > 1) others = others (others == "" ? "" : " ") copy[name, i]
                where = where " " copy[name, i] ":" first[name, copy[name, i]] "-" last[name, copy[name, i]]
            }
            print name "\t" home "\t" others "\t" inside[name] > (tmp "/blocks")
            print where > (tmp "/where")
            bad = ""
            for (i = 1; i <= n; i++) if ((name, copy[name, i]) in broken) bad = bad " " copy[name, i]
            if (bad != "") { print "NOT OK  shared-copy \047" name "\047: not compared, its markers in" bad " are broken"; failed++; continue }
            if (n < 2) {
                print "NOT OK  shared-copy \047" name "\047 is only in " home ": a shared copy needs two files at least (a mistyped name? a lost copy?)"
                failed++; continue
            }
            differ = ""
            for (i = 2; i <= n; i++) if (body[name, copy[name, i]] != body[name, home]) differ = differ (differ == "" ? "" : ", ") copy[name, i]
            if (differ == "") { print "OK      shared-copy \047" name "\047: " n " identical copies (home " home ")"; passed++; continue }
            print "NOT OK  shared-copy \047" name "\047: " differ " differ" (index(differ, ",") ? "" : "s") " from the home copy in " home " (" n " copies)"
            failed++
            printf "%s", body[name, home] > (tmp "/home"); close(tmp "/home")
            for (i = 2; i <= n; i++) if (body[name, copy[name, i]] != body[name, home]) {
                printf "%s", body[name, copy[name, i]] > (tmp "/copy"); close(tmp "/copy")
                fflush()
                system("diff -u --label \"" home "\" --label \"" copy[name, i] "\" \"" tmp "/home\" \"" tmp "/copy\" | head -12")
            }
        }
        print passed + 0, failed + 0 > (tmp "/counts")
    }' > "$tmp/report"
touch "$tmp/blocks" "$tmp/where" "$tmp/ladder_markers"
read -r passed failed < "$tmp/counts" 2>/dev/null || { passed=0; failed=1; echo "NOT OK  the block scan did not finish" >> "$tmp/report"; }

# ---- the ladder copies

# the definition that starts at line $2 of file $1: a #define's one line without its
# comment (which may say why here, where the program's says nothing), or a function,
# struct or enum through the brace that balances its first (braces in // comments
# ignored; for a struct that is its "} NAME;" line)
extract_at() {
    awk -v start="$2" '
        NR < start { next }
        NR == start && /^#define/ { sub(/[ \t]*\/\/.*/, ""); print; exit }
        { print }
        {
            line = $0; sub(/\/\/.*/, "", line)
            o = gsub(/\{/, "", line); c = gsub(/\}/, "", line)
            opened += o; depth += o - c
            if (opened > 0 && depth <= 0) exit
        }' "$1"
}

# the line where program $2 defines $1: the first line at column 0 that starts a
# definition (not a call, not a launch: those are indented) and has "$1(" or "#define $1"
# (or the template <...> line right above it); the typedef line of a struct whose
# closing line is "} $1;"; or an enum line that has the word $1
source_line() {
    awk -v name="$1" '
        /^typedef/ { typedef_at = NR }
        /^}[ \t]*/ && $0 ~ ("^}[ \t]*" name "[ \t]*;") && typedef_at { print typedef_at; exit }
        /^enum/ && $0 ~ ("[^A-Za-z0-9_]" name "([^A-Za-z0-9_]|$)") { print NR; exit }
        /^(__global__|__device__|__host__|static|inline|#define)/ &&
        ($0 ~ ("^#define " name "([^A-Za-z0-9_]|$)") || $0 ~ ("[^A-Za-z0-9_]" name "[ \t]*\\(")) {
            print (prev ~ /^template[ \t]*</ ? NR - 1 : NR); exit
        }
        { prev = $0 }
    ' "$2"
}

# the name a definition (stdin) gives: after #define; the last word of a typedef's
# "} NAME;"; an enum's first enumerator; else the word before the first "(" that is not
# __launch_bounds__'s, after a template <...> line if one comes first; none for a blank
# or comment line
defined_name() {
    awk 'NR == 1 && /^template[ \t]*</ { next }
        first == "" {
            first = $0
            if ($0 ~ /^[ \t]*(\/\/|\/\*|$)/) exit
            if ($1 == "#define") { print $2; exit }
            if ($0 ~ /^enum/) { line = $0; sub(/^[^{]*\{[ \t]*/, "", line); match(line, /^[A-Za-z_][A-Za-z0-9_]*/); print substr(line, 1, RLENGTH); exit }
            if ($0 ~ /^typedef/) { typedef = 1; next }
            line = $0; gsub(/__launch_bounds__[ \t]*\([^)]*\)/, "", line)
            if (match(line, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
                name = substr(line, RSTART, RLENGTH - 1); sub(/[ \t]+$/, "", name); print name
            }
            exit
        }
        { last = $0 }
        END { if (typedef && match(last, /[A-Za-z_][A-Za-z0-9_]*[ \t]*;/)) { name = substr(last, RSTART, RLENGTH - 1); sub(/[ \t;]+$/, "", name); print name } }'
}

# stdin with every whole word $1 replaced by $2
rename() {
    awk -v from="$1" -v to="$2" '{
        out = ""; rest = $0
        while ((k = index(rest, from)) > 0) {
            before = k > 1 ? substr(rest, k - 1, 1) : ""; after = substr(rest, k + length(from), 1)
            if (before !~ /[A-Za-z0-9_]/ && after !~ /[A-Za-z0-9_]/) { out = out substr(rest, 1, k - 1) to }
            else { out = out substr(rest, 1, k - 1 + length(from)) }
            rest = substr(rest, k + length(from))
        }
        print out rest }'
}

# one line: whitespace runs, line breaks included, made one space, and none just
# inside parentheses (where a rewrapped signature may break a line)
normalise() { tr '\t\n' '  ' | tr -s ' ' | sed 's/( /(/g; s/ )/)/g; s/^ //; s/ $//'; }

if [ "$mode" = check ]; then
    while IFS=$'\t' read -r f line prog name as; do
        what="shared-copy of $prog: $name$([ "$as" != "$name" ] && echo " (as $as)") in $f:$line"
        extract_at "$f" $((line + 1)) > "$tmp/ladder"
        lname=$(defined_name < "$tmp/ladder")
        if [ "$lname" != "$as" ]; then
            echo "NOT OK  $what: the line below defines ${lname:-nothing}, not $as"
            failed=$((failed + 1)); continue
        fi
        pline=
        [ -f "$prog" ] && pline=$(source_line "$name" "$prog")
        if [ -z "$pline" ]; then
            echo "NOT OK  $what: $prog has no $name (renamed or removed there? update the copy)"
            failed=$((failed + 1)); continue
        fi
        extract_at "$prog" "$pline" > "$tmp/program"
        rename "$as" "$name" < "$tmp/ladder" > "$tmp/renamed"
        if [ "$(normalise < "$tmp/program")" = "$(normalise < "$tmp/renamed")" ]; then
            echo "OK      $what"
            passed=$((passed + 1))
        else
            echo "NOT OK  $what differs from $prog:$pline (- $prog, + the copy renamed):"
            diff -u -w --label "$prog" --label "$f" "$tmp/program" "$tmp/renamed" | head -12
            failed=$((failed + 1))
        fi
    done < "$tmp/ladder_markers" >> "$tmp/report"
    while read -r f; do
        [ -n "$f" ] || continue
        if ! cut -f1 "$tmp/ladder_markers" | grep -qxF "$f"; then
            echo "NOT OK  $f includes precision.h but has no \"// --- shared-copy of PROGRAM: NAME ---\": which of its kernels is the program's?"
            failed=$((failed + 1))
        fi
    done < "$tmp/ladders" >> "$tmp/report"
fi

# ---- the table for dev/README.md: names and files only (no line numbers, so that moving a
# block inside a file does not make it stale)
table() {
    echo "| block | home: edit this one | copies in |"
    echo "|---|---|---|"
    while IFS=$'\t' read -r name home others inside; do
        [ -z "$inside" ] || inside=" (inside \`${inside// /\`, \`}\`)"
        echo "| \`$name\`$inside | $home | ${others// /, } |"
    done < "$tmp/blocks"
    echo
    echo "| ladder | copy of | definitions (as named in the ladder) |"
    echo "|---|---|---|"
    awk -F'\t' '{
            key = $1 " | " $3
            if (!(key in defs)) keys[++n] = key
            defs[key] = defs[key] (defs[key] == "" ? "" : ", ") "`" $4 "`" ($5 != $4 ? " (as `" $5 "`)" : "")
        }
        END { for (i = 1; i <= n; i++) print "| " keys[i] " | " defs[keys[i]] " |" }' "$tmp/ladder_markers"
}

case $mode in
    table) table; exit 0 ;;
    where) cat "$tmp/where"; exit 0 ;;
esac

# the table in dev/README.md, between its two marker lines, must be the one above
if [ -f dev/README.md ]; then
    table > "$tmp/table"
    awk '/^<!-- end of the copies table -->/ { on = 0 } on { print } /^<!-- the copies table/ { on = 1 }' dev/README.md > "$tmp/readme_table"
    if cmp -s "$tmp/table" "$tmp/readme_table"; then
        echo "OK      dev/README.md's table of copies is up to date" >> "$tmp/report"
        passed=$((passed + 1))
    else
        { echo "NOT OK  dev/README.md's table of copies is out of date: paste the output of bash dev/test/check_copies.sh --table there"
          diff -u --label dev/README.md --label "check_copies.sh --table" "$tmp/readme_table" "$tmp/table" | head -12; } >> "$tmp/report"
        failed=$((failed + 1))
    fi
fi

cat "$tmp/report"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
