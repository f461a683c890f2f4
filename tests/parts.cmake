st_add_test(test_parts unit)
st_add_test(test_timers_doc unit)
# the member's shape on its sources: no field written from two files, no call loops
# between its parts, few fields of its own (issue 23)
add_test(NAME member_shape COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/member_shape.py ${CMAKE_SOURCE_DIR})
set_tests_properties(member_shape PROPERTIES LABELS unit TIMEOUT 60)
