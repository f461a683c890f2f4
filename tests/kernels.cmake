st_add_test(test_kernels unit)
