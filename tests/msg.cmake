st_add_test(test_msg unit)
st_add_test(test_xfer unit)
