st_add_test(test_parts unit)
st_add_test(test_timers_doc unit)
