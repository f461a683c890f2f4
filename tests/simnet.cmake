st_add_test(test_sim unit)
