st_add_test(test_export integration TIMEOUT 300)
st_add_test(test_observe integration TIMEOUT 300)
# test_observe reads status --json's store events with the tools' JSON reader
target_sources(test_observe PRIVATE ${CMAKE_SOURCE_DIR}/tools/json.c)
st_include_root(test_observe tools PRIVATE)
