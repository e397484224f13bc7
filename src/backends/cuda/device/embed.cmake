# Writes device_sources.inc: the device headers the generated kernels include, as C++ raw strings
# (run at build time), so NVRTC compiles them from memory.
file(READ ${SRC}/tma.cuh TMA)
string(REPLACE "#pragma once" "" TMA "${TMA}")
file(WRITE ${OUT} "// Generated from src/backends/cuda/device by embed.cmake.\nstatic const char kTmaCuh[] = R\"PALLASDEV(${TMA})PALLASDEV\";\n")
