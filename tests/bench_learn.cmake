# tests/bench_learn.cmake — `swarmtrain bench learn` in a very small form: the structure
# of its --json output (issue 27). It runs a local swarm: one at a time (RESOURCE_LOCK).
add_executable(test_bench_learn ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_learn.c
  ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c ${CMAKE_SOURCE_DIR}/tools/json.c)
target_link_libraries(test_bench_learn PRIVATE st_peer PkgConfig::CMOCKA)
st_include_root(test_bench_learn tools PRIVATE)
add_test(NAME test_bench_learn COMMAND test_bench_learn)
set_tests_properties(test_bench_learn PROPERTIES LABELS integration TIMEOUT 240 SKIP_RETURN_CODE 77
  RESOURCE_LOCK swarm
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE")

# What the total is made of: bench learn's cost parts (tools/bench_cost.c), on rows made
# up here.
st_add_test(test_bench_cost unit)
target_sources(test_bench_cost PRIVATE ${CMAKE_SOURCE_DIR}/tools/bench_cost.c
  ${CMAKE_SOURCE_DIR}/tools/numbers.c)
st_include_root(test_bench_cost tools PRIVATE)
