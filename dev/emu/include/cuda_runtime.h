// Under emulation (dev/emu/emu_build.sh puts this folder first on the include
// path) the CUDA runtime header is the emulator.
#include "../cuda_emu.h"
