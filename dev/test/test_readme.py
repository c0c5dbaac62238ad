#!/usr/bin/env python3
"""
The README's commands, run as a reader would run them: every command in its ```sh blocks and
every `$ command` of its transcripts (a plain ``` block whose lines start with "$ ": the
command, then the output the README quotes for it). A command that changes in the README is
the command tested.

A command runs unless the comment after it carries one of these marks, which say why not:
    [minutes]     it takes minutes on a 2-core CPU (a training run, a benchmark, make test)
    [CUDA]        a .cu program: it needs nvcc, and most need a GPU (make gpu-check runs them)
    [your files]  it names files of your own (a Hugging Face folder, prompts.txt, model.bin)
    [installs]    it installs packages (apt-get, pip) or fetches from the network
Each marked command is listed with its mark at the end; none is skipped silently. The
others must exit 0 within LIMIT seconds (one that takes longer fails: mark it [minutes]),
each in a scratch folder whose entries are links to the repository's top-level files and
folders, with OMP_NUM_THREADS=2: a file a command writes at the top (smollm2.bin) lands in
the scratch folder and is deleted after; one it writes inside a folder (build/, data/) or
through a link (make rebuilding a program whose sources changed) lands in the repository,
as it would for the reader. (make test builds every program first, so its make lines find
nothing to do.) A transcript's quoted
lines must appear in the command's output (stdout and stderr as they came), in order; a line "..."
stands for any lines, and "..." inside a line for any text.

Python's standard library only (make test runs it).
    python3 dev/test/test_readme.py [README.md]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

LIMIT = 120
MARKS = ("[minutes]", "[CUDA]", "[your files]", "[installs]")


def commands(readme):
    """[(line number, command, mark or None, quoted output lines or None)]"""
    out = []
    lines = open(readme, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        block = [(k + 1, lines[k][indent:]) for k in range(i + 1, j)]
        if lang == "sh":
            pending = ""
            for no, text in block:
                if not text.strip() or text.lstrip().startswith("#"):
                    continue
                if text.rstrip().endswith("\\"):
                    pending += text.rstrip()[:-1] + " "
                    continue
                out.append(entry(no, pending + text, None))
                pending = ""
        elif block and block[0][1].startswith("$ "):
            k = 0
            while k < len(block):
                no, text = block[k]
                quoted = []
                k += 1
                while k < len(block) and not block[k][1].startswith("$ "):
                    quoted.append(block[k][1])
                    k += 1
                out.append(entry(no, text[2:], quoted))
        i = j + 1
    return out


def entry(no, text, quoted):
    command, comment = split_comment(text)
    mark = next((m for m in MARKS if m in comment), None)
    return no, command.strip(), mark, quoted


def split_comment(text):
    """the command and its trailing comment (a # outside quotes, after a space)"""
    quote = None
    for k, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or text[k - 1] in " \t"):
            return text[:k], text[k:]
    return text, ""


def scratch(root):
    d = tempfile.mkdtemp(prefix="test_readme.")
    for name in os.listdir(root):
        if name != ".git":
            os.symlink(os.path.join(root, name), os.path.join(d, name))
    return d


def same_line(quoted, line):
    """a quoted line against an output line: equal, but for "..." inside it, which stands for any text"""
    parts = quoted.rstrip().split("...")
    return re.fullmatch(".*".join(re.escape(p) for p in parts), line.rstrip()) is not None


def follows(quoted, output):
    """whether the quoted lines appear in output's lines in order ("..." for any lines)"""
    got = output.split("\n")
    at = 0
    gap = True  # (the first quoted line may come anywhere)
    for q in quoted:
        if q.strip() == "...":
            gap = True
            continue
        if not q.strip():
            continue
        while at < len(got) and not same_line(q, got[at]):
            if not gap:
                return False, q
            at += 1
        if at == len(got):
            return False, q
        at += 1
        gap = False
    return True, None


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else "README.md"
    root = os.path.dirname(os.path.abspath(readme))
    cmds = commands(readme)
    passed = failed = 0
    skipped = []
    env = dict(os.environ, OMP_NUM_THREADS="2")
    for no, command, mark, quoted in cmds:
        if mark:
            skipped.append((no, mark, command))
            continue
        d = scratch(root)
        t0 = time.time()
        try:
            r = subprocess.run(["bash", "-c", command], cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=LIMIT,
                               stdin=subprocess.DEVNULL)
            rc, output = r.returncode, r.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, output = None, ""
        seconds = time.time() - t0
        shutil.rmtree(d, ignore_errors=True)
        what = f"README.md:{no}: {command}"
        if rc is None:
            print(f"NOT OK  {what}: still running after {LIMIT} s (mark it [minutes])")
            failed += 1
        elif rc != 0:
            print(f"NOT OK  {what}: exit {rc}")
            for line in output.strip().split("\n")[-4:]:
                print(f"          {line}")
            failed += 1
        elif quoted is not None and not follows(quoted, output)[0]:
            print(f"NOT OK  {what}: the README quotes a line its output lacks: {follows(quoted, output)[1]!r}")
            for line in output.strip().split("\n")[-4:]:
                print(f"          {line}")
            failed += 1
        else:
            said = f", its {len([q for q in quoted if q.strip() and q.strip() != '...'])} quoted lines in the output" if quoted else ""
            print(f"OK      {what} ({seconds:.1f} s{said})")
            passed += 1
    print(f"\nnot run here ({len(skipped)} commands, each marked in the README):")
    for mark in MARKS:
        for no, m, command in skipped:
            if m == mark:
                print(f"  {mark:13s} README.md:{no}: {command}")
    if len(cmds) - len(skipped) < 10:
        print("NOT OK  fewer than 10 of the README's commands ran: the parser missed its blocks?")
        failed += 1
    print(f"\n{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
