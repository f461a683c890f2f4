st_add_test(test_path unit)
