"""
Writes the fixtures that test_tokenizer.c checks data/tokenizer.c against: what tiktoken's
GPT-2 encoding makes of Tiny Shakespeare and of a UTF-8 stress text. CI has no Python, so the
outputs are committed; rerun this only to regenerate them.

We build tiktoken's "gpt2" encoding offline from the bundled files (tiktoken's own
get_encoding("gpt2") would download them), exactly as tiktoken_ext/openai_public.py does, but
with GPT-2's original pattern written out. We also check that this is the real thing:
  - data/gpt2/{encoder.json,vocab.bpe} have the sha256 that tiktoken pins for GPT-2,
  - the original pattern and the (possessive, faster) pattern tiktoken itself ships for r50k
    give identical tokens on every text we write.

Outputs in dev/reference/fixtures/ (shards: 256 x int32 header [20240520, 1, count], uint16 ids):
  tiny_shakespeare_ordinary.bin   encode_ordinary(whole input.txt)
  tiny_shakespeare_val.bin        the llm.c convention: [EOT] + encode_ordinary(section + "\\n\\n")
  tiny_shakespeare_train.bin        per "\\n\\n" section, first 32768 tokens val, the rest train
  utf8_stress.txt                 the stress text below, as UTF-8
  utf8_stress_ordinary.bin        encode_ordinary(stress)
  utf8_stress_special.bin         encode(stress, allowed_special={"<|endoftext|>"})
  gpt2_tokenizer.fnv1a64          FNV-1a 64 hash (hex) of the tokenizer.bin that tiktoken's
                                  decode_single_token_bytes implies for ids 0..50256

Run from the repository root (pinned: tiktoken==0.14.0, numpy):
    python dev/reference/tokenizer_reference.py
"""

import hashlib
import os
import sys

import numpy as np

# read_file_cached would copy local files into a cache keyed by path and later serve the
# stale copy if the file changed; an empty cache dir turns that off. Must precede the import.
os.environ["TIKTOKEN_CACHE_DIR"] = ""
import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402

PINNED_TIKTOKEN = "0.14.0"
GPT2_DIR = os.path.join("data", "gpt2")
INPUT = os.path.join("data", "tinyshakespeare", "input.txt")
OUT_DIR = os.path.join("dev", "reference", "fixtures")
VAL_TOKENS = 32768
EOT = 50256
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# the sha256 of GPT-2's files, as pinned in tiktoken_ext/openai_public.py
GPT2_SHA256 = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}

# The stress text: every way we could think of to trip up a hand-written pre-tokenizer.
# Written with escapes so that no editor can silently change a space, a CR or a combining mark.
STRESS_TEXT = "".join([
    "Hello world! It's a test. IT'S LOUD. She'll, we'LL, they'Ll, you're, YOU'RE, You'Re, I'm, I'M,\n",
    "we've, WE'VE, he'd, HE'D, don't, DON'T, it's's, 'sand 'tis 'rex 'velvet 'mom 'llama 'dad 'x '\n",
    "Ends in an apostrophe: '\n",
    "Curly: it\u2019s, don\u2019t, \u2018quoted\u2019 and \u201cdouble\u201d, mixed it\u2019s'd. Spaced: ' s, '' ''' ?'s !'re\n",
    "Accents precomposed: caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00d8re Stra\u00dfe \u0130stanbul \u01c5 \u1e9e.\n",
    "Decomposed: cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m.\n",
    "Combining marks alone and stacked: \u0301\u0302 x\u0336\u0336y a\u20dd z\u0351\u0352\u0353 \u0301a 1\u0301 !\u0301\n",
    "CJK: \u6f22\u5b57\u304b\u306a\u4ea4\u3058\u308a\u6587\u3001\u30ab\u30bf\u30ab\u30ca\u3001\u4e2d\u6587\u6d4b\u8bd5\u3002 ",
    "\u3007\u4e00\u4e8c\u4e09 \U00020000\U0002a6d6\n",
    "Hangul: \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8, jamo \u1112\u1161\u11ab\u1100\u1173\u11af.\n",
    "Arabic: \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663 \u0627\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629 ",
    "Hebrew: \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd\n",
    "Devanagari: \u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0967\u0968\u0969 ",
    "Thai: \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e51\u0e52\u0e53\n",
    "Emoji: \U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 ",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f1e9\U0001f1ea\U0001f1ef\U0001f1f5 \u2764\ufe0f 1\ufe0f\u20e3 #\ufe0f\u20e3 ",
    "\U0001f469\U0001f3fe\u200d\U0001f4bb\U0001f600\U0001f600 a\U0001f600b\n",
    "Numbers: \u216b \u2177 \u00bd \u00be \u00b2 \u00b3 \u2074 \u2085 \u2460 \u2473 \uff10\uff11\uff12\uff13 ",
    "\U00010107 \u3038 \u2189 12345678901234567890 3.14159 1,000,000 -42 +7 0x1F 1e-9 a1b2 1a 2nd x\u00b2\n",
    "Spaces:  two   three    four\ttab\t\ttabs \t mixed\r\nCRLF\r\nlone CR\rhere  \n",
    "trailing spaces   \n   leading spaces\n\n\n\nblank lines\n \n \n\t\n",
    "Unicode spaces: NBSP\u00a0a\u00a0\u00a0b a\u00a0 b, thin\u2009space, ideographic\u3000\u3000space, em\u2003space, ",
    "line\u2028sep, para\u2029sep, nel\u0085x, vt\u000bff\u000cx, ogham\u1680x, narrow\u202fnbsp, math\u205fspace\n",
    "Not spaces: zwsp\u200bx, mvs\u180ex, bom\ufeffx, shy\u00adx, zwnj\u200cx, private\ue000x\n",
    "Leading space: a  a   1  1   ! !  !   $5 \u20ac5 +1 -x .. \u00a0a \u30001 \t!\n",
    "Specials: <|endoftext|> a<|endoftext|>b  <|endoftext|>\n<|endoftext|><|endoftext|> 'll<|endoftext|>'s ",
    "<|endoftext| <|endoftext|>> <<|endoftext|> <|ENDOFTEXT|> <|end of text|> endoftext|>\n",
    "Punctuation: !!! ??? ... --- *** ((())) [[]] {{}} ''' \"\"\" ,,, ;;; ::: @@@ ### $$$ %%% ^^^ &&& ___ ~~~ ``` |||\n",
    "Code: def f(x): return x**2  # comment\n\tif (a && b) { c->d[0] = \"s\\n\"; }\n",
    # Unicode 16 added these letters and digits; Unicode 17 added the next two, which tiktoken's
    # regex (Unicode 16) does not yet know, so they must stay 'other' symbols. A wrong class
    # often changes only where pieces split, not the tokens (no token spans the split), so
    # each also stands before 's: after a letter or number that is the token "'s", after an
    # 'other' symbol the apostrophe joins the symbol run and "s" is left on its own.
    "Unicode 16: a\u1c89\u1c8ab \u1c89's 1\U00010d40\U00010d412 \U00010d40's ",
    "Unicode 17: x\u088fy \u088f's 7\U00011de07 \U00011de0's\n",
    "Control chars: \x00\x01\x1f\x7f end",
    "  \t \n  ",  # a whitespace run at the very end is kept whole
])


def check_inputs():
    for name, expected in GPT2_SHA256.items():
        path = os.path.join(GPT2_DIR, name)
        with open(path, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
        if actual != expected:
            sys.exit(f"Error: {path} has sha256 {actual}, GPT-2's is {expected}")


def build_encodings():
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(GPT2_DIR, "vocab.bpe"),
        encoder_json_file=os.path.join(GPT2_DIR, "encoder.json"))
    kwargs = dict(mergeable_ranks=ranks, special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)
    enc = tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, **kwargs)
    # tiktoken's shipped r50k pattern: same language, rewritten with possessive quantifiers
    from tiktoken_ext.openai_public import r50k_pat_str
    shipped = tiktoken.Encoding(name="gpt2_shipped_pattern", pat_str=r50k_pat_str, **kwargs)
    return enc, shipped


def write_shard(path, tokens):
    tokens = np.asarray(tokens, dtype=np.int64)
    assert tokens.size < 2**31 and (tokens >= 0).all() and (tokens < 2**16).all()
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    print(f"wrote {path}: {tokens.size} tokens")


def llmc_split(enc, text):
    # exactly llm.c's dev/data/tinyshakespeare.py (the encode_ordinary version)
    sections = text.split("\n\n")
    tokens = []
    for i, s in enumerate(sections):
        tokens.append(EOT)
        spad = s + "\n\n" if i != len(sections) - 1 else s
        tokens.extend(enc.encode_ordinary(spad))
    return tokens


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def tokenizer_bin_bytes(enc):
    # the llm.c tokenizer.bin that tiktoken's own token bytes imply
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2], header[3] = 20240328, 2, enc.n_vocab, EOT
    out = bytearray(header.tobytes())
    for i in range(enc.n_vocab):
        b = enc.decode_single_token_bytes(i)
        assert 0 < len(b) < 256
        out.append(len(b))
        out += b
    return bytes(out)


def main():
    if tiktoken.__version__ != PINNED_TIKTOKEN:
        print(f"WARNING: tiktoken {tiktoken.__version__}, the fixtures were made with {PINNED_TIKTOKEN}")
    unicode_version = "unknown"
    with open(os.path.join("lib", "unicode_tables.h")) as f:
        for line in f:
            if line.startswith("#define UNICODE_TABLES_VERSION"):
                unicode_version = line.split('"')[1]
    print(f"tiktoken {tiktoken.__version__}, numpy {np.__version__}, "
          f"Unicode {unicode_version} (lib/unicode_tables.h, checked against tiktoken by "
          f"dev/reference/gen_unicode_tables.py)")
    check_inputs()
    enc, shipped = build_encodings()
    assert enc.encode_ordinary("Hello world") == [15496, 995]
    os.makedirs(OUT_DIR, exist_ok=True)

    with open(INPUT, "r", encoding="utf-8", newline="") as f:
        shakespeare = f.read()
    ordinary = enc.encode_ordinary(shakespeare)
    split = llmc_split(enc, shakespeare)
    assert ordinary == shipped.encode_ordinary(shakespeare)
    assert split == llmc_split(shipped, shakespeare)
    write_shard(os.path.join(OUT_DIR, "tiny_shakespeare_ordinary.bin"), ordinary)
    write_shard(os.path.join(OUT_DIR, "tiny_shakespeare_val.bin"), split[:VAL_TOKENS])
    write_shard(os.path.join(OUT_DIR, "tiny_shakespeare_train.bin"), split[VAL_TOKENS:])

    stress_path = os.path.join(OUT_DIR, "utf8_stress.txt")
    with open(stress_path, "wb") as f:
        f.write(STRESS_TEXT.encode("utf-8"))
    print(f"wrote {stress_path}: {len(STRESS_TEXT.encode('utf-8'))} bytes")
    stress_ordinary = enc.encode_ordinary(STRESS_TEXT)
    stress_special = enc.encode(STRESS_TEXT, allowed_special={"<|endoftext|>"})
    assert stress_ordinary == shipped.encode_ordinary(STRESS_TEXT)
    assert stress_special == shipped.encode(STRESS_TEXT, allowed_special={"<|endoftext|>"})
    assert enc.decode_bytes(stress_ordinary) == STRESS_TEXT.encode("utf-8")
    write_shard(os.path.join(OUT_DIR, "utf8_stress_ordinary.bin"), stress_ordinary)
    write_shard(os.path.join(OUT_DIR, "utf8_stress_special.bin"), stress_special)

    digest_path = os.path.join(OUT_DIR, "gpt2_tokenizer.fnv1a64")
    with open(digest_path, "w") as f:
        f.write(f"{fnv1a64(tokenizer_bin_bytes(enc)):016x}\n")
    print(f"wrote {digest_path}")


if __name__ == "__main__":
    main()
