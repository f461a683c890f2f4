st_add_test(test_parts unit)
