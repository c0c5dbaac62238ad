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
function readable(path,    r, probe) { r = (getline probe < path); close(path); return r >= 0 }
function paste(file,    line, nr, dir, f, path) {
    seen[file] = 1
    dir = file; if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
    if (lines) print "#line 1 \"" file "\""
    nr = 0
    while ((getline line < file) > 0) {
        nr++
        if (line ~ /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
            f = line; sub(/^[^"]*"/, "", f); sub(/".*$/, "", f)
            path = normalize(dir "/" f)
            if ((path in seen) || readable(path)) {
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
}
BEGIN { paste(normalize(src)) }
