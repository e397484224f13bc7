# CTest build.installed_package: the installed package works for a consumer (issue 31).
# Installs this build tree (cmake --install, so the library is not rebuilt), moves the installed
# tree elsewhere (the package must be relocatable), then configures, builds and runs
# tests/consumer: find_package(pallas), no C++ standard of its own, an interpret-mode kernel,
# and with the CUDA backend pallas_add_aot and the AOT runtime.
# Run as: cmake -DBINARY=<build dir> -DSRC=<pallas source> -DWORK=<scratch dir>
#   -DGENERATOR=<cmake generator> -DCXX=<compiler> [-DLAUNCHER=<ccache>] -DHAVE_CUDA=ON|OFF -P this
cmake_policy(SET CMP0007 NEW)
file(REMOVE_RECURSE ${WORK})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
endfunction()

run("cmake --install ${BINARY} (build the default target first)"
    ${CMAKE_COMMAND} --install ${BINARY} --prefix ${WORK}/staged)
file(RENAME ${WORK}/staged ${WORK}/prefix)

# Nothing in the package may point at the build, the sources or where it was installed.
file(GLOB_RECURSE package_files ${WORK}/prefix/*.cmake)
if(NOT package_files)
  message(FATAL_ERROR "no CMake package files under ${WORK}/prefix")
endif()
foreach(f ${package_files})
  file(READ ${f} text)
  foreach(path ${BINARY} ${SRC} ${WORK}/staged)
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names ${path}: the installed package is not relocatable")
    endif()
  endforeach()
endforeach()

set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
# No CMAKE_CXX_STANDARD and no build type: the package alone must make the headers compile.
run("configuring tests/consumer against the installed package"
    ${CMAKE_COMMAND} -S ${SRC}/tests/consumer -B ${WORK}/build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
    ${launcher} -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
file(READ ${WORK}/build/compile_commands.json commands)
string(REGEX MATCH "\"command\": \"[^\"]*/app\\.cc\"" app_command "${commands}")
if(NOT app_command MATCHES "-std=(gnu|c)\\+\\+20")
  message(FATAL_ERROR "consumer_app is not compiled as C++20 (${app_command}): pallas::pallas must require it")
endif()
run("building tests/consumer" ${CMAKE_COMMAND} --build ${WORK}/build -j 2)

execute_process(COMMAND ${WORK}/build/consumer_app RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "interpret kernel ok, kernels::softmax ok")
  message(FATAL_ERROR "consumer_app failed (${rc}):\n${out}")
endif()
message(STATUS "consumer_app: ${out}")

if(HAVE_CUDA)
  if(NOT EXISTS ${WORK}/build/consumer_aot)
    message(FATAL_ERROR "the package has the CUDA backend but the consumer's AOT program was not built")
  endif()
  run("the AOT program's dependencies" ${CMAKE_COMMAND} -DBINARY=${WORK}/build/consumer_aot
      -P ${SRC}/examples/aot/check_no_nvrtc.cmake)
  execute_process(COMMAND ${WORK}/build/consumer_aot RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 77)
    message(STATUS "consumer_aot built with pallas_add_aot; not run (no usable GPU): ${out}")
  elseif(rc EQUAL 0 AND out MATCHES "ok")
    message(STATUS "consumer_aot: ${out}")
  else()
    message(FATAL_ERROR "consumer_aot failed (${rc}):\n${out}")
  endif()
endif()
message(STATUS "the installed package builds and runs a consumer")
