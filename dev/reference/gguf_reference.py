"""
gguf_reference.py: a small GGUF file for convert.c's GGUF reader, written and read back by
the `gguf` package (llama.cpp's own Python library for the format), with what it holds.

Writes, in dev/reference/fixtures/:
  gguf_tiny.gguf          GGUF version 3, alignment 64 (not the default 32): one key of
                          every value type, arrays of numbers and of strings,
                          and a tensor of every type convert.c reads (F32, F16, BF16, Q8_0,
                          Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) in 1 to 3 dims; several rows each.
  gguf_tiny.json          what gguf's GGUFReader reads from that file: the version, the
                          data's start, every key (its type and values) and every tensor
                          (type, dims in ggml's order, ne[0] first, and offset).
  gguf_tiny_dequant.f32   every tensor as float32 (little-endian), in the file's order,
                          dequantized by gguf.quants.dequantize.
The block formats are llama.cpp's; gguf.quants implements them in numpy, independently of
our C. Q8_0/Q4_0/Q4_1 blocks come from quantizing random values; gguf cannot quantize the
K-quants, so their blocks are random bytes with the fp16 scales set to small normal numbers
(random bits would give NaNs and infinities).

    pip install -r dev/reference/requirements.txt
    python dev/reference/gguf_reference.py           # (make reference runs it)
    python dev/reference/gguf_reference.py --check   # a fresh run must give the files on disk
"""
import filecmp
import json
import os
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
FILES = ("gguf_tiny.gguf", "gguf_tiny.json", "gguf_tiny_dequant.f32")


def fp16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8)


def k_quant_blocks(qtype, rows, blocks_per_row):
    """random K-quant blocks with sane fp16 scales (offsets as in ggml-common.h)"""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(rows, blocks_per_row, size), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.05, size=(rows, blocks_per_row, 2)).astype(np.float16)
    if qtype == T.Q6_K:  # ... int8 scales[16], then fp16 d at byte 208
        raw[:, :, 208:210] = scales[:, :, :1].view(np.uint8)
    else:  # Q4_K, Q5_K: fp16 d, fp16 dmin first
        raw[:, :, 0:4] = scales.view(np.uint8).reshape(rows, blocks_per_row, 4)
    return raw.reshape(rows, blocks_per_row * size)


def write(OUT):
    global rng
    rng = np.random.default_rng(20241201)
    PATH = os.path.join(OUT, "gguf_tiny.gguf")
    w = gguf.GGUFWriter(PATH, arch="llama")  # (writes general.architecture)
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo\nworld")
    w.add_uint64("test.u64", 2**53 + 2)  # (read back as a double: 2^53 + 2 is exact)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", 1e-300)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_array("test.arr_str", ["Ġ t", "", "a b"])

    tensors = []  # (name, data to write, type)
    f = rng.standard_normal((5, 7)).astype(np.float32)
    tensors.append(("f32_2d", f, T.F32))
    tensors.append(("f32_1d", rng.standard_normal(9).astype(np.float32), T.F32))
    tensors.append(("f32_3d", rng.standard_normal((2, 3, 4)).astype(np.float32), T.F32))
    tensors.append(("f16", rng.standard_normal((3, 5)).astype(np.float16), T.F16))
    x = rng.standard_normal((3, 96)).astype(np.float32)
    tensors.append(("bf16", gguf.quants.quantize(x, T.BF16), T.BF16))
    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1):
        x = (rng.standard_normal((3, 64)) * rng.uniform(0.1, 3.0)).astype(np.float32)
        tensors.append((qtype.name.lower(), gguf.quants.quantize(x, qtype), qtype))
    for qtype in (T.Q4_K, T.Q5_K, T.Q6_K):
        tensors.append((qtype.name.lower(), k_quant_blocks(qtype, 3, 2), qtype))
    for name, data, qtype in tensors:
        if qtype in (T.F32, T.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # read it back with gguf's reader: the reference for our parser
    r = gguf.GGUFReader(PATH)
    names = {v: k for k, v in gguf.GGUFValueType.__members__.items()}
    kv = []
    for field in r.fields.values():
        if field.name.startswith("GGUF."):  # the reader's pseudo-fields for the header
            continue
        types = [names[t] for t in field.types]
        value = field.contents()
        values = value if isinstance(value, list) else [value]
        values = [bool(v) if isinstance(v, (bool, np.bool_)) else v for v in values]
        values = [float(v) if isinstance(v, (float, np.floating)) else v for v in values]
        values = [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v for v in values]
        kv.append({"key": field.name, "type": types[0], "item_type": types[-1] if types[0] == "ARRAY" else types[0],
                   "values": values})
    data_start = min(int(t.data_offset) for t in r.tensors)
    out = {
        "version": int(r.fields["GGUF.version"].contents()),
        "alignment": 64,
        "data_start": data_start,
        "kv": kv,
        "tensors": [{"name": t.name, "type": T(t.tensor_type).name, "dims": [int(d) for d in t.shape],
                     "offset": int(t.data_offset) - data_start} for t in r.tensors],
    }
    with open(os.path.join(OUT, "gguf_tiny.json"), "w") as fp:
        json.dump(out, fp, indent=1, ensure_ascii=False)
        fp.write("\n")
    with open(os.path.join(OUT, "gguf_tiny_dequant.f32"), "wb") as fp:
        for t in r.tensors:
            values = gguf.quants.dequantize(t.data, T(t.tensor_type)).astype("<f4").reshape(-1)
            assert values.size == int(t.n_elements), t.name
            fp.write(values.tobytes())
    print(f"wrote {PATH} ({os.path.getsize(PATH)} bytes), gguf_tiny.json, gguf_tiny_dequant.f32 "
          f"({len(r.tensors)} tensors, {len(kv)} keys)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        with tempfile.TemporaryDirectory() as tmp:
            write(tmp)
            same = [filecmp.cmp(os.path.join(tmp, f), os.path.join(FIXTURES, f), shallow=False) for f in FILES]
        for f, ok in zip(FILES, same):
            print(f"{'OK' if ok else 'NOT OK':7} {f}: {'the same bytes' if ok else 'differs from a fresh run'}")
        sys.exit(0 if all(same) else 1)
    write(FIXTURES)
