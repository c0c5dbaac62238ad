# Sourced by the train_mlp tests: writes a small fake Fashion-MNIST, so that the
# tests need no download. Images are tinyshakespeare's bytes as pixels; label i is
# (i * 7 + pixel 0 of image i) mod 10: deterministic and a little learnable.
#     source dev/test/fake_fashion_mnist.sh
#     make_split DIR train 1200 1 && make_split DIR t10k 300 800001
# (run from the repository root; OFFSET is the byte of input.txt the images start at)

# a big-endian 32-bit integer, as idx headers store them
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }

make_split() { # DIR NAME N OFFSET
    local dir=$1 name=$2 n=$3 off=$4
    { be32 2051; be32 "$n"; be32 28; be32 28; tail -c +"$off" data/tinyshakespeare/input.txt | head -c $((n * 784)); } | gzip -n > "$dir/$name-images-idx3-ubyte.gz"
    { be32 2049; be32 "$n"; tail -c +"$off" data/tinyshakespeare/input.txt | head -c $((n * 784)) | od -An -v -tu1 -w784 |
        awk '{ printf "%c", (NR * 7 + $1) % 10 + 1 }' | tr '\001-\012' '\000-\011'; } | gzip -n > "$dir/$name-labels-idx1-ubyte.gz"
}
