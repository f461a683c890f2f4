st_add_test(test_store unit)
st_add_test(test_store_fault fault TIMEOUT 600)
# Its kills are timed against a write's measured length: alone on the machine, so that
# another test's load does not stretch the writes it calibrated (ctest -j).
set_tests_properties(test_store_fault PROPERTIES RUN_SERIAL TRUE)
