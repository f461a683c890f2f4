# Fuzz targets (tests/fuzz/, docs/fuzzing.md): one per decoder family. In an ordinary build
# each links tests/fuzz/standalone.c and ctest runs it (label fuzz) over its seed corpus
# plus random mutations for FUZZ_SECONDS; with -DSWARMTRAIN_FUZZ=ON (clang) each links
# libFuzzer instead, for tools/fuzz's coverage-guided runs (there ctest runs them briefly too).
set(ST_FUZZ_SECONDS 3 CACHE STRING "Seconds ctest gives each fuzz target")
set(ST_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
file(GLOB ST_FUZZ_SOURCES CONFIGURE_DEPENDS ${ST_FUZZ_DIR}/fuzz_*.c)
add_custom_target(fuzz_all)
foreach(src ${ST_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" t ${name})
  if(SWARMTRAIN_FUZZ)
    add_executable(${name} ${ST_FUZZ_DIR}/${name}.c ${ST_FUZZ_DIR}/libfuzzer.c)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    # new inputs go to the first corpus directory: the build's, never the committed one
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/corpus/${t})
    add_test(NAME ${name} COMMAND ${name} -max_total_time=${ST_FUZZ_SECONDS} -print_final_stats=1
             -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/ ${CMAKE_BINARY_DIR}/corpus/${t}
             ${ST_FUZZ_DIR}/corpus/${t})
  else()
    add_executable(${name} ${ST_FUZZ_DIR}/${name}.c ${ST_FUZZ_DIR}/standalone.c)
    add_test(NAME ${name} COMMAND ${name} -seconds=${ST_FUZZ_SECONDS} ${ST_FUZZ_DIR}/corpus/${t})
  endif()
  target_link_libraries(${name} PRIVATE st_peer)
  target_include_directories(${name} PRIVATE ${ST_FUZZ_DIR})
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 120
    ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE;OMP_NUM_THREADS=1")
  add_dependencies(fuzz_all ${name})
endforeach()
# fuzz_http reads swarm/http.c's own (static) parsers; fuzz_json the status tool's reader.
if(TARGET fuzz_http)
  target_link_libraries(fuzz_http PRIVATE PkgConfig::CURL PkgConfig::SODIUM)
endif()
if(TARGET fuzz_json)
  target_sources(fuzz_json PRIVATE ${CMAKE_SOURCE_DIR}/tools/json.c)
  st_include_root(fuzz_json tools PRIVATE)
endif()
if(TARGET fuzz_store)
  target_link_libraries(fuzz_store PRIVATE PkgConfig::SQLITE3)
endif()
