st_add_test(test_msg unit)
