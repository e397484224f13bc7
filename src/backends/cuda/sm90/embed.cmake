# Writes device_sources.inc: the sm_90a device headers as C++ raw strings (run at build time).
file(READ ${SRC}/hopper.cuh HOPPER)
file(READ ${SRC}/wgmma_ops.inc WGMMA)
file(READ ${SRC}/gemm_sm90.cuh GEMM)
file(READ ${SRC}/attention_sm90.cuh ATTN)

string(REPLACE "#include \"wgmma_ops.inc\"" "${WGMMA}" HOPPER "${HOPPER}")
string(REPLACE "#include \"hopper.cuh\"" "" GEMM "${GEMM}")
string(REPLACE "#pragma once" "" HOPPER "${HOPPER}")
string(REPLACE "#pragma once" "" GEMM "${GEMM}")
string(REPLACE "#include \"hopper.cuh\"" "" ATTN "${ATTN}")
string(REPLACE "#pragma once" "" ATTN "${ATTN}")
file(WRITE ${OUT} "// Generated from src/backends/cuda/device by embed.cmake.\nstatic const char kHopperCuh[] = R\"PALLASDEV(${HOPPER})PALLASDEV\";\nstatic const char kGemmSm90Cuh[] = R\"PALLASDEV(${GEMM})PALLASDEV\";\nstatic const char kAttentionSm90Cuh[] = R\"PALLASDEV(${ATTN})PALLASDEV\";\n")
