# qs_add_qtest(<name> SOURCES ... [LIBS ...] [LABELS ...] [GUI] [GPU] [TIMEOUT s])
#
# One Qt Test program per module. After each build the program is asked for its test functions
# (`-functions`) and every function becomes its own ctest entry `<name>.<function>`, the way
# gtest_discover_tests does it, so adding a test function needs no CMake edit.
#   GUI: runs with QT_QPA_PLATFORM=offscreen (widget tests), label `gui`.
#   GPU: label `gpu`; the CPU run (`ctest -LE gpu`) leaves it out.
set(QS_QTEST_DISCOVER_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/QsDiscoverQtTests.cmake)

function(qs_add_qtest name)
  cmake_parse_arguments(ARG "GUI;GPU" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Qt6::Test ${ARG_LIBS})
  target_compile_definitions(${name} PRIVATE
    QS_SOURCE_DIR="${PROJECT_SOURCE_DIR}" QS_DATASETS_DIR="${QS_DATASETS_DIR}"
    QS_BINARY_DIR="${PROJECT_BINARY_DIR}" QS_PYTHON="${QS_PYTHON}")
  set(labels ${ARG_LABELS})
  set(env "QS_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_GUI)
    list(APPEND labels gui)
    list(APPEND env "QT_QPA_PLATFORM=offscreen")
  endif()
  if(ARG_GPU)
    list(APPEND labels gpu)
  else()
    list(APPEND labels cpu)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(list_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_tests.cmake)
  string(REPLACE ";" "|" labels_arg "${labels}")
  string(REPLACE ";" "|" env_arg "${env}")
  add_custom_command(TARGET ${name} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DTEST_EXE=$<TARGET_FILE:${name}> -DTEST_PREFIX=${name}
            "-DTEST_LABELS=${labels_arg}" "-DTEST_ENV=${env_arg}" -DTEST_TIMEOUT=${ARG_TIMEOUT}
            -DOUT_FILE=${list_file} -P ${QS_QTEST_DISCOVER_SCRIPT}
    BYPRODUCTS ${list_file}
    COMMENT "Listing the test functions of ${name}"
    VERBATIM)
  # ctest reads this at test time; before the first build it registers a failing placeholder.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS \"${list_file}\")\n  include(\"${list_file}\")\nelse()\n"
    "  add_test(${name}_NOT_BUILT ${name}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
