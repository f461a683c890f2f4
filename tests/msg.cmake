st_add_test(test_msg unit)
st_add_test(test_xfer unit)
st_add_test(test_net_serve unit)
st_add_test(test_nat unit)
