st_add_test(test_model unit TIMEOUT 900)
