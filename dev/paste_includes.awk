# Pastes a source file's own includes into it: every #include "NAME" whose file exists beside
# the including file (a test's program.c/.cu, the programs' lib/*.h, the ladders' common.h)
# is replaced by that file's text, recursively, each file once (the headers have include
# guards, so a second include would add nothing). Includes of files that are not there
# (<...>, and "..." that the compiler finds on its -I paths, such as the emulator's
# stand-ins in dev/emu/include) stay as they are. Used by:
#     dev/emu/emu_build.sh   awk -v src=FILE -v lines=1 -f dev/paste_includes.awk
#                            (#line directives keep the original files and lines in compiler
#                            messages and in the race detector's reports)
#     dev/amalgamate.sh      awk -v src=FILE -v banners=1 -f dev/paste_includes.awk
#                            (a banner names each pasted file, for a reader)
# Pasting each file once is what the preprocessor would do only if every include of ours
# were unconditional, so one inside #if/#ifdef (other than a file's own include guard) is
# refused, and so is a file that cannot be read; an #include inside a /* */ comment is left
# alone. On an error: one line on standard error, exit status 1.
# a/b/../c -> a/c, ./a -> a
function normalize(path,    n, i, k, part, kept, out) {
    n = split(path, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (part[i] == "." || part[i] == "") continue
        if (part[i] == ".." && k > 0 && kept[k] != "..") { k--; continue }
        kept[++k] = part[i]
    }
    out = (substr(path, 1, 1) == "/") ? "/" : ""
    for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") kept[i]
    return out
}
function fail(msg) { print "Error: paste_includes.awk: " msg > "/dev/stderr"; failed = 1; exit 1 }
# a plain file we can read ("test -f": mawk's getline stops the program on a folder)
function is_file(path,    q) { q = path; gsub(/'/, "'\\''", q); return system("test -f '" q "'") == 0 }
# the text of line outside comments, given whether it starts inside a /* */ comment
# (in_block); sets in_block for the next line
function code_of(line,    code, i, j) {
    code = ""
    while (line != "") {
        if (in_block) { i = index(line, "*/"); if (i == 0) return code; line = substr(line, i + 2); in_block = 0; continue }
        i = index(line, "/*"); j = index(line, "//")
        if (j > 0 && (i == 0 || j < i)) return code substr(line, 1, j - 1)
        if (i == 0) return code line
        code = code substr(line, 1, i - 1); line = substr(line, i + 2); in_block = 1
    }
    return code
}
function paste(file,    line, code, nr, dir, f, path, depth, guard_at, guarded, any_if, prev_block, outer_block) {
    seen[file] = 1
    outer_block = in_block; in_block = 0
    dir = file; if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
    if (lines) print "#line 1 \"" file "\""
    nr = 0; depth = 0; guard_at = 0; guarded = 0; any_if = 0
    while ((getline line < file) > 0) {
        nr++
        prev_block = in_block
        code = code_of(line)
        # the conditionals we are inside; the file's include guard (its first conditional an
        # #ifndef, the next line a #define) is the file's own level, not a condition
        if (code ~ /^[ \t]*#[ \t]*if/) {
            if (!any_if && code ~ /^[ \t]*#[ \t]*ifndef[ \t]/) guard_at = nr
            any_if = 1
            depth++
        } else if (code ~ /^[ \t]*#[ \t]*endif/) {
            depth--
        } else if (guard_at > 0 && nr == guard_at + 1 && code ~ /^[ \t]*#[ \t]*define[ \t]/) {
            guarded = 1
        }
        if (!prev_block && code ~ /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
            f = code; sub(/^[^"]*"/, "", f); sub(/".*$/, "", f)
            path = normalize(dir "/" f)
            if ((path in seen) || is_file(path)) {
                if (depth > guarded) {
                    fail(file ":" nr ": #include \"" f "\" inside #if/#ifdef: pasted once, it would be pasted on one branch only (include it unconditionally)")
                }
                if (!(path in seen)) {
                    if (banners) print "// ==== " path " (pasted in by dev/amalgamate.sh) ===================================="
                    paste(path)
                    if (banners) print "// ==== end of " path " ====\n"
                }
                if (lines) print "#line " nr + 1 " \"" file "\""
                continue
            }
        }
        print line
    }
    close(file)
    in_block = outer_block
}
BEGIN {
    if (!is_file(src)) fail(src ": no such file")
    paste(normalize(src))
}
