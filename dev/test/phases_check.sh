# Sourced by the trainers' tests: -P's phases add up to the step's time (the phases follow one
# another from the step's start to its end, so anything missed or counted twice shows). The
# tests allow the printed roundings, and ~10 us a step for -P's own bookkeeping, which is in
# the step's time and in no phase (on the GPU: creating the events once, reading them).
#     source dev/test/phases_check.sh
#     read -r lines worst <<< "$(phase_lines OUT)"      # the lines with phases; max |sum - step| (ms)
#     read -r lines worst <<< "$(phase_log_lines LOG)"  # the same for a key:value log's ms_ fields against its ms:

# lines "... data 0.0 forward 1.2 ... ms (sum S of the step's T)": how many, and the largest |S - T|
phase_lines() {
    awk 'match($0, /\(sum [0-9.]+ of the step.s [0-9.]+\)/) {
             split(substr($0, RSTART + 1, RLENGTH - 2), w, " "); d = w[2] - w[6]; if (d < 0) d = -d
             if (d > worst) worst = d; n++
             for (k = 1; k <= NF; k++) if ($k == "forward" || $k == "backward") { if ($(k + 1) + 0 <= 0) zero++ }
         }
         END { printf "%d %.3f %d\n", n, worst, zero }' "$1"
}
# key:value lines with ms_data:... : how many, and the largest |sum of the ms_ fields - ms:|
phase_log_lines() {
    awk '/ ms_data:/ { t = 0; ms = ""
             for (i = 1; i <= NF; i++) { split($i, kv, ":"); if (kv[1] ~ /^ms_/) t += kv[2]; if (kv[1] == "ms") ms = kv[2] }
             d = t - ms; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
         END { printf "%d %.3f\n", n, worst }' "$1"
}
