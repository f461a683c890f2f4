# The record of what happened (common/events.c) read back by tools/json.c, as local and
# the tests read it.
st_add_test(test_events unit)
target_sources(test_events PRIVATE ${CMAKE_SOURCE_DIR}/tools/json.c)
st_include_root(test_events tools PRIVATE)
