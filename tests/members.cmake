st_add_test(test_members unit)
