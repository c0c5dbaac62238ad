"""
The independent reference for convert.c's sharded reading: a Hugging Face folder whose weights
are split over three safetensors shards and an index, written here with the safetensors
library (not by our writer), from transformers' own F32 folder fixtures/hf_tiny_fp32.

    fixtures/hf_tiny_fp32_sharded/
        config.json                              copied unchanged
        model-0000{1,2,3}-of-00003.safetensors   the tensors, split in three in name order
        model.safetensors.index.json             {"metadata": {"total_size": N}, "weight_map": {...}}

The layout is transformers' (save_pretrained with max_shard_size writes exactly these names,
metadata and weight_map); the tensor names lose their "transformer." prefix, as the files of
gpt2 ... gpt2-xl on the Hub have none, and the values are the F32 folder's, bit for bit, so
test_convert.c checks that reading the shards gives what reading the one file gives.

Needs only numpy and safetensors (dev/reference/requirements.txt):
    python dev/reference/convert_reference.py            # writes the folder (< 1 s)
    python dev/reference/convert_reference.py --check    # writes to a temporary folder, compares
"""
import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

from safetensors.numpy import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
SOURCE = os.path.join(FIXTURES, "hf_tiny_fp32")
NAME = "hf_tiny_fp32_sharded"
SHARDS = 3


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    tensors = load_file(os.path.join(SOURCE, "model.safetensors"))
    names = sorted(tensors)
    renamed = {n[len("transformer."):] if n.startswith("transformer.") else n: n for n in names}
    order = sorted(renamed)
    per = (len(order) + SHARDS - 1) // SHARDS
    weight_map, total = {}, 0
    for s in range(SHARDS):
        file = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        part = {n: tensors[renamed[n]] for n in order[s * per:(s + 1) * per]}
        save_file(part, os.path.join(out_dir, file), metadata={"format": "pt"})
        for n, t in part.items():
            weight_map[n] = file
            total += t.nbytes
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(os.path.join(SOURCE, "config.json"), os.path.join(out_dir, "config.json"))
    # read back with the library: every tensor, bit for bit the one-file values
    back = {}
    for s in range(SHARDS):
        back.update(load_file(os.path.join(out_dir, f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors")))
    assert sorted(back) == order
    for n in order:
        assert back[n].tobytes() == tensors[renamed[n]].tobytes(), n
    print(f"wrote {out_dir}: {len(order)} tensors in {SHARDS} shards, {total} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--check", action="store_true", help="write to a temporary folder and compare with fixtures/")
    args = ap.parse_args()
    target = os.path.join(FIXTURES, NAME)
    if not args.check:
        write(target)
        return
    tmp = tempfile.mkdtemp(prefix="convert_reference_")
    try:
        write(tmp)
        cmp = filecmp.dircmp(tmp, target)
        if cmp.left_only or cmp.right_only or cmp.diff_files:
            sys.exit(f"{target} differs from a fresh run: {cmp.left_only} {cmp.right_only} {cmp.diff_files}")
        _, mismatch, errors = filecmp.cmpfiles(tmp, target, os.listdir(tmp), shallow=False)
        if mismatch or errors:
            sys.exit(f"{target}: {mismatch} {errors} differ from a fresh run")
        print(f"{target}: identical to a fresh run")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
