# What the test scripts of data parallelism and checkpoints share (sourced, not run):
# counting and printing checks, MPI's presence and mpirun's flags, and comparing two runs'
# logs and checkpoints.
#
#     . "$(dirname "$0")/lib.sh"

passed=0
failed=0
# report NAME OK(0/1) [DETAIL]: one line a check; the detail under a failed one
report() {
    if [ "$2" = 1 ]; then
        printf '%-80s OK\n' "$1"; passed=$((passed + 1))
    else
        printf '%-80s NOT OK\n' "$1"; failed=$((failed + 1))
        [ -n "${3:-}" ] && printf '  %s\n' "$3"
    fi
}
# the last line every test prints, and its status
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
}
# need_built HINT FILE...: each must be an executable; else one failed check, and the end
need_built() {
    local hint=$1 b
    shift
    for b in "$@"; do
        [ -x "$b" ] || { echo "Error: $b is not built ($hint)"; echo "0 passed, 1 failed"; exit 1; }
    done
}
# need_mpi WHAT: MPI (make's test: mpicc; and mpirun) installed, else say what is not
# checked and end, passing nothing and failing nothing
need_mpi() {
    if ! command -v mpirun > /dev/null 2>&1 || ! command -v "${MPICC:-mpicc}" > /dev/null 2>&1; then
        echo "MPI is not installed (apt-get install openmpi-bin libopenmpi-dev): $1 not checked"
        echo "0 passed, 0 failed"
        exit 0
    fi
}
# mpirun's flags: more ranks than cores; as root (CI), its consent
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

# small_shard DIR: DIR/small.bin, the first 20,000 bytes of tinyshakespeare as GPT-2 tokens
small_shard() {
    head -c 20000 data/tinyshakespeare/input.txt > "$1/small.txt" &&
        ./data/tokenizer -e -i "$1/small.txt" -o "$1/small.bin" -t "" > /dev/null ||
        { report "the test shard" 0; finish; exit 1; }
}
# two main.logs the same but for the steps' times
same_log() { cmp -s <(sed -E 's/ ms:[0-9.]+//' "$1") <(sed -E 's/ ms:[0-9.]+//' "$2"); }
# the numbers of two main.logs side by side: "COUNT LARGEST-RELATIVE-DIFFERENCE BAD" (BAD 1:
# one log has a number the other has not)
compare_logs() {
    paste <(sed -E 's/ ms:[0-9.]+//' "$1" | tr ' ' '\n' | grep -v '^s:' | cut -d: -f2) \
          <(sed -E 's/ ms:[0-9.]+//' "$2" | tr ' ' '\n' | grep -v '^s:' | cut -d: -f2) |
        awk '{ if ($1 == "" || $2 == "") { bad = 1; next } d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1;
               r = a > 0 ? d / a : d; if (r > m) m = r; n++ } END { printf "%d %.3e %d\n", n, m, bad }'
}
# two fp32 checkpoints' weights (the floats after the 256-int header): "COUNT MAX-|A - B|"
compare_models() {
    paste <(od -An -v -tf4 -j 1024 "$1" | tr -s ' ' '\n' | sed '/^$/d') <(od -An -v -tf4 -j 1024 "$2" | tr -s ' ' '\n' | sed '/^$/d') |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ } END { printf "%d %.3e\n", n, m }'
}
# within X TOLERANCE: X <= TOLERANCE
within() { awk -v w="$1" -v t="$2" 'BEGIN { exit !(w <= t) }'; }
