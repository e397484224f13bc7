# pallas_add_aot(NAME GENERATOR <target> ARCHS sm_90a [sm_80 ...])
#
# Runs the generator program (your kernels, linked with pallas; its main() calls
# pallas::aot::generator_main) at build time. The result is ${NAME}.h in the build tree: the
# kernels' cubins for ARCHS, and one launch function per kernel in namespace NAME. The INTERFACE
# target NAME carries the header's directory and pallas::aot_runtime: a program that links NAME
# needs only the CUDA driver at run time, no NVRTC and no Pallas library. Defined by
# add_subdirectory(pallas) and by find_package(pallas) alike (where the CUDA backend was built).
function(pallas_add_aot NAME)
  cmake_parse_arguments(A "" "GENERATOR" "ARCHS" ${ARGN})
  if(NOT A_GENERATOR OR NOT A_ARCHS)
    message(FATAL_ERROR "pallas_add_aot(${NAME}): GENERATOR and ARCHS are required")
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${NAME}_aot)
  list(JOIN A_ARCHS "," archs)
  add_custom_command(OUTPUT ${dir}/${NAME}.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
    COMMAND ${CMAKE_COMMAND} -E env PALLAS_NO_DISK_CACHE=1 $<TARGET_FILE:${A_GENERATOR}> --out ${dir}/${NAME}.h --arch ${archs} --namespace ${NAME}
    DEPENDS ${A_GENERATOR}
    COMMENT "Pallas AOT: compiling ${NAME} for ${archs}")
  add_custom_target(${NAME}_generate DEPENDS ${dir}/${NAME}.h)
  add_library(${NAME} INTERFACE)
  add_dependencies(${NAME} ${NAME}_generate)
  target_include_directories(${NAME} INTERFACE ${dir})
  target_link_libraries(${NAME} INTERFACE pallas::aot_runtime)
endfunction()
