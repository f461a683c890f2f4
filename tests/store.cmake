st_add_test(test_store unit)
st_add_test(test_store_fault fault TIMEOUT 600)
