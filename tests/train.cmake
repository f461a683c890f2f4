st_add_test(test_train integration TIMEOUT 900)
