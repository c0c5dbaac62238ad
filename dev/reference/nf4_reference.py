"""
The independent reference for finetune_lora.c's 4-bit weights: bitsandbytes' own
quantize_4bit / dequantize_4bit (NF4 and FP4, with and without double quantization) on the
CPU, on shapes that do and do not divide the blocksizes.

For each case (a tensor, a blocksize, a quant type) we store what bitsandbytes computes:
    c<i>.input          the float32 tensor, flattened
    c<i>.config         int32 [blocksize, quant type: 1 nf4, 2 fp4]
    c<i>.packed         quantize_4bit(input, blocksize, quant_type): the packed bytes, two
                        codes per byte, the first element in the high nibble
    c<i>.absmax         ... its fp32 absmax per block (compress_statistics=False)
    c<i>.qabsmax        with compress_statistics=True (double quantization): the absmax values
                        minus their mean (the offset), quantized blockwise (256) with the signed
                        8-bit dynamic map
    c<i>.nested_absmax  ... the fp32 absmax of each of those blocks of 256
    c<i>.offset         ... the mean (1 value)
    c<i>.dequant        dequantize_4bit of the double-quantized state (float32; see dequantize()
                        below for which of bitsandbytes' implementations)
    c<i>.dequant_plain  ... of the plain one
and once:
    dynamic_map         create_dynamic_map(signed=True): the 256 values of the second level
    sum<k>.input, sum<k>.value, sum<k>.mean  torch's sum and mean of a float32 vector
    bigsum.n, bigsum.value, bigsum.mean   ... of long ones whose values come from a formula
The settings and versions are JSON in the metadata under "settings".

Why ATEN_CPU_CAPABILITY=avx2 and one thread: double quantization subtracts the mean of the
absmax values, and torch sums a float32 vector in an order that depends on its vector width
(8 lanes with AVX2, 16 with AVX-512) and, past 32,768 values, on its thread count. We pin the
commonest (AVX2, one thread) so the fixture does not depend on the machine that made it;
finetune_lora.c sums in that order (torch_sum_f32). Elsewhere the offset can differ from ours
in its last bit (on a GPU bitsandbytes sums with CUDA, in another order again).

Run from the repository root (pinned: torch 2.9.1, bitsandbytes 0.50.2):
    python dev/reference/nf4_reference.py
"""

import os

os.environ["ATEN_CPU_CAPABILITY"] = "avx2"  # before torch loads: see above
os.environ["TORCHDYNAMO_DISABLE"] = "1"  # bitsandbytes compiles its fallbacks with torch.compile: the same arithmetic, without the wait

import json
import sys

import numpy as np
import torch
import bitsandbytes
import bitsandbytes.functional as F
import bitsandbytes.backends.default.ops as default_ops
from safetensors.torch import save_file

torch.set_num_threads(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "nf4_cases.safetensors")
SEED = 20261202


def nf4_boundaries(quant_type):
    """The points halfway between neighbouring codes, as bitsandbytes computes them (fp32)."""
    code = F.get_4bit_type(quant_type, device="cpu")
    s, _ = torch.sort(code)
    return ((s[:-1] + s[1:]) / 2).tolist()


def dequantize(packed, st):
    """dequantize_4bit as bitsandbytes' portable implementation computes it (the one its CPU
    backend uses for odd row lengths, and what its CUDA kernel computes): value = code[nibble]
    * absmax[element / blocksize], blocks running through the flattened tensor. Its C++ CPU
    kernel takes an AVX-512 path when a row's length is a multiple of 16, and there (0.50.2)
    looks the absmax up per row, as if every row began a block: wrong when the row length is
    not a multiple of the blocksize (64x96 at blocksize 64, below). The cases where it differs
    are listed in the metadata ("cpp_dequantize_differs"; empty on a CPU without AVX-512)."""
    absmax = st.absmax
    if st.nested:
        absmax = F.dequantize_blockwise(st.absmax, st.state2) + st.offset
    code = F.get_4bit_type(st.quant_type, device="cpu")
    return default_ops._dequantize_4bit_compute(packed.reshape(-1), absmax.float(), code, st.blocksize, st.shape, torch.float32)


def make_cases(rng):
    """(name, tensor, blocksize, quant_type): shapes that divide the blocksize and ones that don't"""
    cases = []

    def randn(*shape, scale=0.05):
        return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))

    for qt in ("nf4", "fp4"):
        cases.append((f"{qt} 64x96 blocksize 64", randn(64, 96), 64, qt))
        cases.append((f"{qt} 7x9 (63: one partial block)", randn(7, 9), 64, qt))
        cases.append((f"{qt} 33x17 (odd count: padded byte)", randn(33, 17), 64, qt))
        cases.append((f"{qt} 130x200 (407 blocks: 2 nested blocks)", randn(130, 200, scale=0.02), 64, qt))
        # a block of zeros, a block with one large value, a negative largest value
        t = randn(5, 64)
        t[1] = 0.0
        t[2, 7] = 3.0
        t[3, 11] = -2.5
        cases.append((f"{qt} zero and outlier blocks", t, 64, qt))
        # values exactly on the boundaries between codes, scaled by a block absmax of 1
        b = nf4_boundaries(qt)
        row = [1.0] + b + [-x for x in b] + [0.0, -0.0]
        row = row + [0.5] * (64 - len(row) % 64) if len(row) % 64 else row
        cases.append((f"{qt} boundaries between codes", torch.tensor(row, dtype=torch.float32).reshape(1, -1), 64, qt))
    for bs in (32, 128, 256, 512, 1024, 2048, 4096):
        cases.append((f"nf4 blocksize {bs} 50x123", randn(50, 123), bs, "nf4"))
    cases.append(("fp4 blocksize 128 41x77", randn(41, 77), 128, "fp4"))
    cases.append(("nf4 64x576 (a band of SmolLM2's k_proj: 576 blocks)", randn(64, 576, scale=0.03), 64, "nf4"))
    cases.append(("nf4 1x300 (a vector)", randn(300), 64, "nf4"))
    return cases


def main():
    rng = np.random.default_rng(SEED)
    tensors = {}
    settings = {"torch": torch.__version__, "bitsandbytes": bitsandbytes.__version__,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
                "cases": [], "sums": [], "cpp_dequantize_differs": []}
    if settings["cpu_capability"] != "AVX2":
        sys.exit(f"torch's CPU capability is {settings['cpu_capability']}, not AVX2: ATEN_CPU_CAPABILITY=avx2 did not take")
    for i, (name, t, bs, qt) in enumerate(make_cases(rng)):
        packed, st = F.quantize_4bit(t, blocksize=bs, quant_type=qt, compress_statistics=False)
        packed2, st2 = F.quantize_4bit(t, blocksize=bs, quant_type=qt, compress_statistics=True)
        assert torch.equal(packed, packed2)
        deq, deq_plain = dequantize(packed2, st2), dequantize(packed, st)
        cpp, cpp_plain = F.dequantize_4bit(packed2, st2).reshape(-1), F.dequantize_4bit(packed, st).reshape(-1)
        if not (torch.equal(deq.reshape(-1), cpp) and torch.equal(deq_plain.reshape(-1), cpp_plain)):
            settings["cpp_dequantize_differs"].append(name)
        p = f"c{i}."
        tensors[p + "input"] = t.reshape(-1).contiguous()
        tensors[p + "config"] = torch.tensor([bs, 1 if qt == "nf4" else 2], dtype=torch.int32)
        tensors[p + "packed"] = packed.reshape(-1).contiguous()
        tensors[p + "absmax"] = st.absmax.contiguous()
        tensors[p + "qabsmax"] = st2.absmax.contiguous()
        tensors[p + "nested_absmax"] = st2.state2.absmax.contiguous()
        tensors[p + "offset"] = st2.offset.reshape(1).float().contiguous()
        tensors[p + "dequant"] = deq.reshape(-1).contiguous()
        tensors[p + "dequant_plain"] = deq_plain.reshape(-1).contiguous()
        settings["cases"].append({"name": name, "shape": list(t.shape), "blocksize": bs, "quant_type": qt})
        if i == 0:
            tensors["dynamic_map"] = st2.state2.code.contiguous()
    for k, n in enumerate([1, 5, 7, 8, 17, 31, 32, 33, 100, 127, 128, 129, 255, 256, 513, 1000, 4097, 20000, 32767]):
        v = torch.from_numpy(rng.random(n).astype(np.float32) * 0.1)
        tensors[f"sum{k}.input"] = v
        tensors[f"sum{k}.value"] = v.sum().reshape(1)
        tensors[f"sum{k}.mean"] = v.mean().reshape(1)
        settings["sums"].append(n)
    # long vectors (the sum's upper levels: a Llama 3.1 8B band has 917,504 blocks), their
    # values from a formula the C test computes too: ((i * 2654435761) mod 2^32 mod 1000) / 1000
    big = [100000, 917504, 1048577]
    tensors["bigsum.n"] = torch.tensor(big, dtype=torch.int32)
    values, means = [], []
    for n in big:
        i = np.arange(n, dtype=np.uint64)
        v = torch.from_numpy(((i * np.uint64(2654435761)) % np.uint64(2**32) % np.uint64(1000)).astype(np.float32) / np.float32(1000))
        values.append(v.sum().item())
        means.append(v.mean().item())
    tensors["bigsum.value"] = torch.tensor(values, dtype=torch.float32)
    tensors["bigsum.mean"] = torch.tensor(means, dtype=torch.float32)
    save_file(tensors, OUT, metadata={"settings": json.dumps(settings)})
    if settings["cpp_dequantize_differs"]:
        print("bitsandbytes' C++ CPU dequantize_4bit (AVX-512) differs from its portable one on:", ", ".join(settings["cpp_dequantize_differs"]))
    print(f"wrote {OUT}: {len(settings['cases'])} cases, {len(settings['sums'])} sums")


if __name__ == "__main__":
    main()
