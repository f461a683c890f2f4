# The Debian package (tools/package): built around the tested binary, extracted with dpkg -x
# into a temporary root; the installed binary's --version and a short train. Skipped (77)
# without dpkg-deb.
add_test(NAME package COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_package.sh ${CMAKE_SOURCE_DIR}
         $<TARGET_FILE:swarmtrain>)
set_tests_properties(package PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE")
