# Writes device_sources.inc: the sm_90a device headers as C++ raw strings (run at build time).
file(READ ${SRC}/tma.cuh TMA)
file(READ ${SRC}/hopper.cuh HOPPER)
file(READ ${SRC}/wgmma_ops.inc WGMMA)
file(READ ${SRC}/attention_sm90.cuh ATTN)

string(REPLACE "#pragma once" "" TMA "${TMA}")
string(REPLACE "#include \"wgmma_ops.inc\"" "${WGMMA}" HOPPER "${HOPPER}")
string(REPLACE "#include \"tma.cuh\"" "${TMA}" HOPPER "${HOPPER}")
string(REPLACE "#pragma once" "" HOPPER "${HOPPER}")
string(REPLACE "#include \"hopper.cuh\"" "" ATTN "${ATTN}")
string(REPLACE "#pragma once" "" ATTN "${ATTN}")
file(WRITE ${OUT} "// Generated from src/backends/cuda/device by embed.cmake.\nstatic const char kTmaCuh[] = R\"PALLASDEV(${TMA})PALLASDEV\";\nstatic const char kHopperCuh[] = R\"PALLASDEV(${HOPPER})PALLASDEV\";\nstatic const char kAttentionSm90Cuh[] = R\"PALLASDEV(${ATTN})PALLASDEV\";\n")
