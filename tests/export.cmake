st_add_test(test_export integration TIMEOUT 300)
st_add_test(test_observe integration TIMEOUT 300)
