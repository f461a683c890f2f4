st_add_test(test_export integration TIMEOUT 300)
